"""Token-bounded windows on every backend, sync and async: ``load_window(max_tokens=...)``,
``memory(app).messages(max_tokens=...)``, ``Settings.window_max_tokens``, the oversize policy
and a pluggable counter."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from memstore import (
    AiMessage,
    MemoryStore,
    Message,
    Settings,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.core.tokens import TRUNCATED_MARK, approximate_tokens
from memstore.core.validate import validate
from tests.conftest import StoreFactory


def ten(message: Message) -> int:
    """Every message costs 10 tokens, results cost their text length."""
    return len(message.text) if isinstance(message, ToolResult) else 10


def group(call: str, *sizes: int) -> list[Message]:
    calls = [ToolRequest(id=f"{call}-{i}", name="read", arguments="{}") for i in range(len(sizes))]
    results: list[Message] = [
        ToolResult(id=f"{call}-{i}", tool_name="read", text="r" * size)
        for i, size in enumerate(sizes)
    ]
    return [AiMessage(tool_requests=calls), *results]


def history() -> list[Message]:
    return [
        UserMessage(text="u1"),
        *group("a", 5, 5),  # 10 + 5 + 5 = 20
        UserMessage(text="u2"),
        *group("b", 30),  # 10 + 30 = 40
        UserMessage(text="u3"),
    ]


@pytest.fixture
def counted(make_store: StoreFactory) -> Any:
    return make_store(token_counter=ten)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (10, 1),  # u3
        (49, 1),  # the b group does not fit: stop (never split it, never skip it)
        (50, 3),  # u3 + b group
        (59, 3),
        (60, 4),  # + u2
        (79, 4),
        (80, 7),  # + the a group
        (90, 8),  # everything
        (10_000, 8),
    ],
)
def test_load_window_keeps_the_newest_whole_units_that_fit(
    counted: Any, app_id: str, budget: int, expected: int
) -> None:
    counted.append(app_id, history())
    window = counted.load_window(app_id, max_tokens=budget)
    assert window == history()[-expected:]
    assert sum(ten(m) for m in window) <= budget
    assert validate(window, "openai") == []


def test_max_messages_and_max_tokens_both_hold(counted: Any, app_id: str) -> None:
    counted.append(app_id, history())
    assert counted.load_window(app_id, 2, max_tokens=10_000) == history()[-3:]  # b widened
    assert counted.load_window(app_id, 2, max_tokens=20) == history()[-1:]
    assert counted.load_window(app_id, 50) == history()  # unchanged without a budget
    assert counted.load_window(app_id) == history()


def test_the_newest_group_alone_over_budget_is_kept_whole(
    counted: Any, app_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    counted.append(app_id, [UserMessage(text="q"), *group("big", 300, 40, 20)])
    with caplog.at_level(logging.WARNING, logger="memstore"):
        window = counted.load_window(app_id, max_tokens=100)
    assert window == group("big", 300, 40, 20)
    assert "exceeds the token budget" in caplog.text
    assert "rrr" not in caplog.text


def test_truncate_results_cuts_the_largest_result_with_a_marker(counted: Any, app_id: str) -> None:
    counted.append(app_id, [UserMessage(text="q"), *group("big", 3000, 40, 20)])
    window = counted.load_window(app_id, max_tokens=500, oversize="truncate-results")
    assert [type(m) for m in window] == [AiMessage, ToolResult, ToolResult, ToolResult]
    assert sum(ten(m) for m in window) <= 500
    largest = window[1]
    assert isinstance(largest, ToolResult)
    assert largest.metadata[TRUNCATED_MARK] > 0
    assert "truncated to fit the token budget" in largest.text
    assert window[2:] == group("big", 3000, 40, 20)[2:]  # the smaller ones are untouched
    assert validate(window, "openai") == []
    # the stored history is unchanged
    assert counted.load_window(app_id)[2] == group("big", 3000, 40, 20)[1]
    served = counted.memory(app_id).messages(500, oversize="truncate-results")
    assert served == window


def test_messages_apply_the_budget_to_the_cached_window(counted: Any, app_id: str) -> None:
    memory = counted.memory(app_id)
    memory.add_all(history())
    for budget in (10, 49, 50, 60, 80, 10_000):
        assert memory.messages(max_tokens=budget) == counted.load_window(app_id, max_tokens=budget)
    memory.add_all(group("c", 15))
    memory.add(UserMessage(text="u4"))
    assert memory.messages() == [*history(), *group("c", 15), UserMessage(text="u4")]
    for budget in (10, 35, 45, 60, 120):
        assert memory.messages(max_tokens=budget) == counted.load_window(app_id, max_tokens=budget)


def test_the_setting_bounds_every_window(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(token_counter=ten, window_max_tokens=60)
    store.append(app_id, history())
    assert store.load_window(app_id) == history()[-4:]
    assert store.memory(app_id).messages() == history()[-4:]
    assert store.load_window(app_id, max_tokens=10) == history()[-1:]  # an argument wins
    assert store.load_window(app_id, 50) == history()  # an explicit message bound alone
    report = store.reload(app_id)
    assert report.messages == 8
    assert (report.tokens, report.budget_messages, report.oversize) == (60, 4, False)


def test_without_a_budget_reports_carry_no_token_fields(store: Any, app_id: str) -> None:
    store.append(app_id, history())
    report = store.reload(app_id)
    assert (report.tokens, report.budget_messages, report.oversize) == (None, None, False)


def test_many_small_messages_fill_the_budget(make_store: StoreFactory, app_id: str) -> None:
    """The first read assumes bigger messages; the loader reads more bounded pages."""
    store = make_store(token_counter=lambda message: 1)
    store.append(app_id, [UserMessage(text=str(i)) for i in range(700)])
    window = store.load_window(app_id, max_tokens=600)
    assert [m.text for m in window] == [str(i) for i in range(100, 700)]  # type: ignore[union-attr]


def test_the_default_counter_needs_nothing(store: Any, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="x" * 300) for _ in range(10)])
    per_message = approximate_tokens(UserMessage(text="x" * 300))
    assert len(store.load_window(app_id, max_tokens=per_message * 4)) == 4
    assert len(store.memory(app_id).messages(max_tokens=per_message * 3 + 1)) == 3


def test_the_cached_window_is_trimmed_by_tokens_on_append(
    make_store: StoreFactory, app_id: str
) -> None:
    """Each cache entry carries its count; the append trim keeps the newest whole units that
    fit, and the cache then holds exactly what a rebuild under the same budget holds."""
    store = make_store(token_counter=ten, window_max_tokens=60)
    memory = store.memory(app_id)
    memory.add(UserMessage(text="u0"))
    assert memory.messages() == [UserMessage(text="u0")]  # the window is cached now
    units = [history()[0:1], history()[1:4], history()[4:5], history()[5:7], history()[7:8]]
    for unit in units:  # a whole unit per append: an open group is answered only on read
        memory.add_all(unit)
        cached = store.cache.read(app_id).messages
        assert cached is not None
        assert cached == store.load_window(app_id, max_tokens=60)
    assert cached == history()[-4:]
    memory.add_all(group("c", 40))  # 50 tokens: only u3 (10) fits beside it
    assert store.cache.read(app_id).messages == [history()[-1], *group("c", 40)]
    assert memory.messages() == store.load_window(app_id)
    memory.invalidate()
    assert memory.messages() == store.load_window(app_id)  # a rebuild keeps the same part
    assert store.cache.read(app_id).messages in (None, store.load_window(app_id))


def test_adapter_writes_carry_token_counts(tmp_path: Path) -> None:
    """The adapters' in-transaction inserts (pydantic-ai, Google ADK) count like append."""
    from memstore.adapters._history import insert_messages

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", window_max_tokens=100)
    with MemoryStore(settings, token_counter=ten) as store:
        store.migrate()
        store._ensure_lease()  # as the adapters do: never claim a lease inside a transaction
        with store.engine.begin() as conn:
            _, entries, _ = insert_messages(conn, store, "app-a", [UserMessage(text="hi")], None)
        assert [entry.tokens for entry in entries] == [10]
