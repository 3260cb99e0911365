"""Retention (``store.prune``) on every backend, sync and async."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.core.window import entry_for, requests_of_results
from memstore.errors import InvalidRetentionError
from memstore.messages import Message
from memstore.sql import admin
from memstore.sql.schema import display, original, tool_executions

NOW = datetime.now(timezone.utc)


@dataclass
class Step:
    """One append of a generated history and how many days ago it happened."""

    messages: list[Message]
    age_days: int


@st.composite
def histories(draw: st.DrawFn) -> list[Step]:
    """Random histories with tool groups: parallel calls, late results, unanswered calls."""
    steps: list[Step] = []
    pending: list[ToolResult] = []
    age = draw(st.integers(min_value=5, max_value=60))
    for turn in range(draw(st.integers(min_value=1, max_value=14))):
        age = max(0, age - draw(st.integers(min_value=0, max_value=4)))
        kind = draw(st.sampled_from(["user", "ai", "tools", "tools", "late"]))
        batch: list[Message] = []
        if kind == "user":
            batch.append(UserMessage(text=f"u{turn}"))
        elif kind == "ai":
            batch.append(AiMessage(text=f"a{turn}"))
        else:
            calls = [
                ToolRequest(id=f"c{turn}-{i}", name="t", arguments="{}")
                for i in range(draw(st.integers(min_value=1, max_value=3)))
            ]
            batch.append(AiMessage(tool_requests=calls))
            answered = calls[: draw(st.integers(min_value=0, max_value=len(calls)))]
            results = [ToolResult(id=c.id, tool_name="t", text="r") for c in answered]
            if kind == "late":
                steps.append(Step(batch, age))
                batch = list(pending)
                pending = results
                if not batch:
                    continue
            else:
                batch.extend(results)
        steps.append(Step(batch, age))
    if pending:
        steps.append(Step(pending, 0))
    return steps


def write(store: MemoryStore, app_id: str, steps: list[Step]) -> None:
    for step in steps:
        ids = store.append(app_id, step.messages, user_id="u")
        when = NOW - timedelta(days=step.age_days)
        with store.engine.begin() as conn:
            conn.execute(original.update().where(original.c.id.in_(ids)).values(created_at=when))
            conn.execute(
                display.update()
                .where(display.c.app_id == app_id, display.c.id > min(ids))
                .values(created_at=when)
            )


def rows_of(store: MemoryStore, app_id: str) -> list[tuple[int, Message]]:
    return [(row.id, row.message) for row in admin.iter_history(store.engine, app_id, store.cipher)]


def display_rows(store: MemoryStore, app_id: str) -> list[tuple[int, Any]]:
    with store.engine.connect() as conn:
        query = sa.select(display.c.id, display.c.created_at).where(display.c.app_id == app_id)
        return sorted((row.id, row.created_at) for row in conn.execute(query))


def assert_window_rules(messages: list[Message], before: list[Message]) -> None:
    """The kept rows satisfy the window rules from the first row on."""
    if not messages:
        return
    assert not isinstance(messages[0], ToolResult), "the kept history starts with a result"
    entries = [(e.kind, e.call_ids) for e in map(entry_for, messages)]
    for index, bound in enumerate(requests_of_results(entries)):
        if isinstance(messages[index], ToolResult):
            assert bound is not None, f"result {messages[index].id} lost its request"
    kept_requests = {
        call.id for m in messages if isinstance(m, AiMessage) for call in m.tool_requests
    }
    answered_before = {m.id for m in before if isinstance(m, ToolResult)}
    answered_after = {m.id for m in messages if isinstance(m, ToolResult)}
    assert (kept_requests & answered_before) <= answered_after, "a kept request lost a result"


rules = st.one_of(
    st.tuples(st.integers(min_value=0, max_value=70).map(lambda d: timedelta(days=d)), st.none()),
    st.tuples(st.none(), st.integers(min_value=1, max_value=20)),
    st.tuples(
        st.integers(min_value=0, max_value=70).map(lambda d: timedelta(days=d)),
        st.integers(min_value=1, max_value=20),
    ),
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=histories(), rule=rules, dry_run=st.booleans())
def test_prune_keeps_the_window_rules_on_random_histories(
    store: MemoryStore, steps: list[Step], rule: tuple[Any, Any], dry_run: bool
) -> None:
    app = f"prune-{uuid.uuid4().hex[:12]}"
    write(store, app, steps)
    before = rows_of(store, app)
    display_before = display_rows(store, app)
    older_than, keep_last = rule
    [report] = store.prune(older_than, keep_last, [app], dry_run=dry_run)
    after = rows_of(store, app)
    if dry_run:
        assert after == before
        assert display_rows(store, app) == display_before
        assert report.dry_run
    assert report.original_rows == (
        len(before) - len(after) if not dry_run else report.original_rows
    )
    kept = after if not dry_run else before[report.original_rows :]
    assert kept == before[len(before) - len(kept) :], "a prune removes a prefix"
    assert_window_rules([m for _, m in kept], [m for _, m in before])
    if keep_last is not None and older_than is None:
        assert len(kept) >= min(keep_last, len(before))
    if older_than is not None and kept and not dry_run:
        cutoff = NOW - older_than
        display_left = display_rows(store, app)
        assert all(_utc(when) >= cutoff - timedelta(minutes=1) for _, when in display_left)
    store.purge(app)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def test_prune_by_age_drops_old_rows_and_the_cached_window(store: MemoryStore, app_id: str) -> None:
    old = [Step([UserMessage(text="old")], 100), Step([AiMessage(text="old reply")], 100)]
    group = Step(
        [
            AiMessage(tool_requests=[ToolRequest(id="x1", name="t", arguments="{}")]),
            ToolResult(id="x1", tool_name="t", text="r"),
        ],
        100,
    )
    new = [Step([UserMessage(text="new")], 1), Step([AiMessage(text="new reply")], 1)]
    write(store, app_id, [*old, group, *new])
    assert len(store.memory(app_id).messages()) == 6
    [report] = store.prune(older_than=timedelta(days=90), app_ids=[app_id])
    assert (report.original_rows, report.window_dropped) == (4, True)
    assert report.display_rows >= 2
    assert store.memory(app_id).messages() == [UserMessage(text="new"), AiMessage(text="new reply")]
    assert [e.text for e in reversed(store.history(app_id))] == ["new", "new reply"]
    again = store.prune(older_than=timedelta(days=90), app_ids=[app_id])[0]
    assert (again.original_rows, again.display_rows, again.window_dropped) == (0, 0, False)


def test_prune_keeps_a_tool_group_whole(store: MemoryStore, app_id: str) -> None:
    calls = [ToolRequest(id=f"g{i}", name="t", arguments="{}") for i in range(3)]
    store.append(app_id, [UserMessage(text="q"), AiMessage(tool_requests=calls)])
    store.append(app_id, [ToolResult(id=c.id, tool_name="t", text="r") for c in calls])
    [report] = store.prune(keep_last=2, app_ids=[app_id])
    assert report.original_rows == 1  # the user message; the group stays whole
    assert [m.type for m in store.load_window(app_id, 50)] == ["ai"] + ["tool_result"] * 3


def test_prune_loop_guard_records_by_age_only(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="q")])
    stamp = NOW - timedelta(days=200)
    with store.engine.begin() as conn:
        conn.execute(
            tool_executions.insert(),
            [
                {
                    "app_id": app_id,
                    "idempotency_key": f"k{i}",
                    "tool_name": "t",
                    "arguments_digest": "0" * 64,
                    "state": "succeeded",
                    "attempts": 1,
                    "tool_call_id": f"c{i}",
                    "result": "done",
                    "created_at": stamp if i else NOW,
                    "updated_at": stamp if i else NOW,
                }
                for i in range(3)
            ],
        )
    assert store.prune(keep_last=1, app_ids=[app_id])[0].tool_executions == 0
    dry = store.prune(older_than=timedelta(days=90), app_ids=[app_id], dry_run=True)[0]
    assert dry.tool_executions == 2
    assert store.prune(older_than=timedelta(days=90), app_ids=[app_id])[0].tool_executions == 2
    with store.engine.connect() as conn:
        left = conn.execute(
            sa.select(tool_executions.c.idempotency_key).where(tool_executions.c.app_id == app_id)
        ).scalars()
        assert list(left) == ["k0"]
    store.purge(app_id)


def test_prune_rejects_bad_rules(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="q")])
    for older_than, keep_last in [(None, None), (timedelta(days=-1), None), (None, 0)]:
        with pytest.raises(InvalidRetentionError):
            store.prune(older_than, keep_last, [app_id])
    assert len(rows_of(store, app_id)) == 1


def test_prune_racing_appends_loses_no_newer_message(store: MemoryStore, app_id: str) -> None:
    for start in range(0, 2400, 400):
        store.append(
            app_id,
            [UserMessage(text=f"seed {i}") for i in range(start, start + 400)],
        )
    seeded = [row_id for row_id, _ in rows_of(store, app_id)]
    writer_store = MemoryStore(
        Settings(database_url=store.settings.database_url, worker_id=store.settings.worker_id),
        engine=store.engine,
    )
    written: list[int] = []
    started = threading.Event()
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            written.extend(writer_store.append(app_id, [AiMessage(text="live")]))
            started.set()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert started.wait(30)
        [report] = store.prune(keep_last=100, app_ids=[app_id])
    finally:
        stop.set()
        thread.join(60)
        writer_store.close()
    assert report.first_kept_id is not None
    remaining = [row_id for row_id, _ in rows_of(store, app_id)]
    expected = [i for i in sorted(seeded + written) if i >= report.first_kept_id]
    assert remaining == expected
    assert report.original_rows == len([i for i in seeded + written if i < report.first_kept_id])
    store.purge(app_id)


def test_a_single_app_id_is_one_app_not_its_characters(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="q"), AiMessage(text="a")])
    for letter in set(app_id):
        store.append(letter, [UserMessage(text="neighbour")])
    [report] = store.prune(keep_last=1, app_ids=app_id)
    assert (report.app_id, report.original_rows) == (app_id, 1)
    assert all(store.load_window(letter) for letter in set(app_id))
    assert [r["record"] for r in store.export(app_id)].count("original") == 1
    for letter in set(app_id):
        store.purge(letter)
    store.purge(app_id)
