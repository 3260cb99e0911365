"""What of a LangGraph message list is still to be stored (pure)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from memstore.adapters._lc_pending import pending, window_messages
from memstore.core.window import interrupted_result

CALLS = AIMessage(
    content="",
    id="ai-1",
    tool_calls=[
        {"name": "a", "args": {}, "id": "c1"},
        {"name": "b", "args": {}, "id": "c2"},
        {"name": "c", "args": {}, "id": "c3"},
    ],
)


def result(call_id: str) -> ToolMessage:
    return ToolMessage(content=call_id, tool_call_id=call_id, id=f"t-{call_id}")


def test_parallel_results_are_stored_in_the_order_of_their_calls() -> None:
    state = [HumanMessage("go", id="h"), CALLS, result("c3"), result("c1"), result("c2")]
    batch = pending(state, {"h", "ai-1"})
    assert [m.id for m in batch] == ["t-c1", "t-c2", "t-c3"]


def test_results_already_stored_are_left_out_and_a_late_one_sorts_alone() -> None:
    state = [CALLS, result("c2"), result("c1"), AIMessage("done", id="ai-2")]
    assert [m.id for m in pending(state, {"ai-1", "t-c2"})] == ["t-c1", "ai-2"]


def test_synthetic_interrupted_results_are_never_pending() -> None:
    window = window_messages([interrupted_result("c9", "a")])
    assert window[0].id is not None
    assert pending(window, set()) == []


def test_an_opaque_tool_result_never_reaches_the_window() -> None:
    from memstore.adapters._history import resolve_results
    from memstore.adapters.langchain import to_canonical

    orphan = resolve_results([to_canonical(result("never-called"))], {})
    assert window_messages([*orphan, to_canonical(HumanMessage("hi", id="h"))]) == [
        HumanMessage("hi", id="h")
    ]
