"""OpenAI stream chunks read as assembler operations: Chat Completions chunks (text,
``reasoning_content``, tool call deltas of the first choice) and Responses events (text,
``function_call`` items with their item ids, ``reasoning`` items kept whole)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memstore.core.reasoning import (
    OPENAI,
    REASONING_CONTENT,
    RESPONSES_REASONING,
    responses_item_part,
)
from memstore.core.stream.chunks import (
    Op,
    index_field,
    is_record,
    list_field,
    malformed,
    record_field,
    str_field,
)
from memstore.core.stream.state import ModelCall
from memstore.errors import StreamProtocolError
from memstore.messages import Reasoning

_RESPONSES_ITEM_EVENTS = frozenset(
    {
        "response.output_item.added",
        "response.output_item.done",
        "response.function_call_arguments.delta",
    }
)
RESPONSES_PREFIX = "response."
"""OpenAI Responses stream events are the chunk types that start with this."""


def chat_completions_ops(chunk: object, current: ModelCall) -> list[Op]:
    """The operations of one Chat Completions chunk (only the first choice is the reply), read
    against the ``current`` model call."""
    ops: list[Op] = []
    for choice in list_field(chunk, chunk, "choices"):
        if not is_record(choice):
            raise malformed(chunk, "a choice is not an object")
        if (index_field(chunk, choice, "index") or 0) != 0:
            continue  # n > 1: only the first choice is the reply
        delta = record_field(chunk, choice, "delta", required=False)
        if delta is None:
            continue
        thought = str_field(chunk, delta, REASONING_CONTENT, required=False)
        if thought:
            if REASONING_CONTENT not in current.thought_slots:
                ops.append(("thought_open", REASONING_CONTENT, OPENAI, REASONING_CONTENT))
            ops.append(("thought_text", REASONING_CONTENT, thought))
        content = str_field(chunk, delta, "content", required=False)
        if content:
            ops.append(("text", content))
        for call in list_field(chunk, delta, "tool_calls"):
            if not is_record(call):
                raise malformed(chunk, "a tool call delta is not an object")
            index = index_field(chunk, call, "index")
            if index is None:
                raise malformed(chunk, "a tool call delta has no int index")
            function = record_field(chunk, call, "function", required=False)
            ops.append(
                (
                    "delta",
                    index,
                    str_field(chunk, call, "id", required=False) or None,
                    None
                    if function is None
                    else str_field(chunk, function, "name", required=False),
                    None
                    if function is None
                    else str_field(chunk, function, "arguments", required=False),
                )
            )
    return ops


def responses_ops(chunk: object, kind: str, current: ModelCall) -> list[Op]:
    """OpenAI Responses stream events: text, function calls (with their item ids) and
    reasoning items, kept whole as ``response.output_item.done`` sends them."""
    if kind in ("response.output_text.delta", "response.refusal.delta"):
        text = str_field(chunk, chunk, "delta", required=True)
        return [("text", text)] if text else []
    if kind == "response.failed":
        raise StreamProtocolError("the provider reported that the response failed")
    if kind not in _RESPONSES_ITEM_EVENTS:
        return []  # lifecycle, summary and content-part events: the items say it all
    index = index_field(chunk, chunk, "output_index")
    if index is None:
        raise malformed(chunk, "output_index must be an int >= 0")
    if kind == "response.function_call_arguments.delta":
        if index not in current.slots:
            raise malformed(chunk, f"arguments for unknown output item {index}")
        fragment = str_field(chunk, chunk, "delta", required=True)
        return [("delta", index, None, None, fragment)] if fragment else []
    item = record_field(chunk, chunk, "item", required=True)
    item_type = str_field(chunk, item, "type", required=True)
    if item_type == "function_call":
        return _responses_call_ops(chunk, kind, index, item, current)
    if item_type != "reasoning":
        return []  # a message item's text came as output_text deltas
    key = ("output", index)
    opened = key in current.thought_slots
    ops: list[Op] = []
    if not opened:
        ops.append(("thought_open", key, OPENAI, RESPONSES_REASONING))
    if kind == "response.output_item.done":
        ops.append(("thought_done", key, _responses_reasoning(chunk, item)))
    return ops


def _responses_call_ops(
    chunk: object, kind: str, index: int, item: object, current: ModelCall
) -> list[Op]:
    call_id = str_field(chunk, item, "call_id", required=True)
    name = str_field(chunk, item, "name", required=True)
    arguments = str_field(chunk, item, "arguments", required=False)
    item_id = str_field(chunk, item, "id", required=False)
    ops: list[Op] = [("item_id", call_id, item_id)] if item_id else []
    call = current.slots.get(index)
    if call is None or call.id != call_id:  # the call starts here (or its start was lost)
        return [("delta", index, call_id, name, arguments or None), *ops]
    if kind == "response.output_item.done" and not call.argument_parts and arguments:
        ops.append(("block_default", index, arguments))
    return ops


def _responses_reasoning(chunk: object, item: object) -> Reasoning:
    """The part of a finished reasoning item; its fields are checked, its values kept."""
    part = responses_item_part(_as_json_object(item))
    if part is None:
        raise malformed(chunk, "a reasoning item is not of the API's shape")
    return part


def _as_json_object(item: object) -> dict[str, Any]:
    """A Responses item as the JSON object the API sent (an SDK object is dumped; absent
    fields, which SDK objects hold as ``None``, are left out either way)."""
    if not isinstance(item, Mapping):
        dump = getattr(item, "model_dump", None)
        item = dump(mode="json", exclude_none=True) if callable(dump) else vars(item)
    return {key: value for key, value in item.items() if value is not None}
