"""Redis windows follow SQL's commit order with several writers (the generation guard).

Every write moves the app's SQL generation from ``before`` to ``after``; the Redis APPEND
extends a window only when it is at ``before``, and a rebuild stores the generation it read
after its rows. Two races that used to corrupt a cached window, on a SQLite file, PostgreSQL
and MariaDB, with fakeredis and the real Redis (each test uses its own app ids):

* two writers of one app whose APPENDs arrive in the opposite order of their commits;
* a rebuild that reads a committed write whose APPEND arrives after the rebuild's STORE.
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis
from sqlalchemy.engine import Engine

from memstore import MemoryStore, Settings
from memstore.aio import AsyncMemoryStore
from memstore.cache import keys
from memstore.cache.aio import AsyncRedisWindowCache
from memstore.cache.base import WindowPolicy
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.window import WindowEntry
from memstore.messages import AiMessage, Message, UserMessage
from tests.conftest import (
    REDIS_URL,
    SESSION_WORKER_ID,
    migrated_engine,
    redis_client,
    require_redis,
)

WINDOW = 8


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return migrated_engine(request.param, tmp_path_factory)


@pytest.fixture(params=["fakeredis", "redis"])
def redis_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        require_redis()  # skips (or fails) like every real-Redis test
    return str(request.param)


@pytest.fixture
def app_id(redis_kind: str) -> Iterator[str]:
    app = f"genguard-{uuid.uuid4().hex[:12]}"
    yield app
    if redis_kind == "redis":
        client = redis_client()
        client.delete(*keys.app_keys(app))  # only this test's keys; never a flush
        client.close()


class SlowAppends(RedisWindowCache):
    """Delivers each APPEND after a random pause (commits and APPENDs then interleave), or
    holds it until :meth:`deliver` while ``hold`` is set."""

    hold = False
    pause = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held: list[tuple[str, list[WindowEntry], dict[str, Any]]] = []

    def append(self, app_id: str, entries: Sequence[WindowEntry], **step: Any) -> None:
        if self.hold:
            self.held.append((app_id, list(entries), step))
            return
        if self.pause:
            threading.Event().wait(random.uniform(0, self.pause))
        super().append(app_id, entries, **step)

    def deliver(self) -> None:
        held, self.held = self.held, []
        for app_id, entries, step in held:
            super().append(app_id, entries, **step)


def make_settings(engine: Engine, worker: int) -> Settings:
    return Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        worker_id=worker % 1024,
        window_size=WINDOW,
        reload_max=WINDOW,
    )


def make_stores(
    engine: Engine, redis_kind: str, count: int
) -> tuple[list[MemoryStore], list[SlowAppends]]:
    server = fakeredis.FakeServer()
    stores, caches = [], []
    for n in range(count):
        settings = make_settings(engine, SESSION_WORKER_ID + 400 + n)
        policy = WindowPolicy.from_settings(settings)
        if redis_kind == "fakeredis":
            cache = SlowAppends(fakeredis.FakeRedis(server=server), policy)
        else:
            cache = SlowAppends(redis_client(), policy, owns_client=True)
        caches.append(cache)
        stores.append(MemoryStore(settings, engine=engine, cache=cache))
    return stores, caches


def close_all(stores: list[MemoryStore]) -> None:
    for store in stores:
        store.cache.close()
        store.close()


def assert_cache_matches_sql(store: MemoryStore, app_id: str, when: str) -> None:
    cached = store.cache.read(app_id).messages
    if cached is not None:
        assert cached == store.load_window(app_id, WINDOW), when


def test_concurrent_appenders_keep_the_window_equal_to_sql(
    engine: Engine, redis_kind: str, app_id: str
) -> None:
    """Two writers (two stores, each with its own Redis client) append to one app at the same
    moment, round after round; their APPENDs arrive in random order. The cached window is
    either gone or exactly what SQL says, never reordered."""
    stores, caches = make_stores(engine, redis_kind, 2)
    try:
        for cache in caches:
            cache.pause = 0.01
        reader = stores[0]
        reader.append(app_id, [UserMessage(text="start")])
        served = 0
        for round_ in range(30):
            reader.memory(app_id).messages()  # a window to append to (rebuilt if dropped)
            barrier = threading.Barrier(2)
            errors: list[BaseException] = []

            def write(
                store: MemoryStore,
                text: str,
                barrier: threading.Barrier = barrier,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    barrier.wait()
                    store.append(app_id, [UserMessage(text=text)])
                except BaseException as error:  # surfaced below
                    errors.append(error)

            threads = [
                threading.Thread(target=write, args=(store, f"r{round_}-w{n}"))
                for n, store in enumerate(stores)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not errors, errors
            assert_cache_matches_sql(reader, app_id, f"round {round_}")
            served += reader.cache.read(app_id).messages is not None
            assert reader.memory(app_id).messages() == reader.load_window(app_id, WINDOW)
        assert served  # the guard does not simply drop every window
    finally:
        close_all(stores)


def test_rebuild_before_a_late_append_never_duplicates(
    engine: Engine, redis_kind: str, app_id: str
) -> None:
    """A write commits; before its APPEND reaches Redis a rebuild reads the version, reads the
    rows (which hold the write) and stores the window; then the APPEND arrives. It must not add
    the write's messages a second time."""
    (store,), (cache,) = make_stores(engine, redis_kind, 1)
    try:
        store.append(app_id, [UserMessage(text="one")])
        assert store.memory(app_id).messages() == [UserMessage(text="one")]
        cache.hold = True
        store.append(app_id, [AiMessage(text="two")])  # committed; its APPEND is held
        cache.hold = False
        store.reload(app_id)  # READ + rows (holding "two") + STORE
        assert cache.read(app_id).messages == [UserMessage(text="one"), AiMessage(text="two")]
        cache.deliver()  # the late APPEND of "two"
        assert_cache_matches_sql(store, app_id, "after the late append")
        expected: list[Message] = [UserMessage(text="one"), AiMessage(text="two")]
        assert store.memory(app_id).messages() == expected
        store.append(app_id, [UserMessage(text="three")])  # later writes extend it again
        assert cache.read(app_id).messages == [*expected, UserMessage(text="three")]
    finally:
        close_all([store])


