"""Compaction on every backend, sync and async: ``memory(app).compact(summarize, ...)``, windows
opened by the newest summary, chains, restarts, failures, concurrent appends, the summary
role, the cached window and automatic compaction."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import sqlalchemy as sa

from memstore import (
    AiMessage,
    CompactionConflictError,
    InvalidMessageError,
    MemoryStore,
    Message,
    SummarizerError,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.core.summary import SUMMARY_MARK, is_summary, summary_info
from memstore.core.validate import validate
from memstore.sql.schema import display, original
from tests.conftest import StoreFactory


def group(call: str, results: int = 1) -> list[Message]:
    calls = [ToolRequest(id=f"{call}-{i}", name="read", arguments="{}") for i in range(results)]
    return [
        AiMessage(tool_requests=calls),
        *(
            ToolResult(id=f"{call}-{i}", tool_name="read", text=f"r{call}{i}")
            for i in range(results)
        ),
    ]


def conversation(turns: int, tag: str = "") -> list[Message]:
    out: list[Message] = []
    for turn in range(turns):
        out.append(UserMessage(text=f"u{tag}{turn}"))
        out.extend(group(f"{tag}{turn}", results=1 + turn % 3))
        out.append(AiMessage(text=f"a{tag}{turn}"))
    return out


class Recorder:
    """A summarizer that records what it got and answers with a numbered text."""

    def __init__(self) -> None:
        self.calls: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> str:
        self.calls.append(list(messages))
        return f"summary {len(self.calls)}"


def row_count(store: Any, app_id: str) -> tuple[int, int]:
    with store.engine.connect() as conn:
        originals = conn.execute(
            sa.select(sa.func.count()).select_from(original).where(original.c.app_id == app_id)
        ).scalar()
        displays = conn.execute(
            sa.select(sa.func.count()).select_from(display).where(display.c.app_id == app_id)
        ).scalar()
    return int(originals or 0), int(displays or 0)


def check_valid(window: list[Message]) -> None:
    """Valid for OpenAI; for Anthropic too, but for the first-turn rule (a window that does
    not start at a user message needs ``start_at_user``, with or without a summary)."""
    assert validate(window, "openai") == []
    assert [v for v in validate(window, "anthropic") if v.code != "wrong_first_role"] == []


def test_the_cut_never_splits_a_tool_group(make_store: StoreFactory, app_id: str) -> None:
    for keep in range(0, 12):
        store = make_store()
        app = f"{app_id}-{keep}"
        store.append(app, conversation(4))
        raw = store.load_window(app, 1000, summaries=False)
        summarize = Recorder()
        report = store.memory(app).compact(summarize, keep_last_messages=keep)
        assert report.compacted
        window = store.memory(app).messages()
        assert is_summary(window[0]) and window[0].text == "summary 1"
        tail = window[1:]
        assert tail == raw[len(raw) - len(tail) :]
        assert not isinstance(tail[0], ToolResult)  # a group is kept whole or summarized whole
        assert len(tail) <= max(keep, 1) or len(tail) <= 4  # the newest unit always stays
        covered = summarize.calls[0]
        assert covered + tail == raw
        assert report.messages_covered == len(covered)
        assert report.kept_messages == len(tail)
        check_valid(window)
        assert store.load_window(app) == window


def test_keep_last_tokens_and_messages_both_hold(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(token_counter=lambda m: 10)
    store.append(app_id, conversation(4))
    report = store.memory(app_id).compact(Recorder(), keep_last_tokens=45, keep_last_messages=3)
    tail = store.load_window(app_id)[1:]
    assert len(tail) <= 3 and report.kept_tokens == 10 * len(tail) <= 45
    assert report.kept_messages == len(tail)


def test_nothing_older_than_the_kept_part_is_a_no_op(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    store.append(app_id, [UserMessage(text="only")])
    summarize = Recorder()
    report = store.memory(app_id).compact(summarize, keep_last_messages=10)
    assert not report.compacted and report.summary_id is None and summarize.calls == []
    assert store.load_window(app_id) == [UserMessage(text="only")]


def test_a_chain_of_three_compactions_gives_the_latest_summary_and_the_tail(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    summarize = Recorder()
    reports = []
    everything: list[Message] = []
    for round_ in range(3):
        batch = conversation(3, tag=f"r{round_}-")
        everything.extend(batch)
        store.append(app_id, batch)
        reports.append(store.memory(app_id).compact(summarize, keep_last_messages=2))
    assert [r.previous_summary_id for r in reports] == [
        None,
        reports[0].summary_id,
        reports[1].summary_id,
    ]
    for index in (1, 2):  # each summarizer call got the previous summary first
        first = summarize.calls[index][0]
        assert is_summary(first) and first.text == f"summary {index}"
        assert sum(is_summary(m) for m in summarize.calls[index]) == 1
    assert reports[2].first_id == reports[0].first_id  # the chain covers from the start
    window = store.memory(app_id).messages()
    assert [m.text for m in window if is_summary(m)] == ["summary 3"]
    assert window[0].text == "summary 3" and window[1:] == everything[-len(window) + 1 :]
    info = summary_info(window[0])
    assert info is not None and info.last_id == reports[2].last_id
    assert store.load_window(app_id) == window
    check_valid(window)
    # the originals are all still there
    assert store.load_window(app_id, 10_000, summaries=False) == everything


def test_restart_rebuilds_the_same_window(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(window_size=50, reload_max=50)
    store.append(app_id, conversation(5))
    store.memory(app_id).compact(Recorder(), keep_last_messages=6)
    store.append(app_id, conversation(2, tag="x"))
    before = store.memory(app_id).messages()
    assert before == store.load_window(app_id, 50)
    restarted = make_store(window_size=50, reload_max=50)
    restarted.memory(app_id).invalidate()
    assert restarted.memory(app_id).messages() == before
    report = restarted.reload(app_id)
    assert report.messages == len(before)
    assert restarted.memory(app_id).messages() == before


def test_the_summarizer_raising_leaves_the_store_unchanged(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    store.append(app_id, conversation(3))
    window = store.memory(app_id).messages()
    counts = row_count(store, app_id)

    def broken(messages: list[Message]) -> str:
        raise RuntimeError("secret chat text")

    with pytest.raises(SummarizerError) as raised:
        store.memory(app_id).compact(broken, keep_last_messages=1)
    assert "secret" not in str(raised.value)
    assert isinstance(raised.value.__cause__, RuntimeError)
    for bad in (lambda m: "", lambda m: None, lambda m: 42):
        with pytest.raises(SummarizerError):
            store.memory(app_id).compact(bad, keep_last_messages=1)
    assert row_count(store, app_id) == counts
    assert store.memory(app_id).messages() == window
    assert store.load_window(app_id) == window


def test_originals_stay_everywhere(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    messages = conversation(3)
    store.append(app_id, messages, user_id="person")
    history = store.history(app_id, limit=100)
    report = store.memory(app_id).compact(Recorder(), keep_last_messages=2)
    assert store.load_window(app_id, 1000, summaries=False) == messages
    assert store.history(app_id, limit=100) == history  # no display row unless asked
    records = [r for r in store.export([app_id]) if r["record"] == "original"]
    assert len(records) == len(messages) + 1
    summary = [r for r in records if SUMMARY_MARK in r["message"].get("metadata", {})]
    assert [r["id"] for r in summary] == [report.summary_id]
    assert summary[0]["message"]["metadata"][SUMMARY_MARK]["last_id"] == report.last_id
    store.append(app_id, [UserMessage(text="next")])
    shown = store.memory(app_id).compact(Recorder(), keep_last_messages=1, display=True)
    assert shown.compacted
    newest = store.history(app_id, limit=1)[0]
    assert newest.role == "summary" and newest.text == "summary 1"


def test_export_import_round_trip_keeps_the_window(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    store.append(app_id, conversation(3))
    store.memory(app_id).compact(Recorder(), keep_last_messages=3)
    window = store.load_window(app_id)
    records = list(store.export([app_id]))
    store.purge(app_id)
    assert store.load_window(app_id) == []
    store.import_records(records)
    assert store.load_window(app_id) == window
    assert store.memory(app_id).messages() == window


def test_appends_during_compaction_are_neither_lost_nor_covered(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store(reload_max=500, window_size=500)
    store.append(app_id, conversation(3))
    twin = MemoryStore(
        store.settings,
        engine=store.engine,
        cache=InProcessWindowCache(WindowPolicy.from_settings(store.settings)),
    )
    appended: list[Message] = []
    started = threading.Event()
    done = threading.Event()

    def appender() -> None:
        started.wait(10)
        for index in range(20):
            message = UserMessage(text=f"late {index}")
            twin.append(app_id, [message])
            appended.append(message)
        done.set()

    seen: list[Message] = []

    def summarize(messages: list[Message]) -> str:
        seen.extend(messages)
        started.set()
        assert done.wait(30)  # appends happen while the summarizer runs
        return "summary"

    thread = threading.Thread(target=appender)
    thread.start()
    report = store.memory(app_id).compact(summarize, keep_last_messages=4)
    thread.join()
    assert len(appended) == 20
    assert not any(m in seen for m in appended)
    window = store.memory(app_id).messages()
    assert window == store.load_window(app_id, 500)
    assert window[-20:] == appended  # every late append is in the window, after the kept part
    raw = store.load_window(app_id, 10_000, summaries=False)
    assert raw[-20:] == appended
    with store.engine.connect() as conn:
        late_ids = [
            row.id
            for row in conn.execute(
                sa.select(original.c.id, original.c.payload)
                .where(original.c.app_id == app_id)
                .order_by(original.c.id)
            )
            if "late " in row.payload
        ]
    assert len(late_ids) == 20 and min(late_ids) > (report.last_id or 0)
    twin.close()


def test_a_compaction_that_lost_the_race_writes_nothing(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    store.append(app_id, conversation(3))
    twin = MemoryStore(
        store.settings,
        engine=store.engine,
        cache=InProcessWindowCache(WindowPolicy.from_settings(store.settings)),
    )

    def summarize(messages: list[Message]) -> str:
        twin.memory(app_id).compact(lambda m: "winner", keep_last_messages=2)
        return "loser"

    counts = row_count(store, app_id)
    with pytest.raises(CompactionConflictError):
        store.memory(app_id).compact(summarize, keep_last_messages=2)
    assert row_count(store, app_id) == (counts[0] + 1, counts[1])
    assert store.memory(app_id).messages()[0].text == "winner"
    twin.close()


@pytest.mark.parametrize("role", ["system", "user", "exclude"])
def test_summary_role(make_store: StoreFactory, app_id: str, role: str) -> None:
    store = make_store(summary_role=role)
    store.append(app_id, [*conversation(3), UserMessage(text="x"), AiMessage(text="y")])
    store.memory(app_id).compact(Recorder(), keep_last_messages=2)
    window = store.memory(app_id).messages()
    tail = store.load_window(app_id, 1000, summaries=False)[-2:]
    if role == "exclude":
        assert window == tail
    else:
        kind = SystemMessage if role == "system" else UserMessage
        assert isinstance(window[0], kind) and window[0].text == "summary 1"
        assert window[1:] == tail
    assert store.load_window(app_id) == window
    check_valid(window)


def test_the_summary_counts_toward_both_bounds(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(token_counter=lambda m: 10)
    store.append(app_id, [UserMessage(text=f"m{i}") for i in range(10)])
    store.memory(app_id).compact(Recorder(), keep_last_messages=6)
    assert len(store.load_window(app_id, 4)) == 4
    window = store.load_window(app_id, max_tokens=35)
    assert is_summary(window[0]) and len(window) == 3
    assert store.memory(app_id).messages(max_tokens=35) == window
    assert (
        store.load_window(app_id, 1)[0].text == "m9"[:2] or len(store.load_window(app_id, 1)) == 2
    )


def test_the_cached_window_equals_a_rebuild_after_appends(
    make_store: StoreFactory, app_id: str
) -> None:
    for budget in (None, 120):
        store = make_store(
            token_counter=lambda m: 10, window_size=12, reload_max=12, window_max_tokens=budget
        )
        app = f"{app_id}-{budget}"
        store.append(app, conversation(3))
        store.memory(app).compact(Recorder(), keep_last_messages=3)
        store.memory(app).messages()  # cache the window
        for turn in range(6):
            batch = conversation(1, tag=f"n{turn}-")
            for unit in ([batch[0]], batch[1:-1], [batch[-1]]):  # whole units: no open group
                store.append(app, unit)
                cached = store.memory(app).messages()
                assert is_summary(cached[0])
                store.memory(app).invalidate()
                assert store.memory(app).messages() == cached
                check_valid(cached)


def test_appends_may_not_forge_a_summary(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    forged = SystemMessage(
        text="x", metadata={SUMMARY_MARK: {"first_id": 1, "last_id": 2**62, "messages": 1}}
    )
    with pytest.raises(InvalidMessageError):
        store.append(app_id, [forged])
    assert store.load_window(app_id) == []


def test_automatic_compaction(make_store: StoreFactory, app_id: str) -> None:
    summarize = Recorder()
    store = make_store(token_counter=lambda m: 10, summarizer=summarize, compact_at_tokens=100)
    for turn in range(4):
        store.append(app_id, conversation(1, tag=f"t{turn}-"))
    assert summarize.calls  # the window passed 100 tokens
    window = store.memory(app_id).messages()
    assert is_summary(window[0])
    assert sum(10 for _ in window) <= 100
    assert store.load_window(app_id) == window


def test_a_failing_automatic_compaction_never_loses_the_append(
    make_store: StoreFactory, app_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(messages: list[Message]) -> str:
        raise RuntimeError("secret chat text")

    store = make_store(token_counter=lambda m: 10, summarizer=broken, compact_at_tokens=30)
    messages = [UserMessage(text=f"m{i}") for i in range(6)]
    with caplog.at_level(logging.WARNING, logger="memstore"):
        for message in messages:
            store.append(app_id, [message])
    assert store.load_window(app_id, 100) == messages
    assert "automatic compaction" in caplog.text and "secret" not in caplog.text
    store.set_summarizer(None)  # off: appends do not try again
    caplog.clear()
    store.append(app_id, [UserMessage(text="more")])
    assert "automatic compaction" not in caplog.text


def test_pruning_covered_rows_keeps_the_summary(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    store.append(app_id, [UserMessage(text=f"m{i}") for i in range(10)])
    store.memory(app_id).compact(Recorder(), keep_last_messages=3)
    store.append(app_id, [UserMessage(text="after")])
    window = store.memory(app_id).messages()
    reports = store.prune(keep_last=5, app_ids=[app_id])  # the summary row and 4 newer rows
    assert reports[0].original_rows == 7
    assert store.memory(app_id).messages() == window
    assert store.load_window(app_id) == window
    assert store.load_window(app_id, 100, summaries=False) == window[1:]
