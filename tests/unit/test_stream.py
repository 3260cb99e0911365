"""The stream assembler as pure code: no database, no cache."""

from __future__ import annotations

import copy
import gc
import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from memstore import (
    AiMessage,
    IncompleteToolCallError,
    InvalidInputError,
    InvalidMessageError,
    MessageTooLargeError,
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


def test_docstring_examples_run() -> None:
    import doctest
    import importlib
    import pkgutil

    import memstore.core.stream

    package = memstore.core.stream
    modules = [package] + [
        importlib.import_module(info.name)
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")
    ]
    outcomes = [doctest.testmod(module) for module in modules]
    assert sum(o.attempted for o in outcomes) > 0 and sum(o.failed for o in outcomes) == 0


# -- results and messages the store would refuse (issue 9, item 1) ----------------------------


def two_calls(limit: int | None = 100) -> StreamAssembler:
    a = StreamAssembler(max_text_bytes=limit)
    a.on_text("Both.")
    a.on_tool_call_delta(0, id="c1", name="read_file", arguments="{}")
    a.on_tool_call_delta(1, id="c2", name="send_email", arguments="{}")
    return a


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ("bin\x00ary", InvalidMessageError),
        ("lone \udcff", InvalidMessageError),
        ("é" * 51, MessageTooLargeError),  # 102 UTF-8 bytes
    ],
)
@pytest.mark.parametrize("first", [True, False], ids=["first-result", "later-result"])
def test_a_rejected_result_changes_nothing_and_can_be_reported_again(
    result: str, error: type[Exception], first: bool
) -> None:
    a = two_calls()
    if not first:
        assert a.on_tool_executed("c2", "sent")
    before = state(a)
    with pytest.raises(error) as info:
        a.on_tool_executed("c1", result)
    assert state(a) == before
    assert result not in str(info.value) and "c1" in str(info.value)
    if isinstance(info.value, MessageTooLargeError):
        assert (info.value.size, info.value.limit) == (102, 100)
    assert a.on_tool_executed("c1", "cleaned")
    if first:
        assert a.on_tool_executed("c2", "sent")
    results = [m for m in a.turn_messages if isinstance(m, ToolResult)]
    assert sorted((r.id, r.text) for r in results) == [("c1", "cleaned"), ("c2", "sent")]


def test_no_limit_still_refuses_nul() -> None:
    a = two_calls(limit=None)
    with pytest.raises(InvalidMessageError):
        a.on_tool_executed("c1", "\x00")
    assert a.on_tool_executed("c1", "x" * 10_000_000)


@pytest.mark.parametrize(
    "result",
    ["fits", "", "bin\x00ary\x00", "lone \udcff", "é" * 200, "🌍" * 99, "\x00" * 500, "a" * 201],
)
def test_truncate_stores_a_marked_storable_result(result: str) -> None:
    a = two_calls(limit=200)
    assert a.on_tool_executed("c1", result, truncate=True)
    stored = a.ready[-1]
    assert isinstance(stored, ToolResult)
    text = stored.text
    assert "\x00" not in text and not any("\ud800" <= c <= "\udfff" for c in text)
    assert len(text.encode("utf-8")) <= 200
    if result == "fits" or result == "":
        assert text == result  # a storable result is stored as it is
    else:
        assert "[memstore: " in text  # never a silent change
    if "\x00" in result or "\udcff" in result:
        assert "replaced with U+FFFD" in text
    if len(result.encode("utf-8", "surrogatepass")) > 200:
        assert "[memstore: result truncated from " in text


def test_truncate_cannot_fit_the_marker_in_a_tiny_limit() -> None:
    a = two_calls(limit=20)
    before = state(a)
    with pytest.raises(MessageTooLargeError):
        a.on_tool_executed("c1", "x" * 30, truncate=True)
    assert state(a) == before


def test_an_unstorable_ai_message_is_refused_before_any_tool_runs() -> None:
    a = StreamAssembler(max_text_bytes=50)
    a.on_text("t" * 60)
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    with pytest.raises(MessageTooLargeError):
        a.tool_calls()
    before = state(a)
    with pytest.raises(MessageTooLargeError):
        a.on_tool_executed("c1", "ok")
    assert state(a) == before


@pytest.mark.parametrize(
    "step",
    [
        lambda a: a.on_text("a\x00b"),
        lambda a: a.on_tool_call_delta(0, id="c\x00"),
        lambda a: a.on_tool_call_delta(0, arguments='{"a": "\x00"}'),
        lambda a: a.feed({"type": "ai_response", "data": "\x00"}),
    ],
)
def test_nul_in_a_delta_is_refused_at_once(step: Any) -> None:
    a = StreamAssembler()
    a.on_text("ok")
    before = state(a)
    with pytest.raises(InvalidMessageError, match="NUL"):
        step(a)
    assert state(a) == before


