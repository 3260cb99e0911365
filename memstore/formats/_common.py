"""Helpers shared by the format converters: input coercion, typed errors, tool-call JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar

from memstore.errors import FormatConversionError, InvalidInputError, InvalidMessageError
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest, UserMessage, parse_message

PARTICIPANT_NAME_KEY = "participant_name"
"""Canonical ``metadata`` key holding a participant name (OpenAI's and LangChain4j's ``name``)."""

T = TypeVar("T")


def fail(provider: str, index: int, detail: str) -> FormatConversionError:
    """The typed error for message ``index`` (``-1``: the list itself or the system parameter)."""
    where = f"{provider} message {index}" if index >= 0 else f"{provider} input"
    return FormatConversionError(f"{where}: {detail}", provider=provider, index=index)


def canonical(messages: Iterable[Message | Mapping[str, Any]], provider: str) -> list[Message]:
    """Canonical messages from instances or their dict form (``{"type": "user", ...}``)."""
    out: list[Message] = []
    for index, value in enumerate(messages):
        try:
            out.append(parse_message(dict(value) if isinstance(value, Mapping) else value))
        except InvalidMessageError as error:
            raise fail(provider, index, error.detail) from error
    return out


def build(provider: str, index: int, factory: Callable[..., T], /, **fields: Any) -> T:
    """Construct a canonical model, turning its validation error into a :func:`fail` error."""
    try:
        return factory(**fields)
    except InvalidMessageError as error:
        raise fail(provider, index, error.detail) from error


def mapping(provider: str, index: int, value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise fail(provider, index, f"{what} must be an object, got {type(value).__name__}")
    return value


def check_keys(
    provider: str, index: int, value: Mapping[str, Any], allowed: Iterable[str], what: str
) -> None:
    known = set(allowed)
    unknown = sorted(str(key) for key in value if key not in known)
    if unknown:
        raise fail(provider, index, f"{what} has unknown keys {unknown}")


def string(provider: str, index: int, value: object, what: str) -> str:
    if not isinstance(value, str):
        raise fail(provider, index, f"{what} must be a string, got {type(value).__name__}")
    return value


def tool_request(
    provider: str,
    index: int,
    call: Mapping[str, Any],
    where: str,
    *,
    id_key: str = "id",
    named: tuple[Mapping[str, Any], str] | None = None,
) -> ToolRequest:
    """The canonical request of a provider's tool call object ``call`` (at path ``where``,
    ``""`` for the message itself): its id under ``id_key``, its ``name`` and ``arguments`` in
    ``call`` or in the object ``named`` gives with its path (OpenAI's ``function``); each must
    be a string, else the error names its path."""
    fields, fields_where = named if named is not None else (call, where)
    return build(
        provider,
        index,
        ToolRequest,
        id=string(provider, index, call.get(id_key), _path(where, id_key)),
        name=string(provider, index, fields.get("name"), _path(fields_where, "name")),
        arguments=string(
            provider, index, fields.get("arguments"), _path(fields_where, "arguments")
        ),
    )


def _path(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def dumps_arguments(value: Mapping[str, Any]) -> str:
    """The canonical text of parsed tool arguments: ``json.dumps`` defaults, unicode kept."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def text_parts(
    provider: str,
    index: int,
    parts: object,
    what: str,
    *,
    text_type: str = "text",
    extra_keys: tuple[str, ...] = (),
) -> list[str]:
    """The texts of a list of ``{"type": "text", "text": ...}`` parts; other parts raise.

    ``extra_keys`` are keys a part may also carry; they are accepted and dropped (e.g.
    Anthropic's ``cache_control``).
    """
    if not isinstance(parts, list):
        raise fail(provider, index, f"{what} must be a string or a list of text parts")
    texts: list[str] = []
    for position, part in enumerate(parts):
        part = mapping(provider, index, part, f"{what}[{position}]")
        kind = part.get("type")
        if kind != text_type:
            raise fail(
                provider,
                index,
                f"{what}[{position}] has type {kind!r}; only {text_type!r} parts can be converted",
            )
        check_keys(provider, index, part, ("type", "text", *extra_keys), f"{what}[{position}]")
        texts.append(string(provider, index, part.get("text"), f"{what}[{position}].text"))
    return texts


class ToolNames:
    """Tool names by call id, as requested so far (a reused id binds to its latest request)."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}

    def add(self, requests: Iterable[ToolRequest]) -> None:
        for request in requests:
            self._names[request.id] = request.name

    def name(self, call_id: str) -> str:
        """The requested tool's name, or ``""`` when no earlier request carries ``call_id``."""
        return self._names.get(call_id, "")


ReasoningScope = Literal["all", "current", "none"]
REASONING_SCOPES: tuple[str, ...] = ("all", "current", "none")
"""Which reasoning a converter sends: ``"all"`` (the default: every part the target provider
produced, as it was), ``"current"`` (only that of AI messages after the last user message: the
tool loop in progress, which is all the providers require), ``"none"``."""


def reasoning_to_send(
    messages: list[Message], provider: str, scope: str
) -> list[tuple[Reasoning, ...]]:
    """Per message, the reasoning parts a request to ``provider`` carries: only parts that
    ``provider`` produced (a signature is bound to its provider: another one would refuse it,
    so they are left out on purpose, the text of the reply kept), within ``scope``."""
    if scope not in REASONING_SCOPES:
        raise InvalidInputError(f"reasoning must be one of {list(REASONING_SCOPES)}, got {scope!r}")
    start = 0
    if scope == "current":
        users = [i for i, message in enumerate(messages) if isinstance(message, UserMessage)]
        start = users[-1] + 1 if users else 0
    sent: list[tuple[Reasoning, ...]] = []
    for index, message in enumerate(messages):
        if scope == "none" or index < start or not isinstance(message, AiMessage):
            sent.append(())
        else:
            sent.append(tuple(part for part in message.reasoning if part.provider == provider))
    return sent
