"""Leased snowflake worker ids (``MEMSTORE_WORKER_ID=auto``) on SQLite files, PostgreSQL and
MariaDB, with real processes: each test gets a scratch database of its own, so the
``worker_leases`` rows it sees are its own."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from memstore import (
    MemoryStore,
    Settings,
    UserMessage,
    WorkerIdsExhaustedError,
)
from memstore.aio import AsyncMemoryStore
from memstore.core.leases import LeaseRow
from memstore.ids import id_timestamp_ms, id_worker
from memstore.sql import leases as sql_leases
from memstore.sql.schema import worker_leases
from tests.integration import lease_worker

DATABASES = ["sqlite", "postgres", "mysql"]
on_each_database = pytest.mark.parametrize(
    "scratch_database_url", DATABASES, indirect=True, ids=DATABASES
)
SPAWN = multiprocessing.get_context("spawn")
TTL = 3  # the shortest lease: the pause tests wait past it


@pytest.fixture
def url(scratch_database_url: str) -> Iterator[str]:
    with MemoryStore(Settings(database_url=scratch_database_url, worker_id=0)) as store:
        store.migrate()
    yield scratch_database_url


def leasing_store(url: str, **settings: object) -> MemoryStore:
    return MemoryStore(
        Settings(database_url=url, redis_url=None, worker_lease_seconds=TTL, **settings)
    )


@on_each_database
def test_processes_never_hold_one_id(url: str) -> None:
    processes, rounds = 4, 9
    barrier = SPAWN.Barrier(processes)
    out = SPAWN.Queue()
    workers = [
        SPAWN.Process(target=lease_worker.churn, args=(url, 30, "app-churn", barrier, rounds, out))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    held, claims, ids = [], [], []
    for _ in range(2 * processes):
        message = out.get(timeout=120)
        if message[0] == "held":
            held.append(message[1])
        else:
            claims += message[1]
            ids += message[2]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len(set(held)) == processes, held  # held at the same time: all distinct
    assert len(set(claims)) == len(claims) == processes * (1 + rounds // 3), claims
    assert len(set(ids)) == len(ids) == processes * (1 + rounds + rounds // 3)
    with MemoryStore(Settings(database_url=url, worker_id=0)) as reader:
        stored = [m for m in reader.load_window("app-churn", 1000)]
    assert len(stored) == len(ids)


@on_each_database
def test_a_paused_holder_renews_before_it_issues_an_id(url: str) -> None:
    parent, child = SPAWN.Pipe()
    paused = SPAWN.Process(target=lease_worker.holder, args=(child, url, TTL, "app-paused"))
    paused.start()
    try:
        _, first_ids, paused_id = parent.recv()
        assert id_worker(first_ids[0]) == paused_id
        os.kill(paused.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        time.sleep(TTL + 1.5)  # its lease lapses by the database's clock
        with leasing_store(url) as taker:
            taker.append("app-taker", [UserMessage(text="mine now")])
            assert taker.worker_id == paused_id  # the lapsed id is the lowest free one
            os.kill(paused.pid, signal.SIGCONT)  # type: ignore[arg-type]
            parent.send("append")  # at once: its heartbeat has had no time to run
            answer = parent.recv()
            if answer[0] == "ok":
                _, ids, now_holding = answer
                assert now_holding != paused_id
                assert [id_worker(i) for i in ids] == [now_holding]
            else:  # a typed error is allowed, a duplicate holder is not
                assert answer[1] in ("WorkerLeaseLostError", "WorkerIdsExhaustedError"), answer
            assert taker.worker_id == paused_id
            rows = {r.worker_id: r for r in sql_leases.read_leases(taker.engine)}
            assert rows[paused_id].holder == sql_leases.holder_description()
    finally:
        os.kill(paused.pid, signal.SIGCONT)  # type: ignore[arg-type]
        parent.send("close")
        paused.join(timeout=30)


@on_each_database
def test_a_clock_set_back_across_a_restart_issues_no_id_below_the_predecessor(
    url: str,
) -> None:
    with leasing_store(url) as before:
        issued = before.append("app-before", [UserMessage(text=str(i)) for i in range(5)])
        held = before.worker_id
    hour_ago = lambda: time.time_ns() // 1_000_000 - 3_600_000  # noqa: E731
    after = MemoryStore(
        Settings(database_url=url, redis_url=None, worker_lease_seconds=TTL), id_clock=hour_ago
    )
    with after:
        # another app: only the carried millisecond keeps these ids above the predecessor's
        ids = after.append("app-after", [UserMessage(text="late")])
        assert after.worker_id == held
    assert ids[0] > max(issued)
    assert id_timestamp_ms(ids[0]) > id_timestamp_ms(max(issued))


@on_each_database
def test_all_ids_taken_is_a_typed_error_naming_the_soonest_expiry(url: str) -> None:
    with leasing_store(url) as store:
        now = sql_leases.db_now_ms(store.engine.dialect)
        with store.engine.begin() as conn:
            conn.execute(
                worker_leases.insert().from_select(
                    ["worker_id", "holder", "epoch", "expires_at_ms", "last_ms"],
                    sa.select(
                        sa.literal(0).label("w"),
                        sa.literal("other:1").label("h"),
                        sa.literal(1).label("e"),
                        (now + 50_000).label("x"),
                        sa.literal(0).label("l"),
                    ),
                )
            )
            conn.execute(
                worker_leases.insert(),
                [
                    {
                        "worker_id": i,
                        "holder": "other:1",
                        "epoch": 1,
                        "expires_at_ms": 10**13,
                        "last_ms": 0,
                    }
                    for i in range(1, 1024)
                ],
            )
        with pytest.raises(WorkerIdsExhaustedError) as caught:
            store.append("app-full", [UserMessage(text="nowhere")])
        assert 40 < caught.value.soonest_expiry_seconds <= 50
        assert "expires in" in str(caught.value)
        assert store.load_window("app-full") == []
        assert store.worker_id is None


@on_each_database
def test_only_the_first_write_claims_a_lease(url: str) -> None:
    def leases() -> list[LeaseRow]:
        """The live leases (a closed store's lease stays as a released row)."""
        with MemoryStore(Settings(database_url=url, worker_id=0)) as reader:
            return [row for row in sql_leases.read_leases(reader.engine) if not row.expired]

    async def async_side() -> None:
        async with AsyncMemoryStore(
            Settings(database_url=url, redis_url=None, worker_lease_seconds=TTL)
        ) as store:
            await store.migrate()
            await store.memory("app-lazy").messages()
            await store.health()
            assert store.worker_id is None and leases() == []
            await store.append("app-lazy", [UserMessage(text="async")])
            assert store.worker_id is not None and len(leases()) == 1

    with leasing_store(url) as store:
        store.migrate()
        store.load_window("app-lazy")
        store.health()
        assert store.worker_id is None and leases() == []
        store.append("app-lazy", [UserMessage(text="sync")])
        assert store.worker_id is not None
        assert [row.worker_id for row in leases()] == [store.worker_id]
    asyncio.run(async_side())


@on_each_database
def test_the_heartbeat_keeps_the_lease_and_close_releases_it(url: str) -> None:
    store = leasing_store(url)
    store.append("app-beat", [UserMessage(text="hi")])
    held = store.worker_id
    assert held is not None
    time.sleep(TTL + 1)  # longer than the lease: only renewals keep it
    row = {r.worker_id: r for r in sql_leases.read_leases(store.engine)}[held]
    assert not row.expired and row.epoch == 1
    store.append("app-beat", [UserMessage(text="again")])
    assert store.worker_id == held
    store.close()
    with leasing_store(url) as reader:
        row = {r.worker_id: r for r in sql_leases.read_leases(reader.engine)}[held]
    assert row.expired and row.last_ms > 0


@on_each_database
def test_the_async_store_leases_renews_and_releases(url: str) -> None:
    async def run() -> tuple[int | None, bool, bool]:
        store = AsyncMemoryStore(
            Settings(database_url=url, redis_url=None, worker_lease_seconds=TTL)
        )
        try:
            await store.append("app-async", [UserMessage(text="hi")])
            held = store.worker_id
            await asyncio.sleep(TTL + 1)
            rows = {r.worker_id: r for r in await sql_leases.aread_leases(store.engine)}
            alive = held is not None and not rows[held].expired
            await store.append("app-async", [UserMessage(text="again")])
            same = store.worker_id == held
        finally:
            await store.close()
        return held, alive, same

    held, alive, same = asyncio.run(run())
    assert held is not None and alive and same
    with leasing_store(url) as reader:
        assert {r.worker_id: r for r in sql_leases.read_leases(reader.engine)}[held].expired


def test_a_fixed_worker_id_never_touches_the_lease_table(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/fixed.db"
    with MemoryStore(Settings(database_url=url, worker_id=17)) as store:
        store.migrate()
        ids = store.append("app", [UserMessage(text="x")])
        assert store.worker_id == 17 and id_worker(ids[0]) == 17
        assert sql_leases.read_leases(store.engine) == []


def _append_in_fork(store: MemoryStore, out: Any) -> None:
    ids = store.append("app-fork", [UserMessage(text="child")])
    out.put((store.worker_id, ids))
    store.close()  # releases the child's own lease, never the parent's


def test_a_forked_child_leases_its_own_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fork.db'}"
    with leasing_store(url) as store:
        store.migrate()
        store.append("app-fork", [UserMessage(text="parent")])
        parent_id = store.worker_id
        fork = multiprocessing.get_context("fork")
        out = fork.Queue()
        child = fork.Process(target=_append_in_fork, args=(store, out))
        child.start()
        child_id, ids = out.get(timeout=60)
        child.join(timeout=60)
        assert child.exitcode == 0
        assert child_id != parent_id and [id_worker(i) for i in ids] == [child_id]
        rows = {r.worker_id: r for r in sql_leases.read_leases(store.engine)}
        assert not rows[parent_id].expired and rows[child_id].expired
        assert store.append("app-fork", [UserMessage(text="parent again")])
        assert store.worker_id == parent_id
