"""Canonical messages <-> LangChain4j's ``ChatMessageSerializer`` JSON.

A Java service whose ``MessageWindowChatMemory`` sits on a ``ChatMemoryStore`` stores each
memory as ``ChatMessageSerializer.messagesToJson(messages)`` and reads it back with
``ChatMessageDeserializer.messagesFromJson(json)``. This module reads and writes that JSON, so
the Java service and a Python service can share one memory.

```pycon
>>> stored = (  # what the Java service's ChatMemoryStore holds for one memory
...     '[{"contents":[{"text":"List the files","type":"TEXT"}],"type":"USER"},'
...     '{"toolExecutionRequests":[{"id":"call_1","name":"list_files","arguments":"{}"}],'
...     '"type":"AI"},'
...     '{"id":"call_1","toolName":"list_files","text":"a.txt","type":"TOOL_EXECUTION_RESULT"}]'
... )
>>> history = from_langchain4j(stored)
>>> history[2].id, history[2].tool_name, history[2].text
('call_1', 'list_files', 'a.txt')
>>> to_langchain4j(history)[1]["toolExecutionRequests"]
[{'id': 'call_1', 'name': 'list_files', 'arguments': '{}'}]
>>> to_langchain4j_json(history) == stored
True

```

The JSON, one object per message (field names as LangChain4j's Jackson codec writes them):

* ``SystemMessage`` <-> ``{"text", "type": "SYSTEM"}``;
* ``UserMessage`` <-> ``{"name"?, "contents": [{"text", "type": "TEXT"}], "attributes"?,
  "type": "USER"}``;
* ``AiMessage`` <-> ``{"text"?, "thinking"?, "toolExecutionRequests"?: [{"id", "name",
  "arguments"}], "attributes"?, "type": "AI"}``;
* ``ToolResult`` <-> ``{"id", "toolName", "text", "isError"?, "attributes"?, "type":
  "TOOL_EXECUTION_RESULT"}``.

Optional fields are written only when they carry something (``text`` when not ``None``, the
requests when there are some, ``isError`` when true, ``attributes`` when not empty), as
Jackson's ``NON_NULL``/``NON_EMPTY`` inclusion does. Canonical ``metadata`` travels as
LangChain4j's ``attributes`` (which LangChain4j stores but never sends to a model), except two
keys that have their own field: ``metadata["participant_name"]`` (a string) is the user
message's ``name`` and ``metadata["thinking"]`` (a string) the AI message's ``thinking``.

canonical -> LangChain4j -> canonical is the identity on every field, with ``arguments`` byte
for byte, except:

* a system message's ``metadata`` is dropped (LangChain4j's ``SystemMessage`` has no
  attributes);
* ``metadata`` must be JSON (otherwise :class:`~memstore.errors.FormatConversionError`) and
  comes back as JSON does (tuples as lists, non-string keys refused);
* with ``legacy=True`` (for LangChain4j releases whose message classes predate ``isError``,
  ``thinking`` and ``attributes``: Jackson rejects unknown properties) those fields are not
  written, so ``is_error`` comes back ``False`` and ``metadata`` (but the participant name)
  empty.

:func:`from_langchain4j` takes the JSON text (``str``/``bytes``; ``None`` or ``null`` is an
empty list) or the already parsed list of dicts. It also reads the older schema of user
messages (``{"text", "type": "USER"}``) and the newer one of tool results (``"contents":
[{"text", "type": "TEXT"}]`` instead of ``"text"``); an absent ``toolName`` reads as ``""``.
It raises :class:`~memstore.errors.FormatConversionError` naming the message's index for
anything the canonical model cannot hold: ``CUSTOM`` messages, image/audio/video/PDF contents,
several contents in one message, a request without an id, unknown keys or types.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import memstore.messages as msg
from memstore.core.strict_json import loads_strict
from memstore.formats._common import (
    PARTICIPANT_NAME_KEY,
    build,
    canonical,
    check_keys,
    fail,
    mapping,
    string,
    tool_request,
)
from memstore.messages import Message

PROVIDER = "langchain4j"
THINKING_KEY = "thinking"
"""Canonical ``metadata`` key of an AI message's ``thinking`` text."""

