"""Canonical messages <-> OpenAI Responses ``input`` items, reasoning items included.

```pycon
>>> from memstore.messages import AiMessage, Reasoning, ToolRequest, ToolResult, UserMessage
>>> thought = Reasoning(provider="openai", kind="reasoning", id="rs_1", signature="gAAAA...",
...                     extra={"summary": []})
>>> history = [
...     UserMessage(text="Create a.txt"),
...     AiMessage(reasoning=[thought], tool_requests=[
...         ToolRequest(id="call_1", name="write_file", arguments='{"path": "a.txt"}')]),
...     ToolResult(id="call_1", tool_name="write_file", text="ok"),
... ]
>>> [item.get("type", "message") for item in to_responses(history)]
['message', 'reasoning', 'function_call', 'function_call_output']
>>> from_responses(to_responses(history)) == history
True

```

Reasoning models (GPT-5, the o-series) refuse a ``function_call`` item sent without the
``reasoning`` item that came before it ("... was provided without its required 'reasoning'
item"); with ``store=False`` the reasoning travels as ``encrypted_content``. Both are kept
here, byte for byte, in the AI message's :class:`~memstore.messages.Reasoning` parts, so a
window memstore rebuilds sends each reasoning item right before its calls.

Mapping:

* ``SystemMessage`` <-> ``{"role": "system", "content": text}`` (``developer`` is read as
  system);
* ``UserMessage`` <-> ``{"role": "user", "content": text}`` (``input_text`` parts are read too,
  joined);
* ``AiMessage``: its reasoning parts of provider ``openai`` and kind ``reasoning`` as
  ``{"type": "reasoning", "id", "summary", "encrypted_content"?, ...}`` items (every field the
  item had), then ``{"role": "assistant", "content": text}`` when it has text, then one
  ``{"type": "function_call", "call_id", "name", "arguments"}`` per request (``arguments``
  verbatim); the ``function_call`` items' own ids (``fc_...``) are kept in
  ``metadata["openai_item_ids"]`` and sent only with the reasoning they belong to (an id
  without its reasoning is what the API refuses);
* ``ToolResult`` <-> ``{"type": "function_call_output", "call_id", "output": text}``.

:func:`from_responses` groups an assistant turn's items as the model produced them: a reasoning
item goes with the message or call after it (placed right before that call when it stands
between the reply's text or calls: :attr:`~memstore.messages.Reasoning.before_call`), and calls
join the reply before them, so :func:`to_responses` gives the items back in their order. What
a round trip loses: ``is_error`` (the output has no error flag), the tool name of a result
(taken back from the call), an assistant message's item id and status, ``annotations``, and
``metadata`` other than the item ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import memstore.messages as msg
from memstore.core.metadata import thaw
from memstore.core.reasoning import (
    OPENAI,
    RESPONSES_ITEM_IDS_KEY,
    RESPONSES_REASONING,
    placed,
    placed_before,
    responses_reasoning,
)
from memstore.formats._common import (
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

PROVIDER = OPENAI
REASONING = RESPONSES_REASONING
"""The :class:`~memstore.messages.Reasoning` kind of a Responses reasoning item."""
ITEM_IDS_KEY = RESPONSES_ITEM_IDS_KEY
"""Canonical ``metadata`` key of an AI message's ``function_call`` item ids, by call id."""

__all__ = ["ITEM_IDS_KEY", "REASONING", "from_responses", "to_responses"]


