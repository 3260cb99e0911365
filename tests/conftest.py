"""Backends for the whole suite.

SQLite, fakeredis and the in-process cache always run. PostgreSQL, MariaDB/MySQL and a real
Redis run when their URLs are set (``.ci/run`` sets them all):

* ``MEMSTORE_TEST_POSTGRES_URL``  e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test
* ``MEMSTORE_TEST_MYSQL_URL``     e.g. mysql+pymysql://root@127.0.0.1:3306/test
* ``MEMSTORE_TEST_REDIS_URL``     e.g. redis://127.0.0.1:6379/15 (the suite flushes this db)

A URL that is set but unreachable fails the tests that need it; it never skips them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis
from sqlalchemy.engine import Engine

from memstore import MemoryStore, Settings
from memstore.cache.base import WindowCache, WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.sql import migrate
from memstore.sql.engine import make_engine

POSTGRES_URL = os.environ.get("MEMSTORE_TEST_POSTGRES_URL")
MYSQL_URL = os.environ.get("MEMSTORE_TEST_MYSQL_URL")
REDIS_URL = os.environ.get("MEMSTORE_TEST_REDIS_URL")

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
    if not REDIS_URL:
        pytest.skip("MEMSTORE_TEST_REDIS_URL is not set")
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()  # a set URL that does not answer is a failure, not a skip
    return client


def make_cache(name: str, policy: WindowPolicy) -> WindowCache:
    if name == "memory":
        return InProcessWindowCache(policy)
    if name == "fakeredis":
        return RedisWindowCache(fakeredis.FakeRedis(), policy)
    return RedisWindowCache(redis_client(), policy, owns_client=True)


BACKENDS = [
    ("sqlite", "memory"),
    ("sqlite", "fakeredis"),
    ("sqlite", "redis"),
    ("postgres", "fakeredis"),
    ("postgres", "redis"),
    ("mysql", "fakeredis"),
    ("mysql", "redis"),
]


@pytest.fixture(params=BACKENDS, ids=[f"{db}-{cache}" for db, cache in BACKENDS])
def backend(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


class StoreFactory:
    """Builds stores on one database/cache pair; the contract tests take settings from it."""

    def __init__(self, db: str, cache: str, engine: Engine) -> None:
        self.db = db
        self.cache_name = cache
        self.engine = engine
        self._stores: list[MemoryStore] = []

    def __call__(self, **settings: object) -> MemoryStore:
        config = Settings(
            database_url=str(self.engine.url.render_as_string(hide_password=False)), **settings
        )  # type: ignore[arg-type]
        policy = WindowPolicy(
            config.window_size, config.cache_ttl_seconds, config.window_start_at_user
        )
        store = MemoryStore(config, engine=self.engine, cache=make_cache(self.cache_name, policy))
        self._stores.append(store)
        return store

    def close(self) -> None:
        for store in self._stores:
            store.cache.close()


@pytest.fixture
def make_store(
    backend: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreFactory]:
    db, cache = backend
    factory = StoreFactory(db, cache, migrated_engine(db, tmp_path_factory))
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
