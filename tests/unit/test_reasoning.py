"""Reasoning kept with its calls: formats in and out, byte for byte, and every window.

Requests built from canonical messages are validated against the providers' own SDK request
types (``anthropic``, ``openai``), so a test fails when a shape drifts from what the API takes.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter
from pydantic_core import ValidationError

from memstore.core.reasoning import placed
from memstore.core.rows import decode_payload, encode_payload
from memstore.core.tokens import approximate_tokens
from memstore.core.window import StoredMessage, select_window
from memstore.errors import FormatConversionError, InvalidInputError
from memstore.formats import (
    from_anthropic,
    from_openai,
    from_responses,
    to_anthropic,
    to_langchain4j_json,
    to_openai,
    to_responses,
    validate,
)
from memstore.formats.responses import ITEM_IDS_KEY
from memstore.messages import (
    AiMessage,
    Message,
    Reasoning,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from tests.unit.test_window_properties import PROPERTY, histories

anthropic_types = pytest.importorskip("anthropic.types")
openai_chat = pytest.importorskip("openai.types.chat")
openai_responses = pytest.importorskip("openai.types.responses")

ANTHROPIC_MESSAGES = TypeAdapter(list[anthropic_types.MessageParam])
RESPONSES_INPUT = TypeAdapter(openai_responses.ResponseInputParam)
CHAT_MESSAGES = TypeAdapter(list[openai_chat.ChatCompletionMessageParam])


def consumed(value: Any) -> Any:
    """A validated value with its lazy iterables (SDK ``Iterable[...]`` fields) run through,
    so every nested item is validated too."""
    if isinstance(value, dict):
        return {key: consumed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [consumed(item) for item in value]
    if type(value).__name__ == "ValidatorIterator":
        return [consumed(item) for item in value]
    return value


def assert_anthropic_request(messages: list[dict[str, Any]]) -> None:
    consumed(ANTHROPIC_MESSAGES.validate_python(messages))


def assert_responses_input(items: list[dict[str, Any]]) -> None:
    consumed(RESPONSES_INPUT.validate_python(items))


def assert_chat_messages(messages: list[dict[str, Any]]) -> None:
    consumed(CHAT_MESSAGES.validate_python(messages))


def signature(seed: int) -> str:
    """An opaque payload as providers send it: base64 of bytes no one may change."""
    return base64.b64encode(bytes((seed * 37 + n) % 256 for n in range(48))).decode("ascii")


def thinking(text: str, seed: int = 1) -> Reasoning:
    return Reasoning(provider="anthropic", kind="thinking", text=text, signature=signature(seed))


def redacted(seed: int = 2) -> Reasoning:
    return Reasoning(provider="anthropic", kind="redacted_thinking", signature=signature(seed))


def reasoning_item(item_id: str, seed: int = 3, summary: str | None = None) -> Reasoning:
    parts = [] if summary is None else [{"type": "summary_text", "text": summary}]
    return Reasoning(
        provider="openai",
        kind="reasoning",
        id=item_id,
        text=summary,
        signature=signature(seed),
        extra={"summary": parts},
    )


def call(call_id: str, arguments: str = '{"path": "a.txt"}') -> ToolRequest:
    return ToolRequest(id=call_id, name="write_file", arguments=arguments)


# --- Anthropic ----------------------------------------------------------------------------------

THINKING_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Write a.txt and b.txt"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Two files: two calls.", "signature": signature(1)},
            {"type": "text", "text": "Writing both."},
            {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"p": "a"}},
            {"type": "tool_use", "id": "toolu_2", "name": "write_file", "input": {"p": "b"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": False},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok", "is_error": False},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "redacted_thinking", "data": signature(2)},
            {"type": "thinking", "thinking": "Check the\u00a0result ✓", "signature": signature(3)},
            {"type": "tool_use", "id": "toolu_3", "name": "read_file", "input": {"p": "a"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_3", "content": "A", "is_error": False}
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "", "signature": signature(4)},
            {"type": "text", "text": "Done."},
        ],
    },
]


def test_anthropic_thinking_round_trips_byte_for_byte_in_place() -> None:
    messages = from_anthropic(THINKING_TURNS)
    ais = [m for m in messages if isinstance(m, AiMessage)]
    assert [[(p.kind, p.signature) for p in m.reasoning] for m in ais] == [
        [("thinking", signature(1))],
        [("redacted_thinking", signature(2)), ("thinking", signature(3))],
        [("thinking", signature(4))],
    ]
    assert ais[1].reasoning[1].text == "Check the\u00a0result ✓"
    system, turns = to_anthropic(messages)
    assert system is None
    assert turns == THINKING_TURNS
    assert_anthropic_request(turns)
    # and through the stored payload
    stored = [decode_payload(encode_payload(m), 0) for m in messages]
    assert to_anthropic(stored).messages == THINKING_TURNS


def test_anthropic_thinking_goes_with_the_block_after_it() -> None:
    turn = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "First."},
            {"type": "thinking", "thinking": "then a call", "signature": "s1"},
            {"type": "tool_use", "id": "t1", "name": "n", "input": {}},
            {"type": "thinking", "thinking": "between calls", "signature": "s2"},
            {"type": "tool_use", "id": "t2", "name": "n", "input": {}},
        ],
    }
    messages = from_anthropic([{"role": "user", "content": "go"}, turn])
    (ai,) = [m for m in messages if isinstance(m, AiMessage)]
    assert (ai.text, [r.id for r in ai.tool_requests]) == ("First.", ["t1", "t2"])
    assert [(p.signature, p.before_call) for p in ai.reasoning] == [("s1", "t1"), ("s2", "t2")]
    assert to_anthropic(messages).messages[1] == turn
    # thinking at the end of a turn is kept, at the head of the last reply
    end = {"type": "thinking", "thinking": "at the end", "signature": "s3"}
    ending = {"role": "assistant", "content": [*turn["content"], end]}
    (ai,) = [m for m in from_anthropic([ending]) if isinstance(m, AiMessage)]
    assert [(p.signature, p.before_call) for p in ai.reasoning][2] == ("s3", None)


def test_anthropic_refuses_reasoning_it_cannot_keep() -> None:
    for bad, words in [
        ({"type": "thinking", "thinking": "x"}, "signature"),
        ({"type": "thinking", "thinking": 3, "signature": "s"}, "thinking"),
        ({"type": "redacted_thinking"}, "data"),
        ({"type": "thinking", "thinking": "secret words", "signature": "s", "x": 1}, "unknown"),
    ]:
        turn = {"role": "assistant", "content": [bad, {"type": "text", "text": "hi"}]}
        with pytest.raises(FormatConversionError) as caught:
            from_anthropic([{"role": "user", "content": "go"}, turn])
        assert words in caught.value.detail
        assert "secret" not in str(caught.value)


# --- OpenAI Responses ---------------------------------------------------------------------------

RESPONSES_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Write a.txt and b.txt"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "**Planning** two writes"}],
        "encrypted_content": signature(5),
    },
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "write_file",
        "arguments": '{"path":"a.txt"}',
        "id": "fc_1",
    },
    {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": signature(6)},
    {
        "type": "function_call",
        "call_id": "call_2",
        "name": "write_file",
        "arguments": '{"path": "b.txt" }',
        "id": "fc_2",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    {"type": "function_call_output", "call_id": "call_2", "output": "ok"},
    {"type": "reasoning", "id": "rs_3", "summary": []},
    {"role": "assistant", "content": "Both written."},
]


def test_responses_reasoning_items_round_trip_before_their_calls() -> None:
    messages = from_responses(RESPONSES_ITEMS)
    ais = [m for m in messages if isinstance(m, AiMessage)]
    assert [[p.id for p in m.reasoning] for m in ais] == [["rs_1", "rs_2"], ["rs_3"]]
    assert [p.before_call for p in ais[0].reasoning] == [None, "call_2"]
    assert ais[0].reasoning[0].signature == signature(5)
    assert ais[0].reasoning[0].text == "**Planning** two writes"
    assert ais[0].metadata[ITEM_IDS_KEY] == {"call_1": "fc_1", "call_2": "fc_2"}
    assert validate(messages, "openai") == []
    items = to_responses(messages)
    assert items == RESPONSES_ITEMS
    assert_responses_input(items)
    stored = [decode_payload(encode_payload(m), 0) for m in messages]
    assert to_responses(stored) == RESPONSES_ITEMS


def test_responses_reads_output_items() -> None:
    output = [
        {
            "type": "reasoning",
            "id": "rs_9",
            "summary": [],
            "encrypted_content": "gAAA==",
            "status": "completed",
        },
        {
            "type": "message",
            "id": "msg_9",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hi.", "annotations": []}],
        },
    ]
    (message,) = from_responses(output)
    assert isinstance(message, AiMessage) and message.text == "Hi."
    assert message.reasoning[0].extra["status"] == "completed"
    assert to_responses([message])[0] == output[0]


def test_responses_call_item_ids_go_only_with_their_reasoning() -> None:
    messages = from_responses(RESPONSES_ITEMS)
    items = to_responses(messages, reasoning="none")
    assert [i.get("type") for i in items if i.get("type") == "reasoning"] == []
    assert all("id" not in i for i in items if i.get("type") == "function_call")
    assert_responses_input(items)


@pytest.mark.parametrize(
    ("items", "words"),
    [
        ([{"type": "reasoning", "id": "rs_1", "summary": []}], "no reply"),
        ([{"type": "reasoning", "summary": []}, {"role": "assistant", "content": "x"}], "id"),
        ([{"type": "image_generation_call", "id": "ig"}], "cannot be converted"),
        ([{"role": "robot", "content": "x"}], "role"),
        (
            [{"type": "function_call", "call_id": "c", "name": "n", "arguments": {}}],
            "arguments",
        ),
    ],
)
def test_responses_refuses_what_it_cannot_convert(items: list[Any], words: str) -> None:
    with pytest.raises(FormatConversionError) as caught:
        from_responses(items)
    assert caught.value.provider == "openai"
    assert words in caught.value.detail


# --- Chat Completions reasoning_content ----------------------------------------------------------


def test_reasoning_content_round_trips_on_chat_completions() -> None:
    wire = [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Add them.\n",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a":2,"b":2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {"role": "assistant", "content": "4"},
    ]
    messages = from_openai(wire)
    assert messages[1].reasoning[0].kind == "reasoning_content"  # type: ignore[union-attr]
    assert to_openai(messages) == wire
    assert_chat_messages(to_openai(messages))
    # DeepSeek wants it only for the tool loop in progress
    assert (
        "reasoning_content"
        not in to_openai([*messages, UserMessage(text="and 3+3?")], reasoning="current")[1]
    )


# --- one provider's reasoning never goes to another ---------------------------------------------


def mixed_history() -> list[Message]:
    return [
        UserMessage(text="go"),
        AiMessage(
            text="Writing.",
            reasoning=[thinking("plan", 7), reasoning_item("rs_7", 8, "plan")],
            tool_requests=[call("c1")],
        ),
        ToolResult(id="c1", tool_name="write_file", text="ok"),
        AiMessage(text="Done."),
    ]


def test_reasoning_is_rendered_only_for_its_provider() -> None:
    history = mixed_history()
    _, turns = to_anthropic(history)
    assert [b["type"] for b in turns[1]["content"]] == ["thinking", "text", "tool_use"]
    responses = to_responses(history)
    assert [i.get("type", "message") for i in responses][:4] == [
        "message",
        "reasoning",
        "message",
        "function_call",
    ]
    assert "reasoning_content" not in to_openai(history)[1]
    assert "thinking" not in to_langchain4j_json(history)
    for rendered in (turns, responses, to_openai(history)):
        assert "Writing." in json.dumps(rendered)  # the reply's text is always kept


def test_reasoning_scopes() -> None:
    history = [
        *mixed_history(),
        UserMessage(text="again"),
        AiMessage(reasoning=[thinking("second", 9)], tool_requests=[call("c2")]),
    ]
    kinds = lambda scope: [  # noqa: E731
        b["type"] for t in to_anthropic(history, reasoning=scope).messages for b in t["content"]
    ]
    assert kinds("all").count("thinking") == 2
    assert kinds("current").count("thinking") == 1
    assert kinds("none").count("thinking") == 0
    with pytest.raises(InvalidInputError):
        to_anthropic(history, reasoning="some")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        to_responses(history, reasoning="every")  # type: ignore[arg-type]


def test_reasoning_counts_towards_tokens() -> None:
    plain = AiMessage(text="Writing.", tool_requests=[call("c1")])
    with_thoughts = plain.model_copy(update={"reasoning": [thinking("x" * 300, 1)]})
    assert approximate_tokens(with_thoughts) >= approximate_tokens(plain) + 100


def test_reasoning_is_immutable() -> None:
    message = AiMessage(reasoning=[reasoning_item("rs_1")], text="x")
    with pytest.raises(TypeError):
        message.reasoning.append(thinking("y"))  # type: ignore[attr-defined]
    with pytest.raises((TypeError, ValidationError)):
        message.reasoning[0].extra["summary"] = []  # type: ignore[index]


# --- property: every window keeps each call with its reasoning ----------------------------------

reasonings = st.lists(
    st.one_of(
        st.builds(thinking, st.text(max_size=8), st.integers(0, 255)),
        st.builds(redacted, st.integers(0, 255)),
        st.builds(
            reasoning_item,
            st.from_regex(r"rs_[a-z0-9]{1,6}", fullmatch=True),
            st.integers(0, 255),
            st.none() | st.text(min_size=1, max_size=8),
        ),
    ),
    max_size=3,
)


@st.composite
def reasoned_histories(draw: st.DrawFn) -> list[StoredMessage]:
    rows = draw(histories())
    out = []
    for row in rows:
        message = row.message
        if isinstance(message, AiMessage):
            places = st.sampled_from([None, *(r.id for r in message.tool_requests)])
            parts = [
                part.model_copy(update={"before_call": draw(places)}) for part in draw(reasonings)
            ]
            message = message.model_copy(update={"reasoning": parts})
        out.append(StoredMessage(row.id, message))
    return out


def in_rendered_order(message: AiMessage) -> list[Reasoning]:
    """A reply's parts in the order a request carries them: the head, then each call's."""
    head, before = placed(message.reasoning, (r.id for r in message.tool_requests))
    return head + [part for call in message.tool_requests for part in before.get(call.id, [])]


@PROPERTY
@given(reasoned_histories(), st.integers(1, 40))
def test_every_window_keeps_each_call_with_its_reasoning(
    rows: list[StoredMessage], max_messages: int
) -> None:
    originals = {row.id: row.message for row in rows}
    window = select_window(rows, max_messages, start_at_user=True)
    for message in window.messages:
        if isinstance(message, AiMessage) and message.tool_requests:
            # a window message is a stored message, reasoning and all, or an interrupted-call
            # stand-in that never carries reasoning
            assert message in originals.values() or not message.reasoning
    messages = window.messages
    if not messages:
        return
    items = to_responses(messages)
    assert_responses_input(items)
    # each reasoning item comes right before its reply's items
    for position, item in enumerate(items):
        if item.get("type") == "reasoning":
            after = items[position + 1]
            assert (
                after.get("type") in ("reasoning", "function_call") or after["role"] == "assistant"
            )
    assert [i for i in items if i.get("type") == "reasoning"] == [
        i
        for m in messages
        if isinstance(m, AiMessage)
        for p in in_rendered_order(m)
        if p.kind == "reasoning"
        for i in to_responses(
            [AiMessage(text="", reasoning=[p.model_copy(update={"before_call": None})])]
        )
        if i.get("type") == "reasoning"
    ]
    system, turns = to_anthropic(messages)
    assert_anthropic_request(turns)
    for turn in turns:
        kinds = [block["type"] for block in turn["content"]]
        if "thinking" in kinds or "redacted_thinking" in kinds:
            assert turn["role"] == "assistant"
    back = from_anthropic(turns, system=system)
    sent = [
        (p.kind, p.signature)
        for m in messages
        if isinstance(m, AiMessage)
        for p in in_rendered_order(m)
        if p.provider == "anthropic"
    ]
    got = [
        (p.kind, p.signature)
        for m in back
        if isinstance(m, AiMessage)
        for p in in_rendered_order(m)
    ]
    assert got == sent  # byte for byte, in order
    assert validate(messages, "openai") == []
