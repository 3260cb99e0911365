"""Every public async operation cancelled at each of its await points, on a SQLite file,
PostgreSQL and MariaDB, with the in-process cache and the real Redis; then the same with the
event loop ending while the store is never closed.

After each cancellation: another connection can write within a second, the operation's rows
are wholly there or wholly absent, the window the store serves agrees with SQL, every pooled
connection is checked in, and the loop (in debug mode) reported nothing (no task destroyed
while pending, no unclosed resource; warnings are errors in this suite).
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.adapters._history import StoreAccess, claim_home_loop
from memstore.aio import AsyncMemoryStore
from memstore.cache.memory_cache import NoWindowCache
from memstore.messages import Message
from memstore.sql import leases as sql_leases
from tests.conftest import REDIS_URL, require_redis
from tests.integration.cancelling import Counted, cancel_at, wait_writable

MAX_STEPS = 400
T = TypeVar("T")

BACKENDS = [("sqlite", "memory"), ("sqlite", "redis"), ("postgres", "redis"), ("mysql", "redis")]
on_each_backend = pytest.mark.parametrize(
    ("scratch_database_url", "cache"),
    BACKENDS,
    indirect=["scratch_database_url"],
    ids=["-".join(backend) for backend in BACKENDS],
)


def turn(tag: str) -> list[Message]:
    call = f"call_{tag}"
    return [
        UserMessage(text=f"question {tag}"),
        AiMessage(tool_requests=[ToolRequest(id=call, name="lookup", arguments='{"q": 1}')]),
        ToolResult(id=call, tool_name="lookup", text="found"),
        AiMessage(text=f"answer {tag}"),
    ]


@dataclass
class Env:
    url: str
    redis_url: str | None

    def settings(self, **overrides: Any) -> Settings:
        """A leasing store whose heartbeat stays quiet during a test (a renewal in flight has
        a connection checked out); the heartbeat tests ask for short leases."""
        options: dict[str, Any] = {"worker_lease_seconds": 3600, **overrides}
        return Settings(database_url=self.url, redis_url=self.redis_url, **options)

    def truth(self) -> MemoryStore:
        """A store that reads SQL only (no cache), with a fixed worker id (it never writes)."""
        return MemoryStore(Settings(database_url=self.url, worker_id=1023), cache=NoWindowCache())


@pytest.fixture
def env(scratch_database_url: str, cache: str) -> Iterator[Env]:
    redis_url = None
    if cache == "redis":
        require_redis()  # skips without MEMSTORE_TEST_REDIS_URL, fails if it is down
        redis_url = REDIS_URL
    with MemoryStore(Settings(database_url=scratch_database_url, worker_id=1022)) as store:
        store.migrate()
    yield Env(scratch_database_url, redis_url)


def kinds(truth: MemoryStore, app: str) -> list[str]:
    """The message types of the app's original history, oldest first."""
    with truth.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT message_type FROM chat_history_original WHERE app_id = :app ORDER BY id"
            ),
            {"app": app},
        )
        return [row[0] for row in rows]


TYPES = ["user", "toolExecutionRequest", "toolExecutionResult", "ai"]
"""``kinds`` of one :func:`turn`."""
COLLECTED = ["toolExecutionRequest", "toolExecutionResult", "ai"]
"""``kinds`` of the collector's turn: a call and its result flushed together, then the reply."""


@dataclass
class Operation:
    name: str
    run: Callable[[AsyncMemoryStore, str], Awaitable[Any]]
    outcomes: Callable[[list[str]], list[list[str]]]
    """Given the app's history before, every history the operation may leave."""
    seed: int = 1
    """Turns written before the operation runs."""


async def _collector(store: AsyncMemoryStore, app: str) -> None:
    async with store.collector(app) as collector:
        collector.on_tool_call_delta(0, id="call_c", name="lookup", arguments='{"q": 2}')
        await collector.on_tool_executed("call_c", "found")
        collector.on_text("the answer")


OPERATIONS = [
    Operation("append", lambda s, a: s.append(a, turn("new")), lambda b: [b, [*b, *TYPES]]),
    Operation(
        "collector",
        _collector,
        lambda b: [b, [*b, *COLLECTED[:2]], [*b, *COLLECTED]],
    ),
    Operation("messages", lambda s, a: s.memory(a).messages(), lambda b: [b]),
    Operation("load_window", lambda s, a: s.load_window(a, 3), lambda b: [b]),
    Operation("reload", lambda s, a: s.reload(a), lambda b: [b]),
    Operation("purge", lambda s, a: s.purge(a), lambda b: [b, []]),
    Operation(
        "prune",
        lambda s, a: s.prune(keep_last=4, app_ids=[a]),
        lambda b: [b, b[-4:]],
        seed=2,
    ),
    Operation(
        "prune_older",
        lambda s, a: s.prune(older_than=timedelta(0), app_ids=[a]),
        lambda b: [b, []],
    ),
]


