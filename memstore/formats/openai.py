"""Canonical messages <-> OpenAI Chat Completions ``messages``.

```pycon
>>> wire = [  # as sent to client.chat.completions.create(messages=...)
...     {"role": "user", "content": "Create a.txt"},
...     {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
...         "function": {"name": "write_file", "arguments": '{"path": "a.txt"}'}}]},
...     {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
... ]
>>> history = from_openai(wire)
>>> [type(message).__name__ for message in history]
['UserMessage', 'AiMessage', 'ToolResult']
>>> history[1].tool_requests[0].arguments
'{"path": "a.txt"}'
>>> to_openai(history) == wire
True

```

Mapping (one canonical message is one OpenAI message, in order):

* ``SystemMessage(text)`` <-> ``{"role": "system", "content": text}``;
* ``UserMessage(text)`` <-> ``{"role": "user", "content": text}``;
* ``AiMessage(text, tool_requests)`` <-> ``{"role": "assistant", "content": text, "tool_calls":
  [{"id", "type": "function", "function": {"name", "arguments"}}]}``; ``content`` is ``None``
  when the text is ``None``, and ``tool_calls`` is left out when there are no requests (OpenAI
  rejects an empty list);
* ``ToolResult(id, text)`` <-> ``{"role": "tool", "tool_call_id": id, "content": text}``;
* ``metadata["participant_name"]`` (a string) <-> ``name`` on system, user and assistant
  messages;
* the ``reasoning_content`` of OpenAI-compatible servers (DeepSeek's thinking mode, vLLM,
  Qwen) <-> a :class:`~memstore.messages.Reasoning` part (provider ``openai``, kind
  ``reasoning_content``), sent back verbatim on its assistant message (``to_openai(...,
  reasoning=...)`` chooses which turns'). OpenAI's own reasoning models keep theirs in the
  Responses API: see :mod:`memstore.formats.responses`.

What canonical -> OpenAI -> canonical keeps and loses:

* identity: every text, the ``None``/``""`` distinction of AI text, call ids, tool names of
  requests, and ``arguments`` byte for byte (passed through verbatim, never parsed);
* ``ToolResult.is_error`` is lost (OpenAI has no error flag; it comes back ``False``): put the
  failure in the result text when the model must see it;
* ``ToolResult.tool_name`` is not sent (tool messages have no such field and OpenAI rejects
  unknown keys); :func:`from_openai` takes it from the latest earlier tool call with that id,
  or ``""`` when no earlier call has it, so it survives whenever the request precedes its
  result in the list;
* ``metadata`` other than ``participant_name`` is dropped.

:func:`from_openai` also accepts ``content`` as a list of ``{"type": "text"}`` parts (joined
with no separator), the ``developer`` role (read as a system message; it comes back as
``system``), a ``name`` on tool messages (sent by some OpenAI-compatible servers; taken as the
tool name), and the response-only keys ``refusal``, ``audio``, ``function_call`` and
``annotations`` when they are ``None`` or empty (as in ``message.model_dump()``). Anything else
raises :class:`~memstore.errors.FormatConversionError` naming the message's index: an unknown
role or key, image/audio/file parts, a tool call that is not a function call, a refusal, an
assistant message with neither content nor tool calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import memstore.messages as msg
from memstore.core.reasoning import REASONING_CONTENT
from memstore.formats._common import (
    PARTICIPANT_NAME_KEY,
    ReasoningScope,
    ToolNames,
    build,
    canonical,
    check_keys,
    fail,
    mapping,
    reasoning_to_send,
    string,
    text_parts,
    tool_request,
)
from memstore.messages import Message

PROVIDER = "openai"

__all__ = ["from_openai", "to_openai"]

_RESPONSE_ONLY_KEYS = ("refusal", "audio", "function_call", "annotations")
"""Keys of a response message that carry nothing when ``None`` or empty."""


def to_openai(
    messages: Iterable[Message | Mapping[str, Any]], *, reasoning: ReasoningScope = "all"
) -> list[dict[str, Any]]:
    """Convert canonical messages (or their dict form) to Chat Completions message dicts.

    ``reasoning``: which ``reasoning_content`` goes back on assistant messages (see
    :data:`~memstore.formats.REASONING_SCOPES`); only reasoning read from a Chat Completions
    message (an OpenAI-compatible server's ``reasoning_content``) is ever sent.
    """
    out: list[dict[str, Any]] = []
    converted = canonical(messages, PROVIDER)
    thoughts = reasoning_to_send(converted, PROVIDER, reasoning)
    for index, message in enumerate(converted):
        if isinstance(message, msg.ToolResult):
            out.append({"role": "tool", "tool_call_id": message.id, "content": message.text})
            continue
        entry: dict[str, Any]
        if isinstance(message, msg.SystemMessage):
            entry = {"role": "system", "content": message.text}
        elif isinstance(message, msg.UserMessage):
            entry = {"role": "user", "content": message.text}
        else:
            entry = {"role": "assistant", "content": message.text}
            texts = [p.text or "" for p in thoughts[index] if p.kind == REASONING_CONTENT]
            if texts:
                entry["reasoning_content"] = "".join(texts)
            if message.tool_requests:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_requests
                ]
        name = message.metadata.get(PARTICIPANT_NAME_KEY)
        if isinstance(name, str):
            entry["name"] = name
        out.append(entry)
    return out


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert Chat Completions message dicts to canonical messages.

    Raises :class:`~memstore.errors.FormatConversionError` (``provider="openai"``, ``index``
    the offending message) for anything the canonical model cannot hold.
    """
    out: list[Message] = []
    names = ToolNames()
    for index, raw in enumerate(messages):
        entry = mapping(PROVIDER, index, raw, "message")
        role = entry.get("role")
        if role in ("system", "developer", "user"):
            check_keys(PROVIDER, index, entry, ("role", "content", "name"), f"{role} message")
            text = _content(index, entry)
            metadata = _metadata(index, entry)
            out.append(
                build(PROVIDER, index, msg.UserMessage, text=text, metadata=metadata)
                if role == "user"
                else build(PROVIDER, index, msg.SystemMessage, text=text, metadata=metadata)
            )
        elif role == "assistant":
            reply = _assistant(index, entry)
            names.add(reply.tool_requests)
            out.append(reply)
        elif role == "tool":
            check_keys(
                PROVIDER, index, entry, ("role", "content", "tool_call_id", "name"), "tool message"
            )
            call_id = string(PROVIDER, index, entry.get("tool_call_id"), "tool_call_id")
            name = entry.get("name")
            tool_name = (
                names.name(call_id) if name is None else string(PROVIDER, index, name, "name")
            )
            text = _content(index, entry)
            out.append(
                build(PROVIDER, index, msg.ToolResult, id=call_id, tool_name=tool_name, text=text)
            )
        else:
            raise fail(
                PROVIDER,
                index,
                f"unknown role {role!r}; expected 'system', 'developer', 'user', 'assistant' "
                "or 'tool'",
            )
    return out


def _assistant(index: int, entry: Mapping[str, Any]) -> msg.AiMessage:
    allowed = ("role", "content", "name", "tool_calls", REASONING_CONTENT, *_RESPONSE_ONLY_KEYS)
    check_keys(PROVIDER, index, entry, allowed, "assistant message")
    for key in _RESPONSE_ONLY_KEYS:
        if entry.get(key) not in (None, [], {}):
            raise fail(PROVIDER, index, f"assistant {key!r} cannot be converted")
    text = None if entry.get("content") is None else _content(index, entry)
    calls = entry.get("tool_calls")
    if calls is None:
        calls = []
    if not isinstance(calls, list):
        raise fail(PROVIDER, index, "tool_calls must be a list")
    requests = [_request(index, position, call) for position, call in enumerate(calls)]
    thought = entry.get(REASONING_CONTENT)
    parts: list[msg.Reasoning] = []
    if thought not in (None, ""):
        parts.append(
            build(
                PROVIDER,
                index,
                msg.Reasoning,
                provider=PROVIDER,
                kind=REASONING_CONTENT,
                text=string(PROVIDER, index, thought, REASONING_CONTENT),
            )
        )
    return build(
        PROVIDER,
        index,
        msg.AiMessage,
        text=text,
        tool_requests=requests,
        reasoning=parts,
        metadata=_metadata(index, entry),
    )


def _request(index: int, position: int, raw: object) -> msg.ToolRequest:
    where = f"tool_calls[{position}]"
    call = mapping(PROVIDER, index, raw, where)
    check_keys(PROVIDER, index, call, ("id", "type", "function"), where)
    if call.get("type", "function") != "function":
        raise fail(PROVIDER, index, f"{where} has type {call.get('type')!r}; expected 'function'")
    function = mapping(PROVIDER, index, call.get("function"), f"{where}.function")
    check_keys(PROVIDER, index, function, ("name", "arguments"), f"{where}.function")
    return tool_request(PROVIDER, index, call, where, named=(function, f"{where}.function"))


def _content(index: int, entry: Mapping[str, Any]) -> str:
    content = entry.get("content")
    if isinstance(content, str):
        return content
    if content is None:
        raise fail(PROVIDER, index, f"{entry.get('role')} message has no content")
    return "".join(text_parts(PROVIDER, index, content, "content"))


def _metadata(index: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    name = entry.get("name")
    if name is None:
        return {}
    return {PARTICIPANT_NAME_KEY: string(PROVIDER, index, name, "name")}