def to_responses(
    messages: Iterable[Message | Mapping[str, Any]], *, reasoning: ReasoningScope = "all"
) -> list[dict[str, Any]]:
    """Convert canonical messages (or their dict form) to Responses ``input`` items.

    ``reasoning``: which reasoning items go back (see
    :data:`~memstore.formats.REASONING_SCOPES`); reasoning of other providers never does, and a
    message's ``function_call`` item ids go only with its reasoning.
    """
    converted = canonical(messages, PROVIDER)
    thoughts = reasoning_to_send(converted, PROVIDER, reasoning)
    items: list[dict[str, Any]] = []
    for index, message in enumerate(converted):
        if isinstance(message, msg.SystemMessage):
            items.append({"role": "system", "content": message.text})
        elif isinstance(message, msg.UserMessage):
            items.append({"role": "user", "content": message.text})
        elif isinstance(message, msg.ToolResult):
            items.append(
                {"type": "function_call_output", "call_id": message.id, "output": message.text}
            )
        else:
            sent = [part for part in thoughts[index] if part.kind == REASONING]
            head, before = placed(sent, (call.id for call in message.tool_requests))
            items.extend(_reasoning_item(part) for part in head)
            if message.text is not None:
                items.append({"role": "assistant", "content": message.text})
            ids = message.metadata.get(ITEM_IDS_KEY) if sent else None
            for call in message.tool_requests:
                items.extend(_reasoning_item(part) for part in before.get(call.id, ()))
                item: dict[str, Any] = {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
                item_id = ids.get(call.id) if isinstance(ids, Mapping) else None
                if isinstance(item_id, str):
                    item["id"] = item_id
                items.append(item)
    return items


def _reasoning_item(part: msg.Reasoning) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": part.id or ""}
    item.update(thaw(part.extra))
    item.setdefault("summary", [])
    if part.signature is not None:
        item["encrypted_content"] = part.signature
    return item


def from_responses(items: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert Responses ``input`` (or ``output``) items to canonical messages.

    Raises :class:`~memstore.errors.FormatConversionError` (``provider="openai"``, ``index``
    the offending item) for anything the canonical model cannot hold: an unknown item type or
    role, image and file parts, a reasoning item with no reply after or before it.
    """
    out: list[Message] = []
    names = ToolNames()
    reply: _Reply | None = None
    pending: list[msg.Reasoning] = []

    def close() -> None:
        nonlocal reply
        if reply is not None:
            message = reply.build()
            names.add(message.tool_requests)
            out.append(message)
            reply = None

    for index, raw in enumerate(items):
        item = mapping(PROVIDER, index, raw, "item")
        kind = item.get("type", "message")
        if kind == "reasoning":
            pending.append(_reasoning(index, item))
        elif kind == "function_call":
            request, item_id = _call(index, item)
            if reply is None:
                reply = _Reply(index, None, pending)
            else:  # reasoning between the reply's text or calls and this call stays there
                reply.reasoning.extend(placed_before(pending, request.id))
            pending = []
            reply.add(request, item_id)
        elif kind == "message" and item.get("role") == "assistant":
            close()
            reply = _Reply(index, _assistant_text(index, item), pending)
            pending = []
        else:
            if pending:
                if reply is None:
                    raise fail(PROVIDER, index, "a reasoning item has no reply after it")
                reply.reasoning.extend(pending)
                pending = []
            close()
            out.append(_other(index, kind, item, names))
    if pending:
        if reply is None:
            raise fail(PROVIDER, -1, "a reasoning item has no reply before or after it")
        reply.reasoning.extend(pending)
    close()
    return out


class _Reply:
    """An AI message being read: its text, calls, reasoning and call item ids."""

    def __init__(self, index: int, text: str | None, reasoning: list[msg.Reasoning]) -> None:
        self.index = index
        self.text = text
        self.requests: list[msg.ToolRequest] = []
        self.reasoning = reasoning
        self.item_ids: dict[str, str] = {}

    def add(self, request: msg.ToolRequest, item_id: str | None) -> None:
        self.requests.append(request)
        if item_id is not None:
            self.item_ids[request.id] = item_id

    def build(self) -> msg.AiMessage:
        metadata = {ITEM_IDS_KEY: self.item_ids} if self.item_ids else {}
        return build(
            PROVIDER,
            self.index,
            msg.AiMessage,
            text=self.text,
            tool_requests=self.requests,
            reasoning=self.reasoning,
            metadata=metadata,
        )


def _reasoning(index: int, item: Mapping[str, Any]) -> msg.Reasoning:
    signature = item.get("encrypted_content")
    summary = item.get("summary")
    texts: list[str] = []
    if isinstance(summary, list):
        texts = text_parts(PROVIDER, index, summary, "summary", text_type="summary_text")
    return build(
        PROVIDER,
        index,
        responses_reasoning,
        item_id=string(PROVIDER, index, item.get("id"), "reasoning id"),
        summary_texts=texts,
        encrypted_content=None
        if signature is None
        else string(PROVIDER, index, signature, "encrypted_content"),
        item=item,
    )


def _call(index: int, item: Mapping[str, Any]) -> tuple[msg.ToolRequest, str | None]:
    check_keys(
        PROVIDER, index, item, ("type", "call_id", "name", "arguments", "id", "status"), "item"
    )
    request = tool_request(PROVIDER, index, item, "", id_key="call_id")
    item_id = item.get("id")
    return request, None if item_id is None else string(PROVIDER, index, item_id, "id")


def _assistant_text(index: int, item: Mapping[str, Any]) -> str:
    check_keys(PROVIDER, index, item, ("type", "role", "content", "id", "status"), "message")
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise fail(PROVIDER, index, "content must be a string or a list of parts")
    texts: list[str] = []
    for position, raw in enumerate(content):
        part = mapping(PROVIDER, index, raw, f"content[{position}]")
        check_keys(
            PROVIDER,
            index,
            part,
            ("type", "text", "annotations", "logprobs"),
            f"content[{position}]",
        )
        if part.get("type") != "output_text":
            raise fail(
                PROVIDER,
                index,
                f"content[{position}] has type {part.get('type')!r}, which cannot be converted",
            )
        texts.append(string(PROVIDER, index, part.get("text"), f"content[{position}].text"))
    return "".join(texts)


def _other(index: int, kind: object, item: Mapping[str, Any], names: ToolNames) -> Message:
    if kind == "function_call_output":
        check_keys(PROVIDER, index, item, ("type", "call_id", "output", "id", "status"), "item")
        call_id = string(PROVIDER, index, item.get("call_id"), "call_id")
        output = item.get("output")
        text = (
            output
            if isinstance(output, str)
            else "".join(text_parts(PROVIDER, index, output, "output", text_type="input_text"))
        )
        return build(
            PROVIDER, index, msg.ToolResult, id=call_id, tool_name=names.name(call_id), text=text
        )
    if kind != "message":
        raise fail(PROVIDER, index, f"item type {kind!r} cannot be converted")
    check_keys(PROVIDER, index, item, ("type", "role", "content", "id", "status"), "message")
    role = item.get("role")
    content = item.get("content")
    text = (
        content
        if isinstance(content, str)
        else "".join(text_parts(PROVIDER, index, content, "content", text_type="input_text"))
    )
    if role == "user":
        return build(PROVIDER, index, msg.UserMessage, text=text)
    if role in ("system", "developer"):
        return build(PROVIDER, index, msg.SystemMessage, text=text)
    raise fail(PROVIDER, index, f"unknown role {role!r}")