def run_checked(main: Callable[[], Awaitable[None]]) -> None:
    """``asyncio.run(main(), debug=True)``, failing on anything the loop reports."""
    reported: list[str] = []

    async def wrapped() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: reported.append(
                f"{context.get('message')}: {context.get('exception')!r}"
            )
        )
        await main()

    asyncio.run(wrapped(), debug=True)
    gc.collect()
    assert reported == []


async def check_after(
    store: AsyncMemoryStore, env: Env, app: str, before: list[str], allowed: list[list[str]]
) -> list[str]:
    """The checks after one cancelled (or completed) operation; the app's history now."""
    await asyncio.sleep(0)
    await asyncio.to_thread(wait_writable, env.url, app)
    truth = env.truth()
    try:
        after = kinds(truth, app)
        assert after in allowed, f"{before} -> {after}"
        assert await store.memory(app).messages() == truth.load_window(app, 1000)
    finally:
        truth.close()
    assert store.engine.sync_engine.pool.checkedout() == 0
    return after


async def _unshielded(awaitable: Awaitable[T]) -> T:
    return await awaitable


@on_each_backend
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.name for op in OPERATIONS])
@pytest.mark.parametrize("where", ["caller", "inside"])
def test_an_operation_cancelled_at_each_await_point(
    env: Env, operation: Operation, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``caller``: the caller's task is cancelled (a write then finishes first). ``inside``:
    the write's own task is cancelled at each of its await points, as when the event loop
    ends under it (writes are not shielded from the caller here, so the sweep reaches them)."""
    if where == "inside":
        monkeypatch.setattr("memstore.aio.finish", _unshielded)

    async def main() -> None:
        async with AsyncMemoryStore(env.settings()) as store:
            for step in range(1, MAX_STEPS):
                app = f"cancel-{operation.name}-{uuid.uuid4().hex[:8]}"
                for n in range(operation.seed):
                    await store.append(app, turn(str(n)))
                await store.memory(app).messages()  # a cached window to keep in step
                before = await asyncio.to_thread(_kinds, env, app)
                completed = await cancel_at(partial(operation.run, store, app), step)
                allowed = operation.outcomes(before)
                after = await check_after(store, env, app, before, allowed)
                if completed:
                    assert after == allowed[-1]
                    return
            pytest.fail(f"{operation.name} did not complete in {MAX_STEPS} steps")

    run_checked(main)


def _kinds(env: Env, app: str) -> list[str]:
    truth = env.truth()
    try:
        return kinds(truth, app)
    finally:
        truth.close()


@on_each_backend
def test_a_lease_renewal_cancelled_at_each_await_point(env: Env) -> None:
    async def main() -> None:
        async with AsyncMemoryStore(env.settings()) as store:
            app = f"renew-{uuid.uuid4().hex[:8]}"
            await store.append(app, turn("0"))
            lease = store._lease
            assert lease is not None
            for step in range(1, MAX_STEPS):
                completed = await cancel_at(
                    lambda: sql_leases.arenew(store.engine, lease.worker_id, lease.epoch, 3, 0),
                    step,
                )
                await asyncio.to_thread(wait_writable, env.url, app)
                assert store.engine.sync_engine.pool.checkedout() == 0
                if completed:
                    return
            pytest.fail("the renewal did not complete")

    run_checked(main)


# -- the defects this suite was written for --------------------------------------------------


def _lease_rows(env: Env) -> dict[int, Any]:
    truth = env.truth()
    try:
        return {row.worker_id: row for row in sql_leases.read_leases(truth.engine)}
    finally:
        truth.close()


@on_each_backend
def test_close_waits_for_a_renewal_in_flight(env: Env) -> None:
    """``close()`` while the heartbeat is inside a renewal's transaction: the renewal ends, the
    lease is released, and the database is writable at once (it used to stay locked)."""

    async def main() -> None:
        for step in range(1, MAX_STEPS):
            store = AsyncMemoryStore(env.settings(worker_lease_seconds=3))
            app = f"close-{uuid.uuid4().hex[:8]}"
            await store.append(app, turn("0"))
            lease = store._lease
            assert lease is not None
            renewal = Counted(sql_leases.arenew(store.engine, lease.worker_id, lease.epoch, 3, 0))
            store._heartbeat = heartbeat = asyncio.ensure_future(_awaited(renewal))
            while not heartbeat.done() and renewal.steps < step:
                await asyncio.sleep(0)
            in_flight = not heartbeat.done()
            started = time.monotonic()
            await store.close()
            assert time.monotonic() - started < 5  # a round trip, not a busy timeout
            assert heartbeat.done() and not heartbeat.cancelled()
            await asyncio.to_thread(wait_writable, env.url, app)
            assert (await asyncio.to_thread(_lease_rows, env))[lease.worker_id].expired
            if not in_flight:
                return
        pytest.fail("the renewal never completed")

    run_checked(main)


@on_each_backend
def test_close_cancelled_at_each_await_point(env: Env) -> None:
    """A cancelled ``close()`` still closes: the lease is released, nothing is locked, and a
    second ``close()`` has nothing left to do."""

    async def main() -> None:
        for step in range(1, MAX_STEPS):
            store = AsyncMemoryStore(env.settings(worker_lease_seconds=3))
            app = f"close-cancelled-{uuid.uuid4().hex[:8]}"
            await store.append(app, turn("0"))
            lease = store._lease
            assert lease is not None
            completed = await cancel_at(store.close, step)
            await asyncio.to_thread(wait_writable, env.url, app)
            assert (await asyncio.to_thread(_lease_rows, env))[lease.worker_id].expired
            assert store.engine.sync_engine.pool.checkedout() == 0
            await store.close()
            if completed:
                return
        pytest.fail("close never completed")

    run_checked(main)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _left_running(env: Env, app: str, step: int, progress: dict[str, bool]) -> None:
    """A never-closed store renewing its lease and writing when its loop ends at ``step``."""
    store = AsyncMemoryStore(env.settings(worker_lease_seconds=3))
    await store.append(app, turn("0"))
    lease = store._lease
    assert lease is not None
    renewal = Counted(sql_leases.arenew(store.engine, lease.worker_id, lease.epoch, 3, 0))
    write = Counted(store.append(app, turn("1")))
    tasks = [asyncio.ensure_future(_awaited(renewal)), asyncio.ensure_future(_awaited(write))]
    while not all(task.done() for task in tasks) and max(renewal.steps, write.steps) < step:
        await asyncio.sleep(0)
    progress["done"] = all(task.done() for task in tasks)
    # returning here: asyncio.run cancels what still runs, shuts the loop down, closes it


@on_each_backend
def test_a_loop_that_ends_under_a_store_leaves_nothing_locked(env: Env) -> None:
    """``asyncio.run`` returning while a never-closed store renews its lease and writes: the
    loop cancels them; the database stays writable for the next writer, every write is whole
    or absent, and nothing is left for the garbage collector to close."""
    for step in range(1, MAX_STEPS):
        app = f"loop-end-{uuid.uuid4().hex[:8]}"
        progress: dict[str, bool] = {}
        run_checked(partial(_left_running, env, app, step, progress))
        wait_writable(env.url, app)
        with MemoryStore(env.settings(worker_lease_seconds=3)) as writer:  # the next writer
            writer.append(app, turn("2"))
        truth = env.truth()
        try:
            assert kinds(truth, app) in ([*TYPES, *TYPES], [*TYPES, *TYPES, *TYPES])
            assert truth.load_window(app, 1000)[-4:] == turn("2")
        finally:
            truth.close()
        if progress["done"]:
            return
    pytest.fail("the renewal and the write never completed")


def _two_loop_store(url: str, app: str) -> AsyncMemoryStore:
    """An async store used natively on one loop, then through the adapters' synchronous twin
    from a second loop (its home loop has ended): both loops end, nothing is closed."""
    store = AsyncMemoryStore(Settings(database_url=url, worker_lease_seconds=3))
    access = StoreAccess(store)

    async def on_its_loop() -> None:
        claim_home_loop(store)
        await access.aappend(app, turn("home"))

    async def from_another_loop() -> None:
        await access.aappend(app, turn("other"))  # not the home loop: the twin, in a thread

    run_checked(on_its_loop)
    run_checked(from_another_loop)
    return store


def test_collecting_an_unclosed_store_runs_no_sql(tmp_path: Path) -> None:
    """A store (and the synchronous twin an adapter built for it) collected without being
    closed, while another connection holds the write lock: the collection returns at once
    (it used to release the twin's lease with a blocking UPDATE and wait out the lock)."""
    url = f"sqlite:///{tmp_path / 'collected.db'}"
    with MemoryStore(Settings(database_url=url, worker_id=1)) as store:
        store.migrate()
    app = "collected"
    _two_loop_store(url, app)  # the store is garbage once this returns
    holder = sqlite3.connect(tmp_path / "collected.db")
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held elsewhere
    try:
        started = time.monotonic()
        gc.collect()
        assert time.monotonic() - started < 5  # a busy wait would be 30 s
    finally:
        holder.rollback()
        holder.close()
    with MemoryStore(Settings(database_url=url, worker_lease_seconds=3)) as writer:
        writer.append(app, turn("after"))
    truth = MemoryStore(Settings(database_url=url, worker_id=1), cache=NoWindowCache())
    try:
        assert kinds(truth, app) == TYPES * 3
    finally:
        truth.close()


@on_each_backend
def test_a_store_used_from_two_loops_ends_cleanly(env: Env) -> None:
    """Both loops end without a close: the database stays writable, the next writer writes,
    and a garbage collection has nothing to wait for."""
    app = f"two-loops-{uuid.uuid4().hex[:8]}"
    _two_loop_store(env.url, app)
    wait_writable(env.url, app)
    started = time.monotonic()
    gc.collect()
    assert time.monotonic() - started < 5  # a busy wait would be 30 s
    with MemoryStore(env.settings(worker_lease_seconds=3)) as writer:
        writer.append(app, turn("after"))
    truth = env.truth()
    try:
        assert kinds(truth, app) == TYPES * 3
    finally:
        truth.close()
