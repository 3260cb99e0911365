"""Converting LangChain messages to memstore's canonical messages and back (no I/O).

Shared by the legacy :class:`~memstore.adapters.langchain.MemstoreChatMessageHistory`, the
agent middleware (:mod:`memstore.adapters._lc_pending`) and the LangGraph mirror; the
conversion rules are described in :mod:`memstore.adapters.langchain`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from memstore.extras import needs_extra

with needs_extra("memstore.adapters.langchain", "langchain"):
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.messages import SystemMessage as LcSystemMessage
    from langchain_core.messages.tool import invalid_tool_call, tool_call

import memstore.messages as msg
from memstore.adapters._batch import OPAQUE_MARK, opaque
from memstore.adapters._lc_reasoning import reasoning_of
from memstore.errors import InvalidMessageError
from memstore.messages import Message

LANGCHAIN_KEY = "langchain_message"
"""The ``metadata`` key holding the message as langchain's ``message_to_dict`` gives it."""
FOREIGN_KEY = "memstore"
"""The ``response_metadata`` key that carries a foreign row's canonical ``metadata``."""

_USER_ROLES = ("user", "human")
_AI_ROLES = ("assistant", "ai")
_SYSTEM_ROLES = ("system", "developer")


def _text(content: str | list[str | dict[Any, Any]]) -> str:
    """The text of a message's content: the string, or its string and ``text`` blocks joined."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def _record(message: BaseMessage) -> dict[str, Any]:
    """``message_to_dict(message)`` as stored: JSON, checked to come back as an equal message."""
    try:
        record: dict[str, Any] = json.loads(
            json.dumps(message_to_dict(message), allow_nan=False, ensure_ascii=False)
        )
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(
            f"{type(message).__name__} {message.id!r} holds a value that is not JSON "
            f"(an artifact or *_kwargs entry?): {error}"
        ) from error
    try:
        messages_from_dict([record])
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidMessageError(
            f"{type(message).__name__} cannot be stored: langchain cannot read it back ({error})"
        ) from error
    return record


def _raw_arguments(message: AIMessage, call_id: str, args: dict[str, Any]) -> str:
    """The model's own argument string for ``call_id`` when it still parses to ``args``."""
    raw_calls = message.additional_kwargs.get("tool_calls")
    if isinstance(raw_calls, list):
        for raw in raw_calls:
            if not isinstance(raw, dict) or raw.get("id") != call_id:
                continue
            function = raw.get("function")
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(arguments, str):
                try:
                    if json.loads(arguments) == args:
                        return arguments
                except ValueError:
                    pass
    return json.dumps(args, ensure_ascii=False)


def _requests(message: AIMessage) -> list[msg.ToolRequest]:
    requests: list[msg.ToolRequest] = []
    seen: set[str] = set()
    for call in message.tool_calls:
        call_id, name = call.get("id"), call.get("name")
        # A call without an id cannot be answered by a ToolMessage, and a repeated id would
        # make the AiMessage invalid: both stay in the metadata only.
        if not call_id or not name or call_id in seen:
            continue
        seen.add(call_id)
        arguments = _raw_arguments(message, call_id, call["args"])
        requests.append(msg.ToolRequest(id=call_id, name=name, arguments=arguments))
    return requests


