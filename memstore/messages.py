"""The canonical message model: what memstore stores and what every format converts from.

>>> from memstore import AiMessage, ToolRequest, ToolResult, UserMessage
>>> turn = [
...     UserMessage(text="Create a.txt"),
...     AiMessage(text=None, tool_requests=[
...         ToolRequest(id="call_1", name="write_file", arguments='{"path": "a.txt"}')]),
...     ToolResult(id="call_1", tool_name="write_file", text="ok"),
...     AiMessage(text="Done."),
... ]

Construction errors raise :class:`~memstore.errors.InvalidMessageError` (a
:class:`~memstore.errors.MemstoreError`), not pydantic's ``ValidationError``, so one ``except``
covers every input problem.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
)

from memstore.core.metadata import (
    EMPTY_METADATA,
    FrozenDict,
    FrozenList,
    freeze_metadata,
    freeze_stored_metadata,
)
from memstore.errors import InvalidMessageError, describe_validation_error

STORED = {"memstore_stored": True}
"""Validation context of messages decoded from a stored row or cache entry: their metadata
was checked when written and is frozen without re-checking (older rows stay readable)."""


def _metadata(value: Any, info: ValidationInfo) -> Mapping[str, Any]:
    if isinstance(info.context, dict) and info.context.get("memstore_stored"):
        return freeze_stored_metadata(value)
    return freeze_metadata(value)


Metadata = Annotated[
    Mapping[str, Any], PlainValidator(_metadata, json_schema_input_type=dict[str, Any])
]
"""A message's metadata: plain JSON data (see :mod:`memstore.core.metadata`), immutable all
the way down (a read-only ``dict`` whose lists and objects are read-only too)."""


def _describe(error: ValidationError) -> str:
    return describe_validation_error(error, unnamed="message")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise InvalidMessageError(
                f"invalid {type(self).__name__}: {_describe(error)}"
            ) from error

    # Tell pydantic this __init__ is a plain one: direct construction still goes through it
    # (typed errors), but validate_json/validate_python of stored messages does not call
    # back into Python for every model, which made decoding a window three times slower.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


class ToolRequest(_Model):
    """One tool call requested by the model.

    ``arguments`` is the model's raw JSON text, stored and returned byte for byte; memstore
    never parses-and-reserialises it.
    """

    id: StrictStr = Field(min_length=1)
    name: StrictStr = Field(min_length=1)
    arguments: StrictStr


def _freeze_requests(value: Sequence[ToolRequest]) -> Sequence[ToolRequest]:
    return value if type(value) is FrozenList else FrozenList(value)


EMPTY_REQUESTS: Sequence[ToolRequest] = FrozenList()

ToolRequests = Annotated[Sequence[ToolRequest], AfterValidator(_freeze_requests)]
"""An AI message's tool requests: a read-only ``list`` (equal to a plain list of the same
requests; every change raises ``TypeError``)."""


class Reasoning(_Model):
    """One piece of the reasoning that came with a model reply, kept as the provider sent it.

    Reasoning models require the reasoning that led to a tool call to be sent back with that
    call, unmodified: Anthropic's ``thinking`` / ``redacted_thinking`` blocks (signature
    included), OpenAI's Responses ``reasoning`` items (with ``encrypted_content``), the
    ``reasoning_content`` of OpenAI-compatible servers, Gemini's thought signatures. memstore
    stores it with the :class:`AiMessage`, so a window never holds a call without its
    reasoning; it never reaches the display history, logs or errors.

    ``provider`` and ``kind`` say what it is (``"anthropic"`` + ``"thinking"`` or
    ``"redacted_thinking"``; ``"openai"`` + ``"reasoning"`` (a Responses item) or
    ``"reasoning_content"``; ``"google"`` + ``"thought"``); ``text`` is the readable part
    (thinking text, summary), ``signature`` the opaque part (signature, redacted data,
    ``encrypted_content``, thought signature), ``id`` the provider's item id, and ``extra``
    any other field of the provider's item, as JSON. Every value is kept byte for byte; a
    format renders reasoning only for the provider that produced it.

    ``before_call`` keeps the part's place in the reply: the id of the message's tool request
    the part came right before, when the model wrote it after the reply's text or an earlier
    call (several reasoning items between parallel calls, thinking between ``tool_use``
    blocks); ``None`` puts it at the head of the reply. Formats render each part there.
    """

    provider: StrictStr = Field(min_length=1)
    kind: StrictStr = Field(min_length=1)
    text: StrictStr | None = None
    signature: StrictStr | None = None
    id: StrictStr | None = None
    extra: Metadata = EMPTY_METADATA
    before_call: StrictStr | None = None


def _freeze_reasoning(value: Sequence[Reasoning]) -> Sequence[Reasoning]:
    return value if type(value) is FrozenList else FrozenList(value)


EMPTY_REASONING: Sequence[Reasoning] = FrozenList()

ReasoningParts = Annotated[Sequence[Reasoning], AfterValidator(_freeze_reasoning)]
"""An AI message's reasoning parts, in the order the provider sent them: a read-only ``list``."""


