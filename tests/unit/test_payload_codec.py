"""The stored JSON of a message (payload columns, cache entries) leaves out the fields that
hold their defaults, and every payload, new or written with every field as before, decodes
to the message that was stored."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memstore.cache.base import decode_entries, encode_entry
from memstore.core.rows import decode_payload, encode_message, encode_payload
from memstore.core.window import entry_for
from memstore.messages import (
    AiMessage,
    Message,
    Reasoning,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from tests.unit.test_formats import json_values
from tests.unit.test_window_properties import PROPERTY

texts = st.text(max_size=20)
metadata = st.dictionaries(texts, json_values, max_size=3)
# call ids as the store accepts them (no control characters: cache entry headers hold them)
ids = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=8)
requests = st.lists(
    st.builds(ToolRequest, id=ids, name=ids, arguments=texts), max_size=3, unique_by=lambda r: r.id
)


reasoning = st.lists(
    st.builds(
        Reasoning,
        provider=st.sampled_from(["anthropic", "openai", "google"]),
        kind=st.sampled_from(["thinking", "redacted_thinking", "reasoning"]),
        text=st.none() | texts,
        signature=st.none() | texts,
        id=st.none() | ids,
        extra=metadata,
    ),
    max_size=2,
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    kind = draw(st.sampled_from(["user", "system", "ai", "tool_result"]))
    meta = draw(metadata)
    if kind == "user":
        return UserMessage(text=draw(texts), metadata=meta)
    if kind == "system":
        return SystemMessage(text=draw(texts), metadata=meta)
    if kind == "tool_result":
        return ToolResult(
            id=draw(ids),
            tool_name=draw(texts),
            text=draw(texts),
            is_error=draw(st.booleans()),
            metadata=meta,
        )
    calls = draw(requests)
    text = draw(st.none() | texts) if calls else draw(texts)
    return AiMessage(text=text, tool_requests=calls, reasoning=draw(reasoning), metadata=meta)


DEFAULTS: dict[str, Any] = {
    "metadata": {},
    "tool_requests": [],
    "reasoning": [],
    "text": None,
    "is_error": False,
}


@PROPERTY
@given(messages())
def test_a_payload_decodes_to_the_message_and_leaves_out_only_defaults(message: Message) -> None:
    payload = encode_payload(message)
    assert decode_payload(payload, 1) == message
    full = message.model_dump(mode="json")
    written = json.loads(payload)
    assert written["type"] == message.type
    left_out = set(full) - set(written)
    assert all(full[name] == DEFAULTS[name] for name in left_out)
    assert all(written[name] == full[name] for name in written)
    assert all(written[name] != DEFAULTS.get(name, object()) for name in written if name != "text")


@PROPERTY
@given(messages())
def test_a_payload_written_with_every_field_decodes_to_the_same_message(message: Message) -> None:
    assert decode_payload(message.model_dump_json(), 1) == message


@PROPERTY
@given(st.lists(messages(), max_size=5))
def test_cache_entries_carry_the_same_json(batch: list[Message]) -> None:
    raw = [encode_entry(entry_for(message)) for message in batch]
    assert [item[item.index(b"\x1e") + 1 :] for item in raw] == [encode_message(m) for m in batch]
    assert decode_entries(raw) == batch


def test_the_common_messages_are_written_without_their_defaults() -> None:
    call = ToolRequest(id="c1", name="read", arguments="{}")
    assert encode_payload(UserMessage(text="hi")) == '{"type":"user","text":"hi"}'
    assert encode_payload(AiMessage(tool_requests=[call])) == (
        '{"type":"ai","tool_requests":[{"id":"c1","name":"read","arguments":"{}"}]}'
    )
    assert encode_payload(AiMessage(text="done")) == '{"type":"ai","text":"done"}'
    assert encode_payload(ToolResult(id="c1", tool_name="read", text="x")) == (
        '{"type":"tool_result","id":"c1","tool_name":"read","text":"x"}'
    )
