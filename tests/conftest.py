"""Backends for the whole suite.

SQLite, fakeredis and the in-process cache always run. PostgreSQL, MariaDB/MySQL and a real
Redis run when their URLs are set (``.ci/run`` sets them all):

* ``MEMSTORE_TEST_POSTGRES_URL``  e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test
* ``MEMSTORE_TEST_MYSQL_URL``     e.g. mysql+pymysql://root@127.0.0.1:3306/test
* ``MEMSTORE_TEST_REDIS_URL``     e.g. redis://127.0.0.1:6379/15 (the suite flushes this db)

A URL that is set but unreachable fails the tests that need it; it never skips them.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio as aioredis
from sqlalchemy.engine import Engine

from memstore import MemoryStore, Settings
from memstore.aio import AsyncMemoryStore
from memstore.cache.aio import AsyncInProcessWindowCache, AsyncRedisWindowCache, AsyncWindowCache
from memstore.cache.base import WindowCache, WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.sql import migrate
from memstore.sql.engine import make_engine
from tests.async_facade import SyncFacade

POSTGRES_URL = os.environ.get("MEMSTORE_TEST_POSTGRES_URL")
MYSQL_URL = os.environ.get("MEMSTORE_TEST_MYSQL_URL")
REDIS_URL = os.environ.get("MEMSTORE_TEST_REDIS_URL")

# Each test session writes with its own snowflake worker id, so two sessions sharing the
# PostgreSQL/MariaDB test databases never issue the same ids.
SESSION_WORKER_ID = int(os.environ.get("MEMSTORE_TEST_WORKER_ID", random.randint(1, 1023)))

DATABASES = ["sqlite", "postgres", "mysql"]
CACHES = ["memory", "fakeredis", "redis"]


def database_url(name: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    if name == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'memstore.db'}"
    url = POSTGRES_URL if name == "postgres" else MYSQL_URL
    if not url:
        pytest.skip(f"MEMSTORE_TEST_{name.upper()}_URL is not set")
    return url


_ENGINES: dict[str, Engine] = {}


def migrated_engine(name: str, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """One engine per database for the whole session, migrated to head once."""
    if name not in _ENGINES:
        engine = make_engine(database_url(name, tmp_path_factory))
        migrate.upgrade(engine)
        _ENGINES[name] = engine
    return _ENGINES[name]


def redis_client() -> redis.Redis:
    """A client of the real test Redis; the caller closes it (``with redis_client() as c:``).

    A client left to the garbage collector can have its socket finalized before the client
    closes it, and that unclosed-socket warning then fails whichever test is running."""
    if not REDIS_URL:
        pytest.skip("MEMSTORE_TEST_REDIS_URL is not set")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()  # a set URL that does not answer is a failure, not a skip
    except BaseException:
        client.close()
        raise
    return client


def require_redis() -> None:
    """Skip without MEMSTORE_TEST_REDIS_URL; fail when it is set and Redis does not answer."""
    redis_client().close()


def make_cache(name: str, policy: WindowPolicy) -> WindowCache:
    if name == "memory":
        return InProcessWindowCache(policy)
    if name == "fakeredis":
        return RedisWindowCache(fakeredis.FakeRedis(), policy)
    return RedisWindowCache(redis_client(), policy, owns_client=True)


BACKENDS = [
    ("sync", "sqlite", "memory"),
    ("sync", "sqlite", "fakeredis"),
    ("sync", "sqlite", "redis"),
    ("sync", "postgres", "fakeredis"),
    ("sync", "postgres", "redis"),
    ("sync", "mysql", "fakeredis"),
    ("sync", "mysql", "redis"),
    ("async", "sqlite", "memory"),
    ("async", "sqlite", "fakeredis"),
    ("async", "sqlite", "redis"),
    ("async", "postgres", "redis"),
    ("async", "mysql", "redis"),
]


@pytest.fixture(params=BACKENDS, ids=["-".join(b) for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    return request.param  # type: ignore[no-any-return]


def make_async_cache(name: str, policy: WindowPolicy) -> AsyncWindowCache:
    if name == "memory":
        return AsyncInProcessWindowCache(policy)
    if name == "fakeredis":
        return AsyncRedisWindowCache(fakeredis.FakeAsyncRedis(), policy)
    require_redis()  # skip or fail exactly like the sync cache
    assert REDIS_URL is not None
    return AsyncRedisWindowCache(aioredis.Redis.from_url(REDIS_URL), policy, owns_client=True)


class StoreFactory:
    """Builds stores on one flavour/database/cache triple; tests pass settings through it.

    The async flavour runs :class:`AsyncMemoryStore` behind a test-only sync facade, so the
    one contract suite covers both stores.
    """

    def __init__(self, flavor: str, db: str, cache: str, engine: Engine) -> None:
        self.flavor = flavor
        self.db = db
        self.cache_name = cache
        self.engine = engine
        self._stores: list[Any] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, token_counter: Any = None, summarizer: Any = None, **settings: Any) -> Any:
        settings.setdefault("worker_id", SESSION_WORKER_ID)
        config = Settings(
            database_url=self.engine.url.render_as_string(hide_password=False), **settings
        )
        policy = WindowPolicy.from_settings(config)
        if self.flavor == "sync":
            store = MemoryStore(
                config,
                engine=self.engine,
                cache=make_cache(self.cache_name, policy),
                token_counter=token_counter,
                summarizer=summarizer,
            )
            self._stores.append(store)
            return store
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        async_store = AsyncMemoryStore(
            config,
            cache=make_async_cache(self.cache_name, policy),
            token_counter=token_counter,
            summarizer=summarizer,
        )
        facade = SyncFacade(async_store, self._loop, self.engine)
        self._stores.append(facade)
        return facade

    def close(self) -> None:
        for store in self._stores:
            if isinstance(store, SyncFacade):
                store.cache.close()
                store.close()
            else:
                store.cache.close()
        if self._loop is not None:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()


@pytest.fixture
def make_store(
    backend: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreFactory]:
    flavor, db, cache = backend
    factory = StoreFactory(flavor, db, cache, migrated_engine(db, tmp_path_factory))
    yield factory
    factory.close()


@pytest.fixture
def store(make_store: StoreFactory) -> MemoryStore:
    return make_store()


@pytest.fixture
def app_id() -> str:
    """A fresh app id per test: the shared databases never need cleaning between tests."""
    return f"app-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[MemoryStore]:
    """A store on a private SQLite file with the in-process cache."""
    store = MemoryStore(Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}"))
    store.migrate()
    yield store
    store.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for engine in _ENGINES.values():
        engine.dispose()