class UserMessage(_Model):
    """A message from the person (or the calling program) to the model."""

    type: Literal["user"] = "user"
    text: StrictStr
    metadata: Metadata = EMPTY_METADATA


class SystemMessage(_Model):
    """An instruction message. Stored in the original history, never in the display history."""

    type: Literal["system"] = "system"
    text: StrictStr
    metadata: Metadata = EMPTY_METADATA


class AiMessage(_Model):
    """A model reply: text, tool requests (parallel calls keep their order), or both."""

    type: Literal["ai"] = "ai"
    text: StrictStr | None = None
    tool_requests: ToolRequests = EMPTY_REQUESTS
    """The requested calls, in order: a read-only list (any sequence is accepted)."""
    reasoning: ReasoningParts = EMPTY_REASONING
    """The reasoning that came with the reply, in order (see :class:`Reasoning`; a part's
    ``before_call`` places it between the calls)."""
    metadata: Metadata = EMPTY_METADATA

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        check_ai_shape(self)

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @property
    def has_tool_requests(self) -> bool:
        return bool(self.tool_requests)


def check_ai_shape(message: AiMessage) -> None:
    """An AI message needs text or requests, and distinct call ids.

    Checked on construction and at the store's boundary (``check_messages``), not while
    decoding stored rows, which were checked when written.
    """
    requests = message.tool_requests
    if not requests:
        if message.text is None:
            raise InvalidMessageError("invalid AiMessage: needs text or at least one tool request")
    elif len(requests) > 1 and len({request.id for request in requests}) != len(requests):
        ids = [request.id for request in requests]
        raise InvalidMessageError(f"invalid AiMessage: duplicate tool call ids in {ids}")
    for number, part in enumerate(message.reasoning):
        if part.before_call is not None and all(r.id != part.before_call for r in requests):
            raise InvalidMessageError(
                f"invalid AiMessage: reasoning[{number}].before_call names no tool request "
                "of the message"
            )


class ToolResult(_Model):
    """The outcome of one tool call; ``id`` is the id of the :class:`ToolRequest` it answers."""

    type: Literal["tool_result"] = "tool_result"
    id: StrictStr = Field(min_length=1)
    tool_name: StrictStr
    text: StrictStr
    is_error: StrictBool = False
    metadata: Metadata = EMPTY_METADATA


Message: TypeAlias = Annotated[
    UserMessage | AiMessage | ToolResult | SystemMessage, Field(discriminator="type")
]
"""Any canonical message; the ``type`` field tells which."""

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGE_LIST_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def parse_message(value: Any) -> Message:
    """Accept a message instance or its dict form; raise ``InvalidMessageError`` otherwise."""
    if isinstance(value, (UserMessage, AiMessage, ToolResult, SystemMessage)):
        return value if _frozen_all_the_way(value) else _rebuilt(value)
    if not isinstance(value, dict):
        raise InvalidMessageError(
            f"expected a memstore message or a dict, got {type(value).__name__}"
        )
    kind = value.get("type")
    if kind not in ("user", "ai", "tool_result", "system"):
        raise InvalidMessageError(
            f"unknown message type {kind!r}; expected 'user', 'ai', 'tool_result' or 'system'"
        )
    try:
        return MESSAGE_ADAPTER.validate_python(value)
    except ValidationError as error:
        raise InvalidMessageError(f"invalid {kind} message: {_describe(error)}") from error


def _frozen_all_the_way(message: Message) -> bool:
    """False for a message built around validation (``model_construct``, ``model_copy(update=
    ...)``) with a mutable ``metadata`` or ``tool_requests``."""
    if type(message.metadata) is not FrozenDict:
        return False
    if not isinstance(message, AiMessage):
        return True
    return (
        type(message.tool_requests) is FrozenList
        and type(message.reasoning) is FrozenList
        and all(type(part.extra) is FrozenDict for part in message.reasoning)
    )


def _rebuilt(message: Message) -> Message:
    """The same message, validated and frozen (``InvalidMessageError`` when it is not valid)."""
    return type(message)(**{name: getattr(message, name) for name in type(message).model_fields})
