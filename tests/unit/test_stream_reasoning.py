"""Streamed reasoning kept with its calls: Anthropic thinking, Chat Completions
``reasoning_content`` and Responses reasoning items, assembled byte for byte from recorded
event shapes (validated against the providers' SDK event types, and fed as SDK objects too).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import TypeAdapter

from memstore.core.check import REASONING_LOST, HistoryChecker, repair_plan
from memstore.core.reasoning import REASONING_LOST_KEY
from memstore.core.stream import StreamAssembler
from memstore.core.validate import validate
from memstore.core.window import StoredMessage
from memstore.errors import InvalidMessageError, StreamProtocolError
from memstore.formats import to_anthropic, to_openai, to_responses
from memstore.formats.responses import ITEM_IDS_KEY
from memstore.messages import AiMessage, Reasoning, ToolRequest, ToolResult, UserMessage
from tests.unit.test_reasoning import (
    assert_anthropic_request,
    assert_chat_messages,
    assert_responses_input,
    signature,
)

anthropic_types = pytest.importorskip("anthropic.types")
openai_responses = pytest.importorskip("openai.types.responses")

ANTHROPIC_EVENT = TypeAdapter(anthropic_types.RawMessageStreamEvent)
RESPONSES_EVENT = TypeAdapter(openai_responses.ResponseStreamEvent)

ARGS = '{"path": "a.txt"}'
SIG = signature(7)
DATA = signature(9)


def as_dicts(events: list[dict[str, Any]], adapter: TypeAdapter[Any]) -> list[Any]:
    for event in events:
        adapter.validate_python(event)  # the recorded shape is one the SDK knows
    return copy.deepcopy(events)


def as_sdk(events: list[dict[str, Any]], adapter: TypeAdapter[Any]) -> list[Any]:
    return [adapter.validate_python(event) for event in events]


FORMS: list[Callable[[list[dict[str, Any]], TypeAdapter[Any]], list[Any]]] = [as_dicts, as_sdk]


def state(a: StreamAssembler) -> Any:
    return copy.deepcopy(a._s)


# --- Anthropic ----------------------------------------------------------------------------------


def thinking_then_tool_use(signature_parts: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "I should write "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "the file first."},
        },
    ]
    events += [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": part},
        }
        for part in signature_parts
    ]
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ARGS},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 30},
        },
        {"type": "message_stop"},
    ]
    return events


@pytest.mark.parametrize("form", FORMS)
def test_anthropic_thinking_is_kept_with_its_tool_use(form: Any) -> None:
    a = StreamAssembler()
    for event in form(thinking_then_tool_use([SIG[:20], SIG[20:]]), ANTHROPIC_EVENT):
        a.feed(event)
    assert a.on_tool_executed("toolu_1", "ok")
    ai, result = a.ready
    assert isinstance(ai, AiMessage) and isinstance(result, ToolResult)
    assert list(ai.reasoning) == [
        Reasoning(
            provider="anthropic",
            kind="thinking",
            text="I should write the file first.",
            signature=SIG,
        )
    ]
    _, request = to_anthropic([UserMessage(text="write a.txt"), ai, result])
    assert_anthropic_request(request)
    assert request[1]["content"][0] == {
        "type": "thinking",
        "thinking": "I should write the file first.",
        "signature": SIG,
    }
    assert request[1]["content"][1]["type"] == "tool_use"


@pytest.mark.parametrize("form", FORMS)
def test_anthropic_redacted_thinking_keeps_its_data(form: Any) -> None:
    events = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "redacted_thinking", "data": DATA},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}},
        },
        {"type": "content_block_stop", "index": 1},
    ]
    a = StreamAssembler()
    for event in form(events, ANTHROPIC_EVENT):
        a.feed(event)
    a.on_tool_executed("toolu_1", "ok")
    ai = a.ready[0]
    assert isinstance(ai, AiMessage)
    assert list(ai.reasoning) == [
        Reasoning(provider="anthropic", kind="redacted_thinking", signature=DATA)
    ]
    assert ai.tool_requests[0].arguments == "{}"


def test_a_stream_cut_inside_a_signature_leaves_no_reasoning() -> None:
    events = thinking_then_tool_use([SIG[:20]])
    cut = events.index({"type": "content_block_stop", "index": 0})
    a = StreamAssembler()
    for event in events[:cut]:  # the block never stopped
        a.feed(event)
    a.on_text("partial")
    assert a.fail_turn() == [AiMessage(text="partial")]


def test_a_thinking_block_without_a_signature_is_not_kept() -> None:
    a = StreamAssembler()
    for event in thinking_then_tool_use([]):
        a.feed(event)
    a.on_tool_executed("toolu_1", "ok")
    ai = a.ready[0]
    assert isinstance(ai, AiMessage) and list(ai.reasoning) == []


@pytest.mark.parametrize(
    ("delta", "block"),
    [
        ({"type": "thinking_delta", "thinking": "x"}, "text"),
        ({"type": "signature_delta", "signature": "x"}, "tool_use"),
        ({"type": "thinking_delta", "thinking": 3}, "thinking"),
    ],
)
def test_a_thinking_delta_out_of_place_is_refused(delta: dict[str, Any], block: str) -> None:
    a = StreamAssembler()
    start: dict[str, Any] = {"text": {"type": "text", "text": ""}}
    start["tool_use"] = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    start["thinking"] = {"type": "thinking", "thinking": "", "signature": ""}
    a.feed({"type": "content_block_start", "index": 0, "content_block": start[block]})
    before = state(a)
    with pytest.raises(StreamProtocolError):
        a.feed({"type": "content_block_delta", "index": 0, "delta": delta})
    assert state(a) == before


def test_a_nul_in_thinking_is_refused_and_changes_nothing() -> None:
    a = StreamAssembler()
    a.feed(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        }
    )
    before = state(a)
    with pytest.raises(InvalidMessageError):
        a.feed(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "a\x00b"},
            }
        )
    assert state(a) == before


def test_thinking_of_the_next_model_call_starts_fresh() -> None:
    a = StreamAssembler()
    for event in thinking_then_tool_use([SIG]):
        a.feed(event)
    a.on_tool_executed("toolu_1", "ok")
    a.mark_flushed(len(a.ready))
    second = [
        dict(e) for e in thinking_then_tool_use([signature(8)]) if e["type"] != "message_start"
    ]
    second = [e for e in second if e.get("index") != 1]  # thinking, then only text
    second.insert(
        -2,
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "text", "text": "Done."},
        },
    )
    second.insert(-2, {"type": "content_block_stop", "index": 1})
    for event in second:
        a.feed(event)
    (final,) = a.end_turn()
    assert isinstance(final, AiMessage) and final.text == "Done."
    assert [p.signature for p in final.reasoning] == [signature(8)]


# --- Chat Completions reasoning_content ---------------------------------------------------------


def chat_chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "deepseek-reasoner",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }


def test_reasoning_content_deltas_go_with_the_calls() -> None:
    a = StreamAssembler()
    for piece in ["The user wants ", "a file."]:
        a.feed(chat_chunk({"role": "assistant", "reasoning_content": piece}))
    a.feed(
        chat_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "write", "arguments": ARGS},
                    }
                ]
            }
        )
    )
    a.on_tool_executed("call_1", "ok")
    ai, result = a.ready
    assert isinstance(ai, AiMessage)
    assert list(ai.reasoning) == [
        Reasoning(provider="openai", kind="reasoning_content", text="The user wants a file.")
    ]
    request = to_openai([UserMessage(text="go"), ai, result])
    assert_chat_messages(request)
    assert request[1]["reasoning_content"] == "The user wants a file."


# --- Responses ----------------------------------------------------------------------------------


def reasoning_done(index: int, item_id: str, seed: int, summary: str) -> dict[str, Any]:
    return {
        "type": "response.output_item.done",
        "output_index": index,
        "sequence_number": 0,
        "item": {
            "type": "reasoning",
            "id": item_id,
            "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": signature(seed),
        },
    }


def call_events(index: int, call_id: str, item_id: str, arguments: str) -> list[dict[str, Any]]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": "write"}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "sequence_number": 0,
            "item": {**item, "arguments": "", "status": "in_progress"},
        },
        *(
            {
                "type": "response.function_call_arguments.delta",
                "output_index": index,
                "item_id": item_id,
                "sequence_number": 0,
                "delta": arguments[i : i + 5],
            }
            for i in range(0, len(arguments), 5)
        ),
        {
            "type": "response.function_call_arguments.done",
            "output_index": index,
            "item_id": item_id,
            "name": "write",
            "sequence_number": 0,
            "arguments": arguments,
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "sequence_number": 0,
            "item": {**item, "arguments": arguments, "status": "completed"},
        },
    ]


def reasoning_events(index: int, item_id: str, seed: int, summary: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "sequence_number": 0,
            "item": {"type": "reasoning", "id": item_id, "summary": []},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": index,
            "item_id": item_id,
            "summary_index": 0,
            "sequence_number": 0,
            "delta": summary,
        },
        reasoning_done(index, item_id, seed, summary),
    ]


def responses_turn() -> list[dict[str, Any]]:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    return [
        {"type": "response.created", "sequence_number": 0, "response": response},
        *reasoning_events(0, "rs_1", 3, "Write a first."),
        *call_events(1, "call_1", "fc_1", ARGS),
        *reasoning_events(2, "rs_2", 4, "Then b."),
        *call_events(3, "call_2", "fc_2", '{"path": "b.txt"}'),
        {"type": "response.completed", "sequence_number": 0, "response": response},
    ]


@pytest.mark.parametrize("form", FORMS)
def test_responses_reasoning_items_and_call_ids_are_kept(form: Any) -> None:
    a = StreamAssembler()
    for event in form(responses_turn(), RESPONSES_EVENT):
        a.feed(event)
    assert [r.id for r in a.tool_calls()] == ["call_1", "call_2"]
    a.on_tool_executed("call_1", "ok a")
    a.on_tool_executed("call_2", "ok b")
    ai = a.ready[0]
    assert isinstance(ai, AiMessage)
    assert ai.tool_requests == [
        ToolRequest(id="call_1", name="write", arguments=ARGS),
        ToolRequest(id="call_2", name="write", arguments='{"path": "b.txt"}'),
    ]
    assert [(p.id, p.text, p.signature, p.before_call) for p in ai.reasoning] == [
        ("rs_1", "Write a first.", signature(3), None),
        ("rs_2", "Then b.", signature(4), "call_2"),  # it came between the calls
    ]
    assert ai.metadata[ITEM_IDS_KEY] == {"call_1": "fc_1", "call_2": "fc_2"}
    items = to_responses([UserMessage(text="write both"), *a.ready])
    assert_responses_input(items)
    reasoning = [item for item in items if item.get("type") == "reasoning"]
    assert [(r["id"], r["encrypted_content"]) for r in reasoning] == [
        ("rs_1", signature(3)),
        ("rs_2", signature(4)),
    ]
    assert reasoning[0]["summary"] == [{"type": "summary_text", "text": "Write a first."}]
    calls = [item for item in items if item.get("type") == "function_call"]
    assert [(c["id"], c["call_id"]) for c in calls] == [("fc_1", "call_1"), ("fc_2", "call_2")]
    # each reasoning item right before its call, as the model produced them
    assert [item.get("id") for item in items[1:5]] == ["rs_1", "fc_1", "rs_2", "fc_2"]


def test_thinking_between_tool_use_blocks_keeps_its_place() -> None:
    events = thinking_then_tool_use([SIG])
    second = [
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "thinking_delta", "thinking": "And b."},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "signature_delta", "signature": signature(8)},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "write", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": ARGS},
        },
        {"type": "content_block_stop", "index": 3},
    ]
    stop = events.index({"type": "content_block_stop", "index": 1}) + 1
    a = StreamAssembler()
    for event in as_dicts(events[:stop] + second + events[stop:], ANTHROPIC_EVENT):
        a.feed(event)
    a.on_tool_executed("toolu_1", "ok")
    a.on_tool_executed("toolu_2", "ok")
    _, request = to_anthropic([UserMessage(text="write a and b"), *a.ready])
    assert_anthropic_request(request)
    blocks = request[1]["content"]
    assert [(b["type"], b.get("signature", b.get("id"))) for b in blocks] == [
        ("thinking", SIG),
        ("tool_use", "toolu_1"),
        ("thinking", signature(8)),
        ("tool_use", "toolu_2"),
    ]


def test_responses_text_is_the_reply() -> None:
    a = StreamAssembler()
    a.feed(
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "item_id": "msg_1",
            "sequence_number": 1,
            "delta": "Hello",
            "logprobs": [],
        }
    )
    assert a.end_turn() == [AiMessage(text="Hello")]


def test_a_reasoning_item_cut_before_its_end_is_dropped() -> None:
    events = responses_turn()
    without_done = [
        e
        for e in events
        if not (e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning")
    ]
    a = StreamAssembler()
    for event in without_done:
        a.feed(event)
    a.on_tool_executed("call_1", "ok")
    ai = a.ready[0]
    assert isinstance(ai, AiMessage) and list(ai.reasoning) == []


def test_a_failed_response_is_reported() -> None:
    a = StreamAssembler()
    with pytest.raises(StreamProtocolError, match="failed"):
        a.feed({"type": "response.failed", "sequence_number": 1, "response": {}})


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning"}},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text"}]},
        },
        {"type": "response.output_item.added", "item": {"type": "reasoning", "id": "rs_1"}},
        {"type": "response.function_call_arguments.delta", "output_index": 5, "delta": "{"},
        {"type": "response.output_text.delta", "delta": 3},
    ],
)
def test_malformed_responses_events_change_nothing(event: dict[str, Any]) -> None:
    a = StreamAssembler()
    for e in reasoning_events(0, "rs_0", 1, "x")[:1]:
        a.feed(e)
    before = state(a)
    with pytest.raises(StreamProtocolError):
        a.feed(event)
    assert state(a) == before


# --- whole parts ----------------------------------------------------------------------------------


def test_on_reasoning_adds_a_whole_part_in_order() -> None:
    a = StreamAssembler()
    part = Reasoning(provider="google", kind="thought", signature=signature(5))
    a.on_reasoning(part)
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    a.on_tool_executed("c1", "ok")
    ai = a.ready[0]
    assert isinstance(ai, AiMessage) and list(ai.reasoning) == [part]


def test_on_reasoning_refuses_what_cannot_be_stored() -> None:
    a = StreamAssembler()
    before = state(a)
    with pytest.raises(StreamProtocolError):
        a.on_reasoning({"provider": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        a.on_reasoning(Reasoning(provider="x", kind="y", text="a\x00"))
    assert state(a) == before


def test_reasoning_while_results_are_awaited_is_refused() -> None:
    a = StreamAssembler()
    a.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
    a.on_tool_call_delta(1, id="c2", name="read", arguments="{}")
    a.on_tool_executed("c1", "ok")
    with pytest.raises(StreamProtocolError, match="await"):
        a.on_reasoning(Reasoning(provider="x", kind="y", text="t"))


def test_a_failed_turn_keeps_no_unsealed_reasoning() -> None:
    a = StreamAssembler()
    a.on_reasoning(Reasoning(provider="x", kind="y", text="t"))
    a.on_text("so far")
    assert a.fail_turn() == [AiMessage(text="so far")]


# --- lost reasoning is marked, checked and validated ----------------------------------------------


def lost_reply() -> AiMessage:
    """The AI message of a Responses stream whose first reasoning item never finished."""
    events = responses_turn()
    first_done = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    )
    a = StreamAssembler()
    for event in events[:first_done] + events[first_done + 1 :]:
        a.feed(event)
    a.on_tool_executed("call_1", "ok")
    ai = a.ready[0]
    assert isinstance(ai, AiMessage)
    return ai


def test_reasoning_cut_off_before_its_calls_were_stored_is_marked() -> None:
    ai = lost_reply()
    assert [p.id for p in ai.reasoning] == ["rs_2"]
    assert ai.metadata[REASONING_LOST_KEY] == 1
    complete = StreamAssembler()
    for event in responses_turn():
        complete.feed(event)
    complete.on_tool_executed("call_1", "ok")
    assert REASONING_LOST_KEY not in complete.ready[0].metadata


def test_check_reports_the_marked_reply() -> None:
    ai = lost_reply()
    checker = HistoryChecker()
    rows = [
        UserMessage(text="go"),
        ai,
        *[ToolResult(id=c.id, tool_name="write", text="ok") for c in ai.tool_requests],
    ]
    for number, message in enumerate(rows, start=1):
        checker.feed(StoredMessage(number, message))
    assert [(f.row_id, f.code) for f in checker.finish()] == [(2, REASONING_LOST)]
    assert repair_plan(checker.finish()).unfixable == 1


def test_validate_reports_the_reasoning_rules() -> None:
    results = [ToolResult(id="c1", tool_name="f", text="ok")]
    call = ToolRequest(id="c1", name="f", arguments="{}")
    thought = Reasoning(provider="anthropic", kind="thinking", text="t", signature=SIG)
    earlier = [
        UserMessage(text="one"),
        AiMessage(
            reasoning=[thought], tool_requests=[ToolRequest(id="c0", name="f", arguments="{}")]
        ),
        ToolResult(id="c0", tool_name="f", text="ok"),
        AiMessage(text="done"),
        UserMessage(text="two"),
    ]
    good = [*earlier, AiMessage(reasoning=[thought], tool_requests=[call]), *results]
    assert validate(good, "anthropic") == []
    missing = [*earlier, AiMessage(tool_requests=[call]), *results]
    assert [v.code for v in validate(missing, "anthropic")] == ["reasoning_missing"]
    assert validate(missing[4:], "anthropic") == []  # no thinking anywhere: thinking is off
    unsigned = thought.model_copy(update={"signature": None})
    bad = [UserMessage(text="go"), AiMessage(reasoning=[unsigned], tool_requests=[call]), *results]
    assert [v.code for v in validate(bad, "anthropic")] == ["reasoning_unsendable"]
    assert validate(bad, "openai") == []  # not sent to OpenAI at all

    content = Reasoning(provider="openai", kind="reasoning_content", text="why")
    second = ToolRequest(id="c2", name="f", arguments="{}")
    chat = [
        UserMessage(text="go"),
        AiMessage(reasoning=[content], tool_requests=[call]),
        *results,
        AiMessage(tool_requests=[second]),
        ToolResult(id="c2", tool_name="f", text="ok"),
    ]
    assert [(v.index, v.code) for v in validate(chat, "openai")] == [(3, "reasoning_missing")]

    marked = [UserMessage(text="go"), lost_reply()]
    marked += [ToolResult(id=c.id, tool_name="write", text="ok") for c in marked[1].tool_requests]
    assert "reasoning_missing" in [v.code for v in validate(marked, "openai")]
