"""Redis may evict any key under ``maxmemory`` with an ``allkeys-*`` policy. When it evicts an
app's set of interrupted call ids but keeps its window, the window still answers a call with
the synthetic "interrupted" result: the real result that arrives later must replace it (the
window is dropped and rebuilt), never be skipped as a duplicate.
"""

from __future__ import annotations

import uuid

import fakeredis
import pytest
import redis

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.cache.base import WindowPolicy
from memstore.cache.keys import interrupted_key, window_key
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.window import INTERRUPTED_TEXT
from tests.conftest import (
    DATABASES,
    SESSION_WORKER_ID,
    migrated_engine,
    redis_client,
    require_redis,
)
from tests.integration.conftest import RedisServer

POLICY = WindowPolicy(max_messages=50, ttl_seconds=3600)


def open_call(store: MemoryStore, app: str) -> None:
    """An app whose newest AI message requests a tool that has no result yet, with its window
    cached (the call answered there as interrupted)."""
    store.append(
        app,
        [
            UserMessage(text="read the file"),
            AiMessage(text="", tool_requests=[ToolRequest(id="c1", name="read", arguments="{}")]),
        ],
    )
    window = store.memory(app).messages()
    assert isinstance(window[-1], ToolResult) and window[-1].text.startswith(INTERRUPTED_TEXT[:20])


def real_result_served(store: MemoryStore, app: str) -> bool:
    store.append(app, [ToolResult(id="c1", tool_name="read", text="the real contents")])
    results = [m for m in store.memory(app).messages() if isinstance(m, ToolResult)]
    return [m.text for m in results] == ["the real contents"]


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("client_kind", ["fakeredis", "redis"])
def test_a_lost_interrupted_set_never_hides_the_real_result(
    database: str, client_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    engine = migrated_engine(database, tmp_path_factory)
    client = fakeredis.FakeRedis() if client_kind == "fakeredis" else redis_client()
    cache = RedisWindowCache(client, POLICY, owns_client=True)
    store = MemoryStore(Settings(worker_id=SESSION_WORKER_ID), engine=engine, cache=cache)
    app = f"evict-{uuid.uuid4().hex[:8]}"
    try:
        open_call(store, app)
        assert client.exists(window_key(app)) and client.exists(interrupted_key(app))
        client.delete(interrupted_key(app))  # what an eviction does
        assert real_result_served(store, app)
    finally:
        store.purge(app)
        store.close()
        cache.close()  # a cache passed in stays open when the store closes


def test_under_maxmemory_eviction_every_real_result_is_served(
    private_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    require_redis()  # a real-Redis test: skipped without MEMSTORE_TEST_REDIS_URL
    admin = private_redis.client()
    admin.config_set("maxmemory", "4mb")
    admin.config_set("maxmemory-policy", "allkeys-random")
    engine = migrated_engine("sqlite", tmp_path_factory)
    cache = RedisWindowCache(redis.Redis.from_url(private_redis.url), POLICY, owns_client=True)
    store = MemoryStore(Settings(worker_id=SESSION_WORKER_ID), engine=engine, cache=cache)
    apps = [f"evict-{uuid.uuid4().hex[:8]}" for _ in range(60)]
    try:
        for app in apps:
            open_call(store, app)
        # fill memory until Redis has evicted some sets and kept their windows
        evicted_sets: list[str] = []
        for round_ in range(400):
            admin.set(f"filler:{round_}", b"x" * 20_000)
            evicted_sets = [
                app
                for app in apps
                if admin.exists(window_key(app)) and not admin.exists(interrupted_key(app))
            ]
            if len(evicted_sets) >= 3:
                break
        assert evicted_sets, "no eviction took an interrupted set alone"
        for app in apps:
            assert real_result_served(store, app), app
    finally:
        for app in apps:
            store.purge(app)
        store.close()
        cache.close()
        admin.close()
