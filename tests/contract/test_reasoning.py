"""Reasoning on every backend, sync and async: a window rebuilt after a restart renders the
thinking blocks and reasoning items before their calls, byte for byte; the display history
never holds them; export/import, purge and encryption cover them."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from memstore import AiMessage, Reasoning, ToolRequest, ToolResult, UserMessage
from memstore.core.check import REASONING_LOST
from memstore.core.reasoning import REASONING_LOST_KEY
from memstore.formats import to_anthropic, to_responses
from memstore.operations import check_app
from tests.conftest import StoreFactory
from tests.contract.test_encryption import ONE, raw_values, raw_window
from tests.unit.test_stream_reasoning import SIG, responses_turn, thinking_then_tool_use


def opaque(tag: str) -> str:
    """A signature-like payload unique to the test (and easy to look for in raw bytes)."""
    return base64.b64encode(f"sig-{tag}-".encode() + bytes(range(200, 256))).decode()


def reasoning_turn(tag: str) -> list[Any]:
    return [
        UserMessage(text=f"question-{tag}"),
        AiMessage(
            text=f"answer-{tag}",
            reasoning=[
                Reasoning(
                    provider="anthropic",
                    kind="thinking",
                    text=f"thought-{tag}",
                    signature=opaque(f"a{tag}"),
                ),
                Reasoning(
                    provider="openai",
                    kind="reasoning",
                    id=f"rs_{tag}",
                    text=f"summary-{tag}",
                    signature=opaque(f"o{tag}"),
                    extra={"summary": [{"type": "summary_text", "text": f"summary-{tag}"}]},
                ),
            ],
            tool_requests=[ToolRequest(id=f"call_{tag}", name="lookup", arguments="{}")],
        ),
        ToolResult(id=f"call_{tag}", tool_name="lookup", text="found"),
    ]


def assert_rendered_with_reasoning(messages: list[Any], tag: str) -> None:
    _, turns = to_anthropic(messages)
    blocks = turns[-2]["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    assert blocks[0]["signature"] == opaque(f"a{tag}")
    assert blocks[0]["thinking"] == f"thought-{tag}"
    items = to_responses(messages)
    kinds = [item.get("type", "message") for item in items]
    at = kinds.index("function_call")
    assert kinds[at - 2 : at + 1] == ["reasoning", "message", "function_call"]
    assert items[at - 2]["encrypted_content"] == opaque(f"o{tag}")
    assert items[at - 2]["id"] == f"rs_{tag}"


def test_a_restart_mid_tool_loop_rebuilds_the_reasoning(
    make_store: StoreFactory, app_id: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    store = make_store()
    turn = reasoning_turn(tag)
    store.append(app_id, turn[:2])  # the call is made; the service dies before the result
    store.append(app_id, turn[2:])
    assert store.memory(app_id).messages() == turn

    restarted = make_store()
    restarted.memory(app_id).invalidate()
    assert restarted.load_window(app_id) == turn
    assert restarted.memory(app_id).messages() == turn
    assert_rendered_with_reasoning(restarted.memory(app_id).messages(), tag)
    restarted.reload(app_id)
    assert_rendered_with_reasoning(restarted.memory(app_id).messages(), tag)


def test_reasoning_never_reaches_the_display_history(make_store: StoreFactory, app_id: str) -> None:
    tag = uuid.uuid4().hex[:8]
    store = make_store()
    store.append(app_id, reasoning_turn(tag))
    shown = json.dumps([entry.text for entry in store.history(app_id)])
    assert f"answer-{tag}" in shown
    for hidden in (f"thought-{tag}", f"summary-{tag}", opaque(f"a{tag}"), opaque(f"o{tag}")):
        assert hidden not in shown


def test_export_import_and_purge_cover_reasoning(make_store: StoreFactory, app_id: str) -> None:
    tag = uuid.uuid4().hex[:8]
    store = make_store()
    turn = reasoning_turn(tag)
    store.append(app_id, turn)
    records = list(store.export([app_id]))
    assert opaque(f"a{tag}") in json.dumps(records)

    store.purge(app_id)
    assert store.load_window(app_id) == []
    assert not any(opaque(f"a{tag}") in value for value in raw_values(make_store.engine, app_id))

    store.import_records(records)
    assert store.load_window(app_id) == turn
    assert_rendered_with_reasoning(store.memory(app_id).messages(), tag)


def test_encryption_covers_reasoning(make_store: StoreFactory, app_id: str) -> None:
    tag = uuid.uuid4().hex[:8]
    store = make_store(encryption_keys=ONE)
    turn = reasoning_turn(tag)
    store.append(app_id, turn)
    assert store.memory(app_id).messages() == turn
    assert store.load_window(app_id) == turn
    hidden = (f"thought-{tag}", f"summary-{tag}", opaque(f"a{tag}"), opaque(f"o{tag}"))
    for value in raw_values(make_store.engine, app_id):
        assert not any(word in value for word in hidden)
    for entry in raw_window(store, app_id) or []:
        assert not any(word.encode() in entry for word in hidden)


def test_streamed_reasoning_survives_a_restart_mid_tool_loop(
    make_store: StoreFactory, app_id: str
) -> None:
    """Thinking and Responses reasoning streamed through the collector are stored with the
    call; the process dies before the turn ends; the rebuilt window renders them exactly."""
    store = make_store()
    store.append(app_id, [UserMessage(text="write a.txt")])
    turn = store.collector(app_id)
    for event in thinking_then_tool_use([SIG[:10], SIG[10:]]):
        turn.feed(event)
    turn.on_tool_executed("toolu_1", "ok")  # durable now; the turn never ends

    restarted = make_store()
    restarted.memory(app_id).invalidate()
    window = restarted.memory(app_id).messages()
    _, turns = to_anthropic(window)
    assert turns[1]["content"][0] == {
        "type": "thinking",
        "thinking": "I should write the file first.",
        "signature": SIG,
    }
    assert not any(SIG in entry.text for entry in restarted.history(app_id))

    other = f"{app_id}-responses"
    with restarted.collector(other) as responses:
        for event in responses_turn():
            responses.feed(event)
        responses.on_tool_executed("call_1", "ok a")
        responses.on_tool_executed("call_2", "ok b")
        responses.on_text("Both written.")
    fresh = make_store()
    fresh.memory(other).invalidate()
    items = to_responses(fresh.memory(other).messages())
    assert [item.get("type", "message") for item in items] == [
        "reasoning",
        "function_call",
        "reasoning",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    assert [item.get("id") for item in items[:4]] == ["rs_1", "fc_1", "rs_2", "fc_2"]


def test_a_reply_whose_reasoning_was_cut_off_is_reported_by_check(
    make_store: StoreFactory, app_id: str
) -> None:
    events = responses_turn()
    unfinished = [
        e
        for e in events
        if not (e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning")
    ]
    store = make_store()
    store.append(app_id, [UserMessage(text="write both")])
    with store.collector(app_id) as turn:
        for event in unfinished:
            turn.feed(event)
        turn.on_tool_executed("call_1", "ok a")
        turn.on_tool_executed("call_2", "ok b")
    findings = check_app(store, app_id)
    assert [f.code for f in findings] == [REASONING_LOST]
    reply = next(m for m in store.load_window(app_id) if isinstance(m, AiMessage))
    assert reply.metadata[REASONING_LOST_KEY] == 2 and list(reply.reasoning) == []
