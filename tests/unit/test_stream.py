"""The stream assembler as pure code: no database, no cache."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest

from memstore import (
    AiMessage,
    IncompleteToolCallError,
    InvalidInputError,
    StreamProtocolError,
    ToolRequest,
    ToolResult,
)
from memstore.core.stream import StreamAssembler, turn_display
from memstore.core.validate import validate
from memstore.messages import UserMessage

ARGS_A = '{"path": "a.txt",  "content": "héllo 🌍"}'
ARGS_B = '{ "path":"b.txt" , "mode" : 420 }'


def state(a: StreamAssembler) -> Any:
    return copy.deepcopy(a._s)


def split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_text_only_turn_is_one_ai_message() -> None:
    a = StreamAssembler()
    for part in ["Hel", "lo", " wörld"]:
        a.on_text(part)
    assert a.end_turn() == [AiMessage(text="Hello wörld")]
    assert a.closed


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_fragments_concatenate_verbatim(size: int) -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="write_file")
    for part in split(ARGS_A, size):
        a.on_tool_call_delta(0, arguments=part)
    assert a.tool_calls() == [ToolRequest(id="c1", name="write_file", arguments=ARGS_A)]


def test_name_fragments_and_id_arriving_late() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, name="write")
    a.on_tool_call_delta(0, name="_file", arguments="{}")
    with pytest.raises(IncompleteToolCallError) as info:
        a.tool_calls()
    assert info.value.index == 0 and info.value.call_id is None
    a.on_tool_call_delta(0, id="c1")
    assert a.tool_calls() == [ToolRequest(id="c1", name="write_file", arguments="{}")]


def test_interleaved_parallel_calls_stay_apart() -> None:
    a = StreamAssembler()
    a.on_text("Creating both.")
    a.on_tool_call_delta(0, id="c1", name="write_file")
    a.on_tool_call_delta(1, id="c2", name="write_file")
    parts_a, parts_b = split(ARGS_A, 4), split(ARGS_B, 3)
    for i in range(max(len(parts_a), len(parts_b))):
        if i < len(parts_b):
            a.on_tool_call_delta(1, arguments=parts_b[i])
        if i < len(parts_a):
            a.on_tool_call_delta(0, arguments=parts_a[i])
    assert [(r.id, r.arguments) for r in a.tool_calls()] == [("c1", ARGS_A), ("c2", ARGS_B)]
    assert a.on_tool_executed("c2", "ok b") is True  # durable at once, with its AI message
    assert [m.type for m in a.ready] == ["ai", "tool_result"]
    assert a.on_tool_executed("c1", "ok a") is True
    assert a.ready == [
        AiMessage(
            text="Creating both.",
            tool_requests=[
                ToolRequest(id="c1", name="write_file", arguments=ARGS_A),
                ToolRequest(id="c2", name="write_file", arguments=ARGS_B),
            ],
        ),
        ToolResult(id="c2", tool_name="write_file", text="ok b"),
        ToolResult(id="c1", tool_name="write_file", text="ok a"),
    ]


def test_same_index_with_a_new_id_starts_a_new_call() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="read", arguments='{"a": 1}')
    a.on_tool_call_delta(0, id="c2", name="read", arguments='{"b": 2}')
    a.on_tool_call_delta(0, arguments="")  # continues c2
    assert [(r.id, r.arguments) for r in a.tool_calls()] == [
        ("c1", '{"a": 1}'),
        ("c2", '{"b": 2}'),
    ]


def test_same_id_at_another_index_is_rejected_and_state_unchanged() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    before = state(a)
    with pytest.raises(StreamProtocolError, match="already used"):
        a.on_tool_call_delta(1, id="c1", name="read")
    assert state(a) == before


def test_split_surrogate_pairs_are_rejoined() -> None:
    # a producer that split a UTF-16 string mid-pair and JSON-encoded each half
    halves = [json.loads('"\\ud83c"'), json.loads('"\\udf0d"')]
    a = StreamAssembler()
    a.on_text("globe ")
    for half in halves:
        a.on_text(half)
    a.on_tool_call_delta(0, id="c1", name="w", arguments='{"x": "')
    a.on_tool_call_delta(0, arguments=halves[0])
    with pytest.raises(IncompleteToolCallError, match="split character"):
        a.tool_calls()
    a.on_tool_call_delta(0, arguments=halves[1] + '"}')
    assert a.tool_calls()[0].arguments == '{"x": "🌍"}'
    a.on_tool_executed("c1", "ok")
    assert a.turn_messages[0] == AiMessage(
        text="globe 🌍", tool_requests=[ToolRequest(id="c1", name="w", arguments='{"x": "🌍"}')]
    )


def test_multibyte_characters_split_across_deltas_stay_intact() -> None:
    a = StreamAssembler()
    text = "你好, ünïcødé 🌍!"
    for char in text:
        a.on_text(char)
    assert a.end_turn() == [AiMessage(text=text)]


@pytest.mark.parametrize(
    "arguments",
    [
        "",
        '{"path": "a.txt"',
        '{"path": "a.txt",}',
        "{'path': 'a.txt'}",
        '{path: "a.txt"}',
        "[1, 2]",
        '"a string"',
        "null",
        '{"x": NaN}',
        '{"x": 1} trailing',
    ],
)
def test_strict_json_failures_name_index_and_id(arguments: str) -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(3, id="call_9", name="run", arguments=arguments)
    with pytest.raises(IncompleteToolCallError) as info:
        a.tool_calls()
    assert isinstance(info.value, InvalidInputError)
    assert (info.value.index, info.value.call_id) == (3, "call_9")
    assert "index 3" in str(info.value) and "call_9" in str(info.value)
    before = state(a)
    with pytest.raises(IncompleteToolCallError):
        a.on_tool_executed("call_9", "ran anyway")
    assert state(a) == before


def test_executing_one_call_needs_all_calls_of_the_model_call_complete() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    a.on_tool_call_delta(1, id="c2", name="read", arguments='{"a":')
    before = state(a)
    with pytest.raises(IncompleteToolCallError) as info:
        a.on_tool_executed("c1", "ok")
    assert info.value.call_id == "c2"
    assert state(a) == before


def test_bad_sequences_raise_and_leave_state_unchanged() -> None:
    a = StreamAssembler()
    a.on_text("t")
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    a.on_tool_call_delta(1, id="c2", name="read", arguments="{}")
    before = state(a)
    with pytest.raises(StreamProtocolError, match="never requested"):
        a.on_tool_executed("nope", "x")
    assert state(a) == before
    a.on_tool_executed("c1", "x")
    before = state(a)
    with pytest.raises(StreamProtocolError, match="already reported"):
        a.on_tool_executed("c1", "x")
    with pytest.raises(StreamProtocolError, match="still await"):
        a.on_text("more")
    with pytest.raises(StreamProtocolError, match="still await"):
        a.on_tool_call_delta(2, id="c3", name="x")
    with pytest.raises(StreamProtocolError):
        a.on_tool_executed("c2", 42)  # type: ignore[arg-type]
    with pytest.raises(StreamProtocolError):
        a.on_tool_call_delta(-1)
    with pytest.raises(StreamProtocolError):
        a.on_text(None)  # type: ignore[arg-type]
    assert state(a) == before
    assert a.on_tool_executed("c2", "y") is True
    with pytest.raises(StreamProtocolError, match="already reported"):
        a.on_tool_executed("c1", "x")  # an earlier model call's id


def test_multi_round_turn_reads_like_what_the_provider_saw() -> None:
    a = StreamAssembler()
    a.on_text("First I read.")
    a.on_tool_call_delta(0, id="c1", name="read", arguments='{"p": 1}')
    assert a.on_tool_executed("c1", "one")
    a.mark_flushed(len(a.ready))
    a.on_text("Now I write.")
    a.on_tool_call_delta(0, id="c2", name="write", arguments='{"p": 2}')  # index 0 again
    a.on_tool_call_delta(1, id="c3", name="write", arguments='{"p": 3}')
    assert a.on_tool_executed("c3", "three", is_error=True)  # every executed tool flushes
    assert a.on_tool_executed("c2", "two")
    a.on_text("Done")
    a.on_text(".")
    rest = a.end_turn()
    assert rest[-1] == AiMessage(text="Done.")
    history = [UserMessage(text="go"), *a.turn_messages]
    assert [m.type for m in history] == [
        "user",
        "ai",
        "tool_result",
        "ai",
        "tool_result",
        "tool_result",
        "ai",
    ]
    assert validate(history, "openai") == [] and validate(history, "anthropic") == []
    draft = turn_display(a.turn_messages, {})
    assert draft is not None and draft.status == "ok"
    assert draft.content.splitlines() == [
        "First I read.",
        '[tool] read({"p": 1}) -> ok',
        "Now I write.",
        '[tool] write({"p": 2}) -> ok',
        '[tool] write({"p": 3}) -> error: three',
        "Done.",
    ]


def test_fail_keeps_sealed_requests_and_text_but_drops_unsealed_fragments() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    a.on_tool_call_delta(1, id="c2", name="read", arguments="{}")
    a.on_tool_executed("c1", "ok")
    assert a.fail_turn() == [
        AiMessage(
            tool_requests=[
                ToolRequest(id="c1", name="read", arguments="{}"),
                ToolRequest(id="c2", name="read", arguments="{}"),
            ]
        ),
        ToolResult(id="c1", tool_name="read", text="ok"),
    ]
    assert a.unanswered_call_ids() == ["c2"]

    b = StreamAssembler()
    b.on_text("Let me ")
    b.on_tool_call_delta(0, id="c1", name="read", arguments='{"half')
    assert b.fail_turn() == [AiMessage(text="Let me ")]
    draft = turn_display(b.turn_messages, {}, "RuntimeError: boom")
    assert draft is not None
    assert (draft.status, draft.content) == ("failed", "Let me \n[failed] RuntimeError: boom")
    with pytest.raises(StreamProtocolError, match="closed"):
        b.on_text("x")


def test_end_turn_with_incomplete_call_raises_and_keeps_state() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{")
    before = state(a)
    with pytest.raises(IncompleteToolCallError):
        a.end_turn()
    assert state(a) == before and not a.closed


# -- chunk protocols --------------------------------------------------------------------------


def test_feed_langchain4j_json_chunks() -> None:
    a = StreamAssembler()
    chunks: list[Any] = [
        '{"type": "ai_response", "data": "Creating "}',
        {"type": "ai_response", "data": "it."},
        {"type": "tool_request", "id": "t1", "name": "write_file", "arguments": '{"path":'},
        {"type": "tool_request", "id": "t2", "name": "write_file", "arguments": '{"path":'},
        {"type": "tool_request", "id": "t1", "name": "write_file", "arguments": ' "a"}'},
        json.dumps({"type": "tool_request", "id": "t2", "name": "write_file", "arguments": '"b"}'}),
    ]
    assert not any(a.feed(c) for c in chunks)
    assert [(r.id, r.arguments) for r in a.tool_calls()] == [
        ("t1", '{"path": "a"}'),
        ("t2", '{"path":"b"}'),
    ]
    executed = {"type": "tool_executed", "name": "write_file", "arguments": "{}", "result": "ok"}
    assert a.feed({**executed, "id": "t1"})  # every executed tool is a flush point
    assert a.feed({**executed, "id": "t2"})
    assert [m.type for m in a.ready] == ["ai", "tool_result", "tool_result"]
    assert a.ready[0] == AiMessage(
        text="Creating it.",
        tool_requests=[
            ToolRequest(id="t1", name="write_file", arguments='{"path": "a"}'),
            ToolRequest(id="t2", name="write_file", arguments='{"path":"b"}'),
        ],
    )


def test_feed_langchain4j_executed_without_streamed_request() -> None:
    a = StreamAssembler()
    assert a.feed(
        {
            "type": "tool_executed",
            "id": "t9",
            "name": "ls",
            "arguments": '{"d": "."}',
            "result": "x",
        }
    )
    assert a.ready[0] == AiMessage(
        tool_requests=[ToolRequest(id="t9", name="ls", arguments='{"d": "."}')]
    )


def openai_chunk(
    content: str | None = None, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }


def as_objects(value: Any) -> Any:
    """The dict chunk as attribute objects, like the openai / anthropic SDK models."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: as_objects(v) for k, v in value.items()})
    if isinstance(value, list):
        return [as_objects(v) for v in value]
    return value


