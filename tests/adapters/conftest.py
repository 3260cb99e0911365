"""Stores for the adapter tests: each database in both flavours, some with the real Redis.

A test gets an :class:`AdapterEnv`: ``env.store()`` builds a new store object (a new engine)
on the backend's database, and ``env.run(coroutine)`` runs a scenario on the test's own event
loop, the home loop of every async store the test builds. Everything is closed at teardown.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from memstore import MemoryStore, Settings
from memstore.aio import AsyncMemoryStore
from tests.conftest import REDIS_URL, migrated_engine, require_redis

T = TypeVar("T")

WORKER_ID = 1 + os.getpid() % 1023
"""A snowflake worker id of this test process: other suites may write to the shared databases at
the same time, and two processes with one worker id can issue the same id in one millisecond."""

ADAPTER_BACKENDS = [
    ("sync", "sqlite", "memory"),
    ("async", "sqlite", "memory"),
    ("sync", "postgres", "memory"),
    ("async", "postgres", "redis"),
    ("sync", "mysql", "redis"),
    ("async", "mysql", "memory"),
]


class AdapterEnv:
    def __init__(self, flavor: str, db: str, cache: str, url: str) -> None:
        self.flavor = flavor
        self.db = db
        self.cache = cache
        self.url = url
        self.loop = asyncio.new_event_loop()
        self._stores: list[MemoryStore | AsyncMemoryStore] = []

    @property
    def is_async(self) -> bool:
        return self.flavor == "async"

    def settings(self) -> Settings:
        return Settings(
            database_url=self.url,
            redis_url=REDIS_URL if self.cache == "redis" else None,
            worker_id=WORKER_ID,
            # MEMSTORE_TEST_ENCRYPTION_KEYS=kid:BASE64 runs every adapter test encrypted
            encryption_keys=os.environ.get("MEMSTORE_TEST_ENCRYPTION_KEYS") or (),
        )

    def store(self) -> Any:
        """A new store object (new engine, new cache client) on the backend's database."""
        settings = self.settings()
        store = AsyncMemoryStore(settings) if self.is_async else MemoryStore(settings)
        self._stores.append(store)
        return store

    def sync_store(self) -> MemoryStore:
        store = MemoryStore(self.settings())
        self._stores.append(store)
        return store

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        for store in self._stores:
            if isinstance(store, AsyncMemoryStore):
                self.loop.run_until_complete(store.close())
            else:
                store.close()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture(params=ADAPTER_BACKENDS, ids=["-".join(b) for b in ADAPTER_BACKENDS])
def env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AdapterEnv]:
    flavor, db, cache = request.param
    if cache == "redis":
        require_redis()  # skip when unset, fail when set but down
    engine = migrated_engine(db, tmp_path_factory)
    adapter_env = AdapterEnv(flavor, db, cache, engine.url.render_as_string(hide_password=False))
    yield adapter_env
    adapter_env.close()