class AsyncHeldAppends(AsyncRedisWindowCache):
    """The asyncio cache holding APPENDs until :meth:`deliver`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = False
        self.held: list[tuple[str, list[WindowEntry], dict[str, Any]]] = []

    async def append(self, app_id: str, entries: Sequence[WindowEntry], **step: Any) -> None:
        if self.hold:
            self.held.append((app_id, list(entries), step))
            return
        await super().append(app_id, entries, **step)

    async def deliver(self) -> None:
        held, self.held = self.held, []
        for app_id, entries, step in held:
            await super().append(app_id, entries, **step)


def test_async_rebuild_before_a_late_append_never_duplicates(
    engine: Engine, redis_kind: str, app_id: str
) -> None:
    """The same race through :class:`AsyncMemoryStore` and the asyncio Redis cache."""
    settings = make_settings(engine, SESSION_WORKER_ID + 450)
    policy = WindowPolicy.from_settings(settings)

    async def scenario() -> None:
        if redis_kind == "fakeredis":
            client: Any = fakeredis.FakeAsyncRedis()
        else:
            assert REDIS_URL is not None
            client = aioredis.Redis.from_url(REDIS_URL)
        cache = AsyncHeldAppends(client, policy, owns_client=True)
        store = AsyncMemoryStore(settings, cache=cache)
        try:
            await store.append(app_id, [UserMessage(text="one")])
            assert await store.memory(app_id).messages() == [UserMessage(text="one")]
            cache.hold = True
            await store.append(app_id, [AiMessage(text="two")])
            cache.hold = False
            await store.reload(app_id)
            await cache.deliver()
            expected: list[Message] = [UserMessage(text="one"), AiMessage(text="two")]
            cached = (await cache.read(app_id)).messages
            assert cached is None or cached == expected
            assert await store.memory(app_id).messages() == expected
        finally:
            await cache.close()
            await store.close()

    asyncio.run(scenario())