OPENAI_STREAM = [
    openai_chunk(content=""),
    openai_chunk(content="Creating "),
    openai_chunk(content="both."),
    openai_chunk(
        tool_calls=[
            {
                "index": 0,
                "id": "call_a",
                "type": "function",
                "function": {"name": "write_file", "arguments": ""},
            }
        ]
    ),
    openai_chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"path":'}}]),
    openai_chunk(
        tool_calls=[
            {
                "index": 1,
                "id": "call_b",
                "type": "function",
                "function": {"name": "write_file", "arguments": '{"path"'},
            }
        ]
    ),
    openai_chunk(
        tool_calls=[
            {"index": 0, "function": {"arguments": ' "a"}'}},
            {"index": 1, "function": {"arguments": ':"b"}'}},
        ]
    ),
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"total_tokens": 3},
    },
]


@pytest.mark.parametrize("objects", [False, True], ids=["dicts", "objects"])
def test_feed_openai_chunks(objects: bool) -> None:
    a = StreamAssembler()
    for chunk in OPENAI_STREAM:
        a.feed(as_objects(chunk) if objects else chunk)
    assert a.text() == "Creating both."
    assert a.tool_calls() == [
        ToolRequest(id="call_a", name="write_file", arguments='{"path": "a"}'),
        ToolRequest(id="call_b", name="write_file", arguments='{"path":"b"}'),
    ]