def test_end_and_fail_with_an_oversized_final_text() -> None:
    a = StreamAssembler(max_text_bytes=10)
    a.on_tool_call_delta(0, id="c1", name="r", arguments="{}")
    a.on_tool_executed("c1", "ok")
    a.on_text("x" * 11)
    before = state(a)
    with pytest.raises(MessageTooLargeError):
        a.end_turn()
    assert state(a) == before
    rest = a.fail_turn()  # the tool that ran stays; the text that cannot be stored goes
    assert [m.type for m in rest] == ["ai", "tool_result"]
    assert a.closed


def test_flushed_messages_are_the_durable_part() -> None:
    a = two_calls()
    a.on_tool_executed("c1", "one")
    a.mark_flushed(len(a.ready))
    a.on_tool_executed("c2", "two")
    assert [m.type for m in a.flushed_messages] == ["ai", "tool_result"]
    draft = turn_display(a.flushed_messages, {}, "StorageError: down")
    assert draft is not None
    assert draft.content.splitlines()[1:3] == [
        "[tool] read_file({}) -> ok",
        "[tool] send_email({})",  # written? not known: no "-> ok"
    ]


# -- strict chunk fields (issue 9, item 11) ---------------------------------------------------


@pytest.mark.parametrize("flag", ["true", "false", 1, 0, "1", 1.0, [], {}])
def test_langchain4j_is_error_must_be_a_bool(flag: object) -> None:
    a = StreamAssembler()
    a.feed({"type": "tool_request", "id": "t1", "name": "ls", "arguments": "{}"})
    before = state(a)
    chunk = {"type": "tool_executed", "id": "t1", "result": "boom", "is_error": flag}
    with pytest.raises(StreamProtocolError, match="is_error"):
        a.feed(chunk)
    with pytest.raises(StreamProtocolError, match="is_error"):
        a.feed(json.dumps(chunk))
    assert state(a) == before
    assert a.feed({**chunk, "is_error": True})
    assert a.ready[-1] == ToolResult(id="t1", tool_name="ls", text="boom", is_error=True)


@pytest.mark.parametrize("flag", [True, False, None])
def test_langchain4j_is_error_bool_or_absent(flag: bool | None) -> None:
    a = StreamAssembler()
    a.feed({"type": "tool_request", "id": "t1", "name": "ls", "arguments": "{}"})
    chunk: dict[str, Any] = {"type": "tool_executed", "id": "t1", "result": "r"}
    if flag is not None:
        chunk["is_error"] = flag
    a.feed(chunk)
    assert a.ready[-1] == ToolResult(id="t1", tool_name="ls", text="r", is_error=bool(flag))


MALFORMED_CHUNKS: list[Any] = [
    # langchain4j
    {"type": "tool_request", "id": "t1", "name": "ls", "index": "0"},
    {"type": "tool_request", "id": "t1", "name": "ls", "index": -1},
    {"type": "tool_request", "id": "t1", "name": "ls", "index": True},
    {"type": "tool_request", "id": 7, "name": "ls"},
    {"type": "tool_request", "id": "t1", "name": ["ls"]},
    {"type": "tool_request", "id": "t1", "name": "ls", "arguments": {"a": 1}},
    {"type": "tool_executed", "id": "t1", "name": "ls", "arguments": "{}", "result": None},
    {"type": "tool_executed", "id": "t1", "name": "ls", "arguments": "{}", "result": 5},
    {"type": "ai_response", "data": None},
    {"type": ["ai_response"], "data": "x"},
    {"type": {"nested": 1}},
    # openai
    {"choices": "abc"},
    {"choices": {"index": 0}},
    {"choices": [5]},
    {"choices": ["delta"]},
    {"choices": [{"index": "0", "delta": {"content": "x"}}]},
    {"choices": [{"index": 0.0, "delta": {"content": "x"}}]},
    {"choices": [{"index": 0, "delta": "content"}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": "x"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [7]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "f"}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": 5}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": 1}}]}}]},
    # anthropic
    {"type": "content_block_start", "index": 0},
    {"type": "content_block_start", "index": 0, "content_block": "text"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": ["text"]}},
    {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": 1}},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": 1}},
    {"type": "content_block_delta", "index": 0},
    {"type": "content_block_delta", "index": 0, "delta": ["text_delta"]},
    {"type": "content_block_delta", "index": 0, "delta": {"type": {"a": 1}}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 2}},
    {"type": "content_block_stop", "index": None},
    {"type": "error", "error": "overloaded"},
    # not objects, or not JSON
    "[" * 100_000,
    b"\xff\xfe",
    [],
    5,
    "5",
]


