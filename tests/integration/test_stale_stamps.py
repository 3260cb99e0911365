"""Stale-window stamps through the stores, on a SQLite file with fakeredis (quick): which calls
stamp, who drops and clears, what ``stale_window_max_seconds=0`` and an unmigrated database do.
The cross-process bound against the real Redis is in ``test_stale_windows.py``."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

import fakeredis
import pytest
import redis
import redis.asyncio as aioredis
import sqlalchemy as sa

from memstore import ConfigurationError, MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.cache.aio import AsyncRedisWindowCache, async_client_options
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import RedisWindowCache, client_options
from memstore.sql.schema import app_generation
from tests.integration.conftest import free_port

BOUND = 0.2
"""Looks every 0.1 s: the tests wait a look out instead of forcing one."""


def config(url: str, bound: float = BOUND, worker: int = 11) -> Settings:
    return Settings(database_url=url, stale_window_max_seconds=bound, worker_id=worker)


@pytest.fixture
def url(tmp_path: Path) -> str:
    database = f"sqlite:///{tmp_path / 'memstore.db'}"
    with MemoryStore(config(database)) as store:
        store.migrate()
    return database


def unreachable(policy: WindowPolicy) -> RedisWindowCache:
    """A Redis cache on a port nothing listens on: every call fails at once."""
    client = redis.Redis(host="127.0.0.1", port=free_port(), **client_options(0.2))
    return RedisWindowCache(client, policy, owns_client=True)


def stamp_of(store: MemoryStore, app_id: str) -> int | None:
    query = sa.select(app_generation.c.stale_at_ms).where(app_generation.c.app_id == app_id)
    with store.engine.connect() as conn:
        value = conn.execute(query).scalar()
    return None if value is None else int(value)


def clear_stamps(store: MemoryStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(app_generation.update().values(stale_at_ms=None))


def texts(store: MemoryStore, app_id: str) -> list[str]:
    return [m.text for m in store.memory(app_id).messages()]  # type: ignore[misc]


def test_every_skipped_update_stamps_and_a_reader_drops_and_clears(url: str) -> None:
    app = f"stamp-{uuid.uuid4().hex[:8]}"
    policy = WindowPolicy.from_settings(config(url))
    server = fakeredis.FakeServer()
    reader = MemoryStore(
        config(url, worker=12), cache=RedisWindowCache(fakeredis.FakeRedis(server=server), policy)
    )
    writer = MemoryStore(config(url, worker=13), cache=unreachable(policy))
    try:
        reader.append(app, [UserMessage(text="m0")])
        assert texts(reader, app) == ["m0"]  # cached
        writer.append(app, [UserMessage(text="m1")])  # commits; Redis fails: stamped
        assert stamp_of(reader, app) is not None
        time.sleep(BOUND / 2 + 0.02)
        assert texts(reader, app) == ["m0", "m1"]  # the look dropped the window
        assert stamp_of(reader, app) is None  # and cleared the stamp

        writer.memory(app).invalidate()  # resting or failing: skipped, stamped
        assert stamp_of(reader, app) is not None
        clear_stamps(reader)
        writer.purge(app)
        assert stamp_of(reader, app) is not None
        time.sleep(BOUND / 2 + 0.02)
        assert texts(reader, app) == []  # the purged window is not served
    finally:
        writer.close()
        reader.close()


def test_a_compaction_whose_drop_is_skipped_stamps(url: str) -> None:
    """The summary row commits before the window is dropped: a skipped drop is stamped like a
    skipped append, so no instance serves the uncompacted window past the bound."""
    app = f"stamp-{uuid.uuid4().hex[:8]}"
    policy = WindowPolicy.from_settings(config(url))
    reader = MemoryStore(
        config(url, worker=16), cache=RedisWindowCache(fakeredis.FakeRedis(), policy)
    )
    writer = MemoryStore(config(url, worker=17), cache=unreachable(policy))
    try:
        reader.append(app, [UserMessage(text=f"m{n}") for n in range(4)])
        assert texts(reader, app) == ["m0", "m1", "m2", "m3"]  # cached
        report = writer.compact(app, lambda _: "the summary", keep_last_messages=1)
        assert report.compacted
        assert stamp_of(reader, app) is not None
        time.sleep(BOUND / 2 + 0.02)
        window = texts(reader, app)
        assert "the summary" in window[0] and window[1:] == ["m3"]
    finally:
        writer.close()
        reader.close()


def test_a_rebuild_stored_after_a_write_skipped_by_a_resting_route_is_dropped(url: str) -> None:
    """One shared Redis. The writer's route rests (an earlier failure) while the reader's does
    not. The reader's rebuild reads the version and the rows, the writer commits a write whose
    APPEND is skipped (resting: nothing reaches Redis, no version bump), then the rebuild's
    STORE lands: the shared window misses the write. The generation guard cannot see it (no
    APPEND ran); the writer's stamp does: the reader's next look drops the window (the writer
    also holds the app dirty, for its own next contact)."""
    from memstore.core import cache_plan

    app = f"stamp-{uuid.uuid4().hex[:8]}"
    policy = WindowPolicy.from_settings(config(url))
    server = fakeredis.FakeServer()
    reader = MemoryStore(
        config(url, worker=18),
        cache=RedisWindowCache(fakeredis.FakeRedis(server=server), policy),
    )
    writer_cache = RedisWindowCache(
        fakeredis.FakeRedis(server=server), policy, retry_after_seconds=3600
    )
    writer = MemoryStore(config(url, worker=19), cache=writer_cache)
    try:
        reader.append(app, [UserMessage(text="m0")])
        assert texts(reader, app) == ["m0"]
        failure = redis.TimeoutError("slow")  # the writer's route rests from now on
        read = cache_plan.read_call(app, policy)
        writer_cache.state.failed(read, "", failure, time.monotonic(), cluster=False)

        version = reader.cache.read(app).version  # the rebuild begins: version, rows
        rows = reader.load_window(app, reader.settings.reload_max)
        generation = reader._sql.generation(app)
        writer.append(app, [UserMessage(text="m1")])  # committed; APPEND skipped: resting
        assert writer_cache.state.is_dirty(app) and stamp_of(reader, app) is not None
        stored = reader.cache.store(app, reader._entries(rows), [], version, generation)
        assert stored  # nothing told Redis about m1: the stale window is stored
        assert [m.text for m in reader.cache.read(app).messages or []] == ["m0"]

        time.sleep(BOUND / 2 + 0.02)
        assert texts(reader, app) == ["m0", "m1"]  # the look dropped it; rebuilt from SQL
        assert stamp_of(reader, app) is None
    finally:
        writer.close()
        reader.close()


def test_a_stamp_is_cleared_only_if_unchanged(url: str) -> None:
    """A change after the look read the stamp keeps a stamp of its own."""
    from memstore.core.staleness import StaleMark
    from memstore.sql import staleness as sql_staleness

    app = f"stamp-{uuid.uuid4().hex[:8]}"
    with MemoryStore(config(url)) as store:
        store.append(app, [UserMessage(text="m0")])
        sql_staleness.stamp(store.engine, [app])
        (mark,) = [m for m in sql_staleness.pending(store.engine) if m.app_id == app]
        store.append(app, [UserMessage(text="m1")])  # the generation moves on
        sql_staleness.clear(store.engine, [mark])
        assert stamp_of(store, app) == mark.stale_at_ms
        moved = StaleMark(app, mark.generation + 1, mark.stale_at_ms)
        sql_staleness.clear(store.engine, [moved])
        assert stamp_of(store, app) is None


def test_off_stamps_nothing_and_never_looks(url: str) -> None:
    app = f"stamp-{uuid.uuid4().hex[:8]}"
    policy = WindowPolicy.from_settings(config(url))
    with MemoryStore(config(url, bound=0), cache=unreachable(policy)) as writer:
        writer.append(app, [UserMessage(text="m0")])
        assert stamp_of(writer, app) is None
        assert not writer._stale_tracking
    with MemoryStore(config(url), cache=InProcessWindowCache(policy)) as local:
        assert not local._stale_tracking  # the in-process cache checks generations instead


def test_a_look_that_fails_serves_the_window_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = f"sqlite:///{tmp_path / 'old.db'}"
    app = f"stamp-{uuid.uuid4().hex[:8]}"
    policy = WindowPolicy.from_settings(config(database))
    cache = RedisWindowCache(fakeredis.FakeRedis(), policy)
    with MemoryStore(config(database), cache=cache) as store:
        store.migrate("0006")  # no stale_at_ms column: every look fails
        store.append(app, [UserMessage(text="m0")])
        with caplog.at_level(logging.WARNING, logger="memstore"):
            assert texts(store, app) == ["m0"]
            assert texts(store, app) == ["m0"]  # cached, served unchecked
    warnings = [r.getMessage() for r in caplog.records if "stale-window stamps" in r.getMessage()]
    assert len(warnings) == 1  # one failed look per interval, not one per read
    assert "m0" not in warnings[0]


def test_async_store_stamps_and_drops(url: str) -> None:
    app = f"stamp-{uuid.uuid4().hex[:8]}"
    policy = WindowPolicy.from_settings(config(url))

    async def main() -> None:
        server = fakeredis.FakeServer()
        reader = AsyncMemoryStore(
            config(url, worker=14),
            cache=AsyncRedisWindowCache(fakeredis.FakeAsyncRedis(server=server), policy),
        )
        broken = aioredis.Redis(host="127.0.0.1", port=free_port(), **async_client_options(0.2))
        writer = AsyncMemoryStore(
            config(url, worker=15), cache=AsyncRedisWindowCache(broken, policy, owns_client=True)
        )
        try:
            await reader.append(app, [UserMessage(text="m0")])
            assert [m.text for m in await reader.memory(app).messages()] == ["m0"]
            await writer.append(app, [UserMessage(text="m1")])
            await asyncio.sleep(BOUND / 2 + 0.02)
            assert [m.text for m in await reader.memory(app).messages()] == ["m0", "m1"]
            await writer.compact(app, lambda _: "the summary", keep_last_messages=1)  # stamped
            await asyncio.sleep(BOUND / 2 + 0.02)
            window = [m.text for m in await reader.memory(app).messages()]
            assert "the summary" in str(window[0]) and window[1:] == ["m1"]
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(main())
    with MemoryStore(config(url)) as store:
        assert stamp_of(store, app) is None


@pytest.mark.parametrize("value", [-0.1, 3600.5, "soon"])
def test_the_bound_is_range_checked(value: object) -> None:
    with pytest.raises(ConfigurationError):
        Settings(stale_window_max_seconds=value)


def test_the_bound_reads_from_the_environment() -> None:
    env = {"MEMSTORE_STALE_WINDOW_MAX_SECONDS": "2.5"}
    assert Settings.from_env(env).stale_window_max_seconds == 2.5
    assert Settings().stale_window_max_seconds == 5