ANTHROPIC_STREAM: list[dict[str, Any]] = [
    {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": []}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Reading "},
    },
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "now."}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": ""},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"path": "a'},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '.txt"}'},
    },
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
    },
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
    {"type": "message_stop"},
]


@pytest.mark.parametrize("objects", [False, True], ids=["dicts", "objects"])
def test_feed_anthropic_events(objects: bool) -> None:
    a = StreamAssembler()
    for event in ANTHROPIC_STREAM:
        a.feed(as_objects(event) if objects else event)
    assert a.text() == "Reading now."
    assert a.tool_calls() == [
        ToolRequest(id="toolu_1", name="read_file", arguments='{"path": "a.txt"}'),
        ToolRequest(id="toolu_2", name="now", arguments="{}"),  # no input deltas: input {}
    ]


@pytest.mark.parametrize(
    "chunk",
    [
        "not json",
        "[1, 2]",
        {"type": "mystery"},
        {"no": "type"},
        {"type": "ai_response", "data": 5},
        {"type": "tool_request", "name": "x"},
        {"type": "tool_executed", "id": "zz", "result": "r"},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"name": "x"}}]}}]},
        {"choices": [{"index": 0, "delta": {"content": 7}}]},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "mystery_delta"}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "strange"}},
        {
            "type": "content_block_delta",
            "index": 5,
            "delta": {"type": "input_json_delta", "partial_json": "{"},
        },
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        None,
    ],
)
def test_unknown_or_malformed_chunks_raise_and_the_turn_stays_usable(chunk: Any) -> None:
    a = StreamAssembler()
    a.feed({"type": "ai_response", "data": "ok "})
    before = state(a)
    with pytest.raises(StreamProtocolError):
        a.feed(chunk)
    assert state(a) == before
    a.feed({"type": "ai_response", "data": "still"})
    assert a.end_turn() == [AiMessage(text="ok still")]


def test_a_multi_delta_chunk_is_atomic() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="x", arguments="{")
    before = state(a)
    bad = openai_chunk(
        tool_calls=[
            {"index": 0, "function": {"arguments": "}"}},
            {"index": 1, "id": "c1", "function": {"name": "dup"}},  # id already used
        ]
    )
    with pytest.raises(StreamProtocolError):
        a.feed(bad)
    assert state(a) == before
