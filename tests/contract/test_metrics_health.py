"""Counters move as documented, and a healthy store reports healthy, on every backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from memstore import AiMessage, MemoryStore, ToolRequest, ToolResult, UserMessage
from memstore.core.window import is_synthetic
from memstore.metrics import COUNTERS
from tests.conftest import StoreFactory

ROW_COUNTERS = {"rows_reused", "rows_decoded"}
"""The decoded-row memo's counters move with every SQL read; tests/contract/test_decoded_rows.py
checks them, the tests here the cache's and the writer's."""


def changed(store: Any, before: dict[str, int]) -> dict[str, int]:
    """The counters other than :data:`ROW_COUNTERS` that moved since ``before``, with how much."""
    now = store.metrics()
    return {
        name: now[name] - before[name]
        for name in now
        if now[name] != before[name] and name not in ROW_COUNTERS
    }


def request(call_id: str) -> AiMessage:
    return AiMessage(
        text=None, tool_requests=[ToolRequest(id=call_id, name="lookup", arguments="{}")]
    )


def test_snapshot_is_plain_and_starts_at_zero(store: MemoryStore) -> None:
    snapshot = store.metrics()
    assert list(snapshot) == list(COUNTERS)
    assert set(snapshot.values()) == {0}
    snapshot["cache_hits"] = 99  # a copy: changing it changes nothing in the store
    assert store.metrics()["cache_hits"] == 0


def test_a_miss_rebuilds_once_then_reads_hit(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi"), AiMessage(text="hello")])
    before = store.metrics()
    memory = store.memory(app_id)
    first = memory.messages()
    assert changed(store, before) == {"cache_misses": 1, "cache_rebuilds": 1}
    before = store.metrics()
    assert memory.messages() == first
    assert memory.messages() == first
    assert changed(store, before) == {"cache_hits": 2}


def test_reload_counts_one_rebuild_and_no_read(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi")])
    before = store.metrics()
    assert store.reload(app_id).cached
    assert changed(store, before) == {"cache_rebuilds": 1}


def test_load_window_reads_sql_and_counts_no_cache_read(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi")])
    before = store.metrics()
    store.load_window(app_id)
    assert changed(store, before) == {}


def test_an_invalidated_window_is_a_miss_again(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi")])
    memory = store.memory(app_id)
    memory.messages()
    memory.invalidate()
    before = store.metrics()
    memory.messages()
    assert changed(store, before) == {"cache_misses": 1, "cache_rebuilds": 1}


def test_a_widened_group_is_counted(store: MemoryStore, app_id: str) -> None:
    store.append(
        app_id,
        [
            UserMessage(text="look up a and b"),
            AiMessage(
                text=None,
                tool_requests=[
                    ToolRequest(id="c1", name="lookup", arguments="{}"),
                    ToolRequest(id="c2", name="lookup", arguments="{}"),
                ],
            ),
            ToolResult(id="c1", tool_name="lookup", text="a"),
            ToolResult(id="c2", tool_name="lookup", text="b"),
        ],
    )
    before = store.metrics()
    window = store.load_window(app_id, max_messages=2)  # the two results need their request
    assert [m.type for m in window] == ["ai", "tool_result", "tool_result"]
    assert changed(store, before) == {"widened_groups": 1}
    before = store.metrics()
    store.load_window(app_id, max_messages=4)  # room for everything: nothing widened
    assert changed(store, before) == {}


def test_interrupted_answers_are_counted_where_they_are_made(
    store: MemoryStore, app_id: str
) -> None:
    store.append(app_id, [UserMessage(text="look it up"), request("c1")])
    memory = store.memory(app_id)
    before = store.metrics()
    window = memory.messages()  # rebuilt from SQL: the loader answers c1
    assert is_synthetic(window[-1])
    assert changed(store, before) == {
        "cache_misses": 1,
        "cache_rebuilds": 1,
        "interrupted_answers": 1,
    }
    before = store.metrics()
    assert memory.messages() == window  # the cached window holds that answer already
    assert changed(store, before) == {"cache_hits": 1}
    store.append(app_id, [ToolResult(id="c1", tool_name="lookup", text="found")])
    assert not is_synthetic(memory.messages()[-1])  # the late result replaced the answer
    store.append(app_id, [request("c2")])  # appended to the cached window, still open
    before = store.metrics()
    window = memory.messages()
    assert is_synthetic(window[-1]) and window[-1].id == "c2"  # type: ignore[union-attr]
    assert changed(store, before) == {"cache_hits": 1, "interrupted_answers": 1}


def test_id_collisions_are_counted(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="first")])
    taken = store.append(f"{app_id}-b", [UserMessage(text="elsewhere")])  # above app_id's ids
    inner = getattr(store, "_store", store)  # the async store behind the test facade
    real = inner._ids

    class Colliding:
        worker_id = real.worker_id
        last_ms = real.last_ms
        handed = False

        def next_ids(self, count: int, above: int | None = None) -> list[int]:
            if not self.handed:
                self.handed = True
                ids = taken[:count]  # an original row's id is taken: the insert collides
                return ids + real.next_ids(count - len(ids))  # type: ignore[no-any-return]
            return real.next_ids(count, above)  # type: ignore[no-any-return]

    inner._ids = Colliding()
    before = store.metrics()
    store.append(app_id, [UserMessage(text="second")])
    assert changed(store, before) == {"id_collisions": 1}


def test_lease_renewals_are_counted(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(worker_id="auto", worker_lease_seconds=30)
    try:
        store.append(app_id, [UserMessage(text="claims a lease")])
        assert store.worker_id is not None
        inner = getattr(store, "_store", store)
        before = store.metrics()
        lease = inner._lease
        inner._lease = dataclasses.replace(lease, renewed_at=lease.renewed_at - 3600)
        store.append(app_id, [UserMessage(text="renews before issuing")])
        assert changed(store, before) == {"lease_renewals": 1}
        report = store.health()
        assert report.lease.status == "ok", report.lease
    finally:
        store.close()


def test_a_healthy_store_reports_healthy(store: MemoryStore) -> None:
    report = store.health()
    assert report.ok and not report.degraded
    assert report.database.status == "ok"
    assert report.migrations.status == "ok"
    assert report.migrations.detail is not None and "head" in report.migrations.detail
    assert report.cache.status == "ok"
    assert report.lease.status == "skipped"  # the suite's stores use a fixed worker id
    assert 0 <= report.seconds < 5
    assert store.metrics() == dict.fromkeys(COUNTERS, 0)  # a probe counts nothing


@pytest.mark.parametrize("timeout", [0, -1, True, "5", 3601])
def test_health_rejects_a_bad_timeout(store: MemoryStore, timeout: Any) -> None:
    from memstore.errors import InvalidInputError

    with pytest.raises(InvalidInputError):
        store.health(timeout)