@pytest.mark.parametrize("chunk", MALFORMED_CHUNKS)
def test_malformed_chunk_fields_are_stream_protocol_errors(chunk: Any) -> None:
    a = StreamAssembler()
    a.feed({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    before = state(a)
    with pytest.raises(StreamProtocolError):
        a.feed(chunk)
    assert state(a) == before
    a.feed({"type": "ai_response", "data": "still"})
    assert a.end_turn() == [AiMessage(text="still")]


# -- the cost of a chunk (issue 9, item 6) ------------------------------------------------------


def traced_steps(action: Any) -> int:
    """Python-level work of ``action()``: the trace events (calls, lines, returns) it runs.
    Deterministic, unlike a timer: a per-chunk cost that grows with the turn shows here."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        count += 1
        return tracer

    previous = sys.gettrace()
    collecting = gc.isenabled()
    gc.disable()  # a collection would run other objects' finalizers inside the count
    sys.settrace(tracer)
    try:
        action()
    finally:
        sys.settrace(previous)
        if collecting:
            gc.enable()
    return count


def openai_multi_op(i: int) -> dict[str, Any]:
    return openai_chunk(
        content=f"t{i % 10} ",
        tool_calls=[
            {"index": 0, "function": {"arguments": " "}},
            {"index": 1, "function": {"arguments": " "}},
        ],
    )


def grow_turn(a: StreamAssembler, rounds: int) -> None:
    """Completed model calls with parallel tool calls: a long turn before the chunk measured."""
    for r in range(rounds):
        a.on_text("step ")
        a.on_tool_call_delta(0, id=f"g{r}a", name="f", arguments="{}")
        a.on_tool_call_delta(1, id=f"g{r}b", name="f", arguments="{}")
        a.on_tool_executed(f"g{r}a", "ok")
        a.on_tool_executed(f"g{r}b", "ok")


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param(
            [openai_chunk(tool_calls=[{"index": 0, "id": "x0", "function": {"name": "f"}}])]
            + [openai_multi_op(i) for i in range(1)],
            id="openai-text-and-deltas",
        ),
        pytest.param(
            [
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "text", "text": "hi"},
                },
            ],
            id="anthropic-block-with-text",
        ),
        pytest.param(
            [
                {"type": "tool_request", "id": "x0", "name": "f", "arguments": "{}"},
                {"type": "tool_request", "id": "x1", "name": "f", "arguments": "{}"},
                {"type": "tool_request", "id": "x2", "name": "f", "arguments": "{}"},
            ],
            id="langchain4j-request-new-calls",
        ),
        pytest.param(
            [
                {"type": "ai_response", "data": "x"},
                {"type": "tool_executed", "id": "x2", "name": "f", "arguments": "{}"}
                | {"result": "r"},
            ],
            id="langchain4j-executed-carrying-its-request",
        ),
    ],
)
def test_a_chunk_costs_the_same_whatever_the_turn_length(chunks: list[Any]) -> None:
    def cost(rounds: int) -> int:
        a = StreamAssembler()
        grow_turn(a, rounds)
        *prefix, last = chunks
        for chunk in prefix:
            a.feed(chunk)
        return traced_steps(lambda: a.feed(last))

    assert cost(5) == cost(400)


def test_feeding_many_multi_op_chunks_costs_the_same_per_chunk() -> None:
    a = StreamAssembler()
    a.feed(openai_chunk(tool_calls=[{"index": 0, "id": "c0", "function": {"name": "f"}}]))
    a.feed(openai_chunk(tool_calls=[{"index": 1, "id": "c1", "function": {"name": "f"}}]))
    steps = {}
    for i in range(2000):
        if i in (50, 1999):
            chunk = openai_multi_op(i)
            steps[i] = traced_steps(lambda: a.feed(chunk))  # noqa: B023 (called at once)
        else:
            a.feed(openai_multi_op(i))
    assert steps[1999] == steps[50]
    # and a rejected multi-op chunk late in the turn costs what it costs early
    bad = openai_chunk(
        content="x",
        tool_calls=[{"index": 0, "function": {"arguments": " "}}, {"index": 1, "id": "c0"}],
    )
    b = StreamAssembler()
    b.feed(openai_chunk(tool_calls=[{"index": 0, "id": "c0", "function": {"name": "f"}}]))
    b.feed(openai_chunk(tool_calls=[{"index": 1, "id": "c1", "function": {"name": "f"}}]))

    def rejected(x: StreamAssembler) -> None:
        with pytest.raises(StreamProtocolError):
            x.feed(bad)

    early = traced_steps(lambda: rejected(b))
    assert traced_steps(lambda: rejected(a)) == early


def test_many_parallel_calls_cost_the_same_per_fragment() -> None:
    a = StreamAssembler()
    steps = {}
    for i in range(3000):
        chunk = {"type": "tool_request", "id": f"c{i}", "name": "f", "arguments": "{}"}
        if i in (100, 2999):
            steps[i] = traced_steps(lambda: a.feed(chunk))  # noqa: B023 (called at once)
        else:
            a.feed(chunk)
    assert steps[2999] == steps[100]
