"""Anthropic Messages stream events read as assembler operations: text, ``tool_use`` blocks
with their ``input_json_delta`` fragments, ``thinking`` / ``redacted_thinking`` blocks."""

from __future__ import annotations

from memstore.core.reasoning import ANTHROPIC, REDACTED_THINKING, THINKING
from memstore.core.stream.chunks import (
    Op,
    describe_kind,
    get,
    index_field,
    is_record,
    malformed,
    record_field,
    str_field,
)
from memstore.core.stream.state import ModelCall
from memstore.errors import StreamProtocolError

ANTHROPIC_TYPES = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    }
)
_ANTHROPIC_IGNORED_DELTAS = frozenset({"citations_delta"})
_THINKING_DELTAS = {
    "thinking_delta": ("thinking", "thought_text"),
    "signature_delta": ("signature", "thought_signature"),
}
"""Anthropic thinking deltas: the field that carries the fragment, and the operation."""


def anthropic_ops(chunk: object, kind: str, current: ModelCall) -> list[Op]:
    """The operations of one Anthropic event of type ``kind`` (one of :data:`ANTHROPIC_TYPES`),
    read against the ``current`` model call; an ``error`` event or a malformed one raises
    :class:`~memstore.errors.StreamProtocolError`."""
    if kind in ("message_start", "message_delta", "message_stop", "ping"):
        return []
    if kind == "error":
        error = get(chunk, "error")
        error_type = get(error, "type") if is_record(error) else None
        raise StreamProtocolError(
            f"the provider reported an error in the stream (type {describe_kind(error_type)})"
        )
    index = index_field(chunk, chunk, "index")
    if index is None:
        raise malformed(chunk, "index must be an int >= 0")
    blocks = current.anthropic_blocks
    if kind == "content_block_start":
        block = record_field(chunk, chunk, "content_block", required=True)
        block_type = str_field(chunk, block, "type", required=True)
        if block_type == "text":
            text = str_field(chunk, block, "text", required=False)
            return [("block", index, "text")] + ([("text", text)] if text else [])
        if block_type == "tool_use":
            call_id = str_field(chunk, block, "id", required=True)
            name = str_field(chunk, block, "name", required=True)
            return [("block", index, "tool_use"), ("delta", index, call_id, name, None)]
        if block_type == THINKING:
            key = ("block", index)
            ops = [("block", index, THINKING), ("thought_open", key, ANTHROPIC, THINKING)]
            text = str_field(chunk, block, "thinking", required=False)
            signature = str_field(chunk, block, "signature", required=False)
            ops += [("thought_text", key, text)] if text else []
            return ops + ([("thought_signature", key, signature)] if signature else [])
        if block_type == REDACTED_THINKING:
            key = ("block", index)
            data = str_field(chunk, block, "data", required=True)
            return [
                ("block", index, REDACTED_THINKING),
                ("thought_open", key, ANTHROPIC, REDACTED_THINKING),
                ("thought_signature", key, data),
            ]
        raise malformed(chunk, f"unknown content block type {describe_kind(block_type)}")
    if kind == "content_block_delta":
        delta = record_field(chunk, chunk, "delta", required=True)
        delta_type = str_field(chunk, delta, "type", required=True)
        if delta_type == "text_delta":
            return [("text", str_field(chunk, delta, "text", required=True))]
        if delta_type == "input_json_delta":
            if blocks.get(index) != "tool_use":
                raise malformed(chunk, f"input_json_delta for non-tool block {index}")
            partial = str_field(chunk, delta, "partial_json", required=True)
            return [("delta", index, None, None, partial)]
        if delta_type in _THINKING_DELTAS:
            if blocks.get(index) != THINKING:
                raise malformed(chunk, f"{delta_type} for non-thinking block {index}")
            field_name, op = _THINKING_DELTAS[delta_type]
            value = str_field(chunk, delta, field_name, required=True)
            return [(op, ("block", index), value)] if value else []
        if delta_type in _ANTHROPIC_IGNORED_DELTAS:
            return []
        raise malformed(chunk, f"unknown delta type {describe_kind(delta_type)}")
    # content_block_stop: a thinking block is complete (it is kept only with its
    # signature); a tool_use block without input deltas has the input {}
    if blocks.get(index) in (THINKING, REDACTED_THINKING):
        if ("block", index) in current.thought_slots:
            return [("thought_done", ("block", index), None)]
        return []
    if blocks.get(index) == "tool_use":
        call = current.slots.get(index)
        if call is not None and not call.argument_parts and call.default_arguments is None:
            return [("block_default", index, "{}")]
    return []