__all__ = ["THINKING_KEY", "from_langchain4j", "to_langchain4j", "to_langchain4j_json"]


def to_langchain4j(
    messages: Iterable[Message | Mapping[str, Any]], *, legacy: bool = False
) -> list[dict[str, Any]]:
    """Convert canonical messages to LangChain4j's serialized form, as parsed JSON dicts."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(canonical(messages, PROVIDER)):
        entry: dict[str, Any]
        if isinstance(message, msg.SystemMessage):
            out.append({"text": message.text, "type": "SYSTEM"})
            continue
        attributes = dict(message.metadata)
        if isinstance(message, msg.UserMessage):
            entry = {}
            name = attributes.get(PARTICIPANT_NAME_KEY)
            if isinstance(name, str):
                entry["name"] = name
                del attributes[PARTICIPANT_NAME_KEY]
            entry["contents"] = [{"text": message.text, "type": "TEXT"}]
            kind = "USER"
        elif isinstance(message, msg.AiMessage):
            entry = {}
            if message.text is not None:
                entry["text"] = message.text
            thinking = attributes.get(THINKING_KEY)
            if isinstance(thinking, str):
                del attributes[THINKING_KEY]
                if not legacy:
                    entry["thinking"] = thinking
            if message.tool_requests:
                entry["toolExecutionRequests"] = [
                    {"id": call.id, "name": call.name, "arguments": call.arguments}
                    for call in message.tool_requests
                ]
            kind = "AI"
        else:
            entry = {"id": message.id, "toolName": message.tool_name, "text": message.text}
            if message.is_error and not legacy:
                entry["isError"] = True
            kind = "TOOL_EXECUTION_RESULT"
        if attributes and not legacy:
            entry["attributes"] = _json_copy(index, attributes)
        entry["type"] = kind
        out.append(entry)
    return out


def to_langchain4j_json(
    messages: Iterable[Message | Mapping[str, Any]], *, legacy: bool = False
) -> str:
    """The JSON text ``ChatMessageSerializer.messagesToJson`` would write for ``messages``."""
    return json.dumps(
        to_langchain4j(messages, legacy=legacy),
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
    )


def _json_copy(index: int, attributes: dict[str, Any]) -> dict[str, Any]:
    try:
        copy: dict[str, Any] = json.loads(json.dumps(attributes, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise fail(PROVIDER, index, f"metadata is not JSON: {error}") from error
    return copy


def from_langchain4j(data: str | bytes | Sequence[Mapping[str, Any]] | None) -> list[Message]:
    """Read LangChain4j's serialized messages (JSON text or parsed list) as canonical messages.

    Raises :class:`~memstore.errors.FormatConversionError` (``provider="langchain4j"``,
    ``index`` the offending message, ``-1`` when the input is not a JSON list).
    """
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = loads_strict(data)
        except ValueError as error:
            raise fail(PROVIDER, -1, f"not valid JSON: {error}") from error
    if data is None:
        return []
    if not isinstance(data, Sequence) or isinstance(data, (str, bytes, bytearray)):
        raise fail(PROVIDER, -1, f"expected a JSON list of messages, got {type(data).__name__}")
    out: list[Message] = []
    allowed: tuple[str, ...]
    for index, raw in enumerate(data):
        entry = mapping(PROVIDER, index, raw, "message")
        kind = entry.get("type")
        if kind == "SYSTEM":
            check_keys(PROVIDER, index, entry, ("text", "type"), "SYSTEM message")
            text = string(PROVIDER, index, entry.get("text"), "text")
            out.append(build(PROVIDER, index, msg.SystemMessage, text=text))
        elif kind == "USER":
            allowed = ("name", "contents", "text", "attributes", "type")
            check_keys(PROVIDER, index, entry, allowed, "USER message")
            metadata = _attributes(index, entry)
            _own_field(index, entry, "name", metadata, PARTICIPANT_NAME_KEY)
            text = _text(index, entry)
            out.append(build(PROVIDER, index, msg.UserMessage, text=text, metadata=metadata))
        elif kind == "AI":
            allowed = ("text", "thinking", "toolExecutionRequests", "attributes", "type")
            check_keys(PROVIDER, index, entry, allowed, "AI message")
            metadata = _attributes(index, entry)
            _own_field(index, entry, "thinking", metadata, THINKING_KEY)
            raw_text = entry.get("text")
            ai_text = None if raw_text is None else string(PROVIDER, index, raw_text, "text")
            out.append(
                build(
                    PROVIDER,
                    index,
                    msg.AiMessage,
                    text=ai_text,
                    tool_requests=_requests(index, entry.get("toolExecutionRequests")),
                    metadata=metadata,
                )
            )
        elif kind == "TOOL_EXECUTION_RESULT":
            allowed = ("id", "toolName", "text", "contents", "isError", "attributes", "type")
            check_keys(PROVIDER, index, entry, allowed, "TOOL_EXECUTION_RESULT message")
            tool_name = entry.get("toolName")
            is_error = entry.get("isError")
            if is_error is not None and not isinstance(is_error, bool):
                raise fail(PROVIDER, index, "isError must be a boolean")
            out.append(
                build(
                    PROVIDER,
                    index,
                    msg.ToolResult,
                    id=string(PROVIDER, index, entry.get("id"), "id"),
                    tool_name=""
                    if tool_name is None
                    else string(PROVIDER, index, tool_name, "toolName"),
                    text=_text(index, entry),
                    is_error=bool(is_error),
                    metadata=_attributes(index, entry),
                )
            )
        else:
            raise fail(
                PROVIDER,
                index,
                f"unknown message type {kind!r}; expected 'SYSTEM', 'USER', 'AI' or "
                "'TOOL_EXECUTION_RESULT'",
            )
    return out


def _text(index: int, entry: Mapping[str, Any]) -> str:
    """The text of ``contents`` (exactly one ``TEXT`` content) or of the ``text`` field."""
    if "contents" in entry and "text" in entry:
        raise fail(PROVIDER, index, "has both 'contents' and 'text'")
    if "contents" not in entry:
        return string(PROVIDER, index, entry.get("text"), "text")
    contents = entry["contents"]
    if not isinstance(contents, list) or len(contents) != 1:
        raise fail(PROVIDER, index, "contents must be a list of exactly one TEXT content")
    content = mapping(PROVIDER, index, contents[0], "contents[0]")
    if content.get("type") != "TEXT":
        raise fail(
            PROVIDER,
            index,
            f"contents[0] has type {content.get('type')!r}; only TEXT contents can be converted",
        )
    check_keys(PROVIDER, index, content, ("text", "type"), "contents[0]")
    return string(PROVIDER, index, content.get("text"), "contents[0].text")


def _attributes(index: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    attributes = entry.get("attributes")
    if attributes is None:
        return {}
    attributes = mapping(PROVIDER, index, attributes, "attributes")
    return dict(attributes)


def _own_field(
    index: int, entry: Mapping[str, Any], field: str, metadata: dict[str, Any], key: str
) -> None:
    """Move the string field ``field`` of ``entry`` into ``metadata[key]``."""
    value = entry.get(field)
    if value is None:
        return
    if key in metadata:
        raise fail(PROVIDER, index, f"has both {field!r} and attributes[{key!r}]")
    metadata[key] = string(PROVIDER, index, value, field)


def _requests(index: int, raw: object) -> list[msg.ToolRequest]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise fail(PROVIDER, index, "toolExecutionRequests must be a list")
    requests: list[msg.ToolRequest] = []
    for position, item in enumerate(raw):
        where = f"toolExecutionRequests[{position}]"
        call = mapping(PROVIDER, index, item, where)
        check_keys(PROVIDER, index, call, ("id", "name", "arguments"), where)
        requests.append(tool_request(PROVIDER, index, call, where))
    return requests