def to_canonical(message: BaseMessage) -> Message:
    """The canonical row of a LangChain message (the message itself in ``metadata``)."""
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(f"expected a langchain BaseMessage, got {type(message).__name__}")
    record = _record(message)
    metadata: dict[str, Any] = {LANGCHAIN_KEY: record}
    text = _text(message.content)
    if isinstance(message, HumanMessage):
        return msg.UserMessage(text=text, metadata=metadata)
    if isinstance(message, LcSystemMessage):
        return msg.SystemMessage(text=text, metadata=metadata)
    if isinstance(message, AIMessage):
        requests = _requests(message)
        data = record.get("data")
        return msg.AiMessage(
            text=None if requests and not text else text,
            tool_requests=requests,
            reasoning=reasoning_of(data, requests) if isinstance(data, dict) else (),
            metadata=metadata,
        )
    if isinstance(message, ToolMessage):
        if not message.tool_call_id:
            return opaque(metadata)
        return msg.ToolResult(
            id=message.tool_call_id,
            tool_name=message.name or "",
            text=text,
            is_error=message.status == "error",
            metadata=metadata,
        )
    if isinstance(message, ChatMessage):
        role = message.role.lower()
        if role in _USER_ROLES:
            return msg.UserMessage(text=text, metadata=metadata)
        if role in _AI_ROLES:
            return msg.AiMessage(text=text, metadata=metadata)
        if role in _SYSTEM_ROLES:
            return msg.SystemMessage(text=text, metadata=metadata)
    return opaque(metadata)


def record_to_canonical(record: dict[str, Any]) -> Message:
    """The canonical row of a message stored as langchain's ``message_to_dict`` JSON (as
    ``SQLChatMessageHistory`` keeps it). Raises what ``messages_from_dict`` raises for a
    record langchain cannot read (``KeyError``, ``TypeError``, ``ValueError``)."""
    return to_canonical(messages_from_dict([record])[0])


# -- canonical -> LangChain ------------------------------------------------------------------------


def _foreign_metadata(message: Message) -> dict[str, Any]:
    return {FOREIGN_KEY: dict(message.metadata)} if message.metadata else {}


def _ai_message(message: msg.AiMessage) -> AIMessage:
    calls = []
    invalid = []
    for request in message.tool_requests:
        try:
            args = json.loads(request.arguments)
        except ValueError:
            args = None
        if isinstance(args, dict):
            calls.append(tool_call(name=request.name, args=args, id=request.id))
        else:
            invalid.append(
                invalid_tool_call(
                    name=request.name,
                    args=request.arguments,
                    id=request.id,
                    error="arguments are not a JSON object",
                )
            )
    return AIMessage(
        content=message.text or "",
        tool_calls=calls,
        invalid_tool_calls=invalid,
        response_metadata=_foreign_metadata(message),
    )


def from_canonical(message: Message) -> BaseMessage | None:
    """The LangChain message of a row; ``None`` for another adapter's opaque row."""
    record = message.metadata.get(LANGCHAIN_KEY)
    if isinstance(record, dict):
        return messages_from_dict([record])[0]
    if message.metadata.get(OPAQUE_MARK):
        return None
    if isinstance(message, msg.UserMessage):
        return HumanMessage(content=message.text, response_metadata=_foreign_metadata(message))
    if isinstance(message, msg.SystemMessage):
        return LcSystemMessage(content=message.text, response_metadata=_foreign_metadata(message))
    if isinstance(message, msg.ToolResult):
        return ToolMessage(
            content=message.text,
            tool_call_id=message.id,
            name=message.tool_name or None,
            status="error" if message.is_error else "success",
            response_metadata=_foreign_metadata(message),
        )
    return _ai_message(message)


def from_rows(messages: Iterable[Message]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for message in messages:
        converted = from_canonical(message)
        if converted is not None:
            out.append(converted)
    return out


def is_orphan_result(message: Message, converted: BaseMessage) -> bool:
    """A tool result stored opaquely because its call was never stored: in a window it would
    reach the model as a tool result without its call, which the providers refuse."""
    return isinstance(converted, ToolMessage) and bool(message.metadata.get(OPAQUE_MARK))


def window_rows(window: Iterable[Message]) -> list[BaseMessage]:
    """The LangChain messages of an edge-checked window: opaque orphan results left out."""
    out: list[BaseMessage] = []
    for message in window:
        converted = from_canonical(message)
        if converted is not None and not is_orphan_result(message, converted):
            out.append(converted)
    return out
