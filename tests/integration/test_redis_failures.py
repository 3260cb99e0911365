"""Redis failures never reach the caller, and never leave a stale window behind.

Every test runs a store on a SQLite file against a private ``redis-server`` that it stops,
restarts on the same port, or freezes with SIGSTOP (so calls time out rather than fail fast).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from memstore import AiMessage, MemoryStore, Message, Settings, ToolRequest, ToolResult, UserMessage
from memstore.cache.base import decode_entries
from memstore.cache.keys import window_key
from memstore.sql.schema import original
from tests.integration.conftest import RedisServer

REST_SECONDS = 1.0  # RedisWindowCache's default retry_after_seconds
TIMEOUT_SECONDS = 0.2

TURN: list[Message] = [
    UserMessage(text="Create a.txt and b.txt"),
    AiMessage(
        text=None,
        tool_requests=[
            ToolRequest(id="call_1", name="write_file", arguments='{"path": "a.txt"}'),
            ToolRequest(id="call_2", name="write_file", arguments='{"path": "b.txt"}'),
        ],
    ),
    ToolResult(id="call_2", tool_name="write_file", text="ok b"),
    ToolResult(id="call_1", tool_name="write_file", text="ok a"),
    AiMessage(text="Created both."),
]


@pytest.fixture
def store(tmp_path: Path, private_redis: RedisServer) -> Iterator[MemoryStore]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'memstore.db'}",
        redis_url=private_redis.url,
        redis_timeout_seconds=TIMEOUT_SECONDS,
    )
    with MemoryStore(settings) as store:
        store.migrate()
        yield store


@pytest.fixture
def app_id() -> str:
    return f"redis-down-{uuid.uuid4().hex[:12]}"


def stored_ids(store: MemoryStore, app_id: str) -> list[int]:
    with store.engine.connect() as conn:
        query = sa.select(original.c.id).where(original.c.app_id == app_id).order_by(original.c.id)
        return [row[0] for row in conn.execute(query)]


def cached_window(redis: RedisServer, app_id: str) -> list[Message] | None:
    """The window as it sits in Redis, read past memstore."""
    with redis.client() as client:
        raw = client.lrange(window_key(app_id), 0, -1)
    return decode_entries(raw) if raw else None


def memstore_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "memstore" and record.levelno == logging.WARNING
    ]


def sql_window(store: MemoryStore, app_id: str) -> list[Message]:
    return store.load_window(app_id, store.settings.reload_max)


def wait_out_the_rest() -> None:
    time.sleep(REST_SECONDS + 0.2)


def cache_the_window(store: MemoryStore, redis: RedisServer, app_id: str) -> None:
    memory = store.memory(app_id)
    memory.add_all(TURN)
    assert memory.messages() == TURN
    assert cached_window(redis, app_id) == TURN


def test_redis_down_writes_commit_and_reads_fall_back_to_sql(
    store: MemoryStore,
    private_redis: RedisServer,
    app_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="memstore")
    cache_the_window(store, private_redis, app_id)
    assert memstore_warnings(caplog) == []
    memory = store.memory(app_id)

    private_redis.stop()

    down = UserMessage(text="written while Redis is down")
    row_id = memory.add(down)  # no exception
    assert stored_ids(store, app_id)[-1] == row_id  # committed in SQL
    assert len(stored_ids(store, app_id)) == len(TURN) + 1
    warnings = memstore_warnings(caplog)
    assert warnings and all("Redis" in text for text in warnings)
    assert memory.messages() == [*TURN, down] == sql_window(store, app_id)  # while resting

    wait_out_the_rest()  # the next call tries Redis again, fails again, still no exception
    before = len(memstore_warnings(caplog))
    assert memory.messages() == [*TURN, down]
    assert len(memstore_warnings(caplog)) > before
    assert store.history(app_id)[0].text == down.text


def test_redis_back_on_the_same_port_caches_the_window_again(
    store: MemoryStore,
    private_redis: RedisServer,
    app_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="memstore")
    cache_the_window(store, private_redis, app_id)
    memory = store.memory(app_id)

    private_redis.stop()
    down = UserMessage(text="written while Redis is down")
    memory.add(down)
    assert memory.messages() == [*TURN, down]
    assert memstore_warnings(caplog)

    private_redis.start()  # same port, empty (no persistence), like a restarted server
    wait_out_the_rest()
    caplog.clear()

    assert memory.messages() == [*TURN, down] == sql_window(store, app_id)
    assert cached_window(private_redis, app_id) == [*TURN, down]  # cached again
    with private_redis.client() as client:
        assert client.exists(window_key(app_id)) == 1

    after = AiMessage(text="Redis is back")
    memory.add(after)  # appended to the cached window again
    assert cached_window(private_redis, app_id) == [*TURN, down, after]
    assert memory.messages() == [*TURN, down, after] == sql_window(store, app_id)
    assert memstore_warnings(caplog) == []


def test_a_window_that_missed_a_write_is_not_served(
    store: MemoryStore,
    private_redis: RedisServer,
    app_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="memstore")
    cache_the_window(store, private_redis, app_id)
    memory = store.memory(app_id)

    private_redis.pause()  # SIGSTOP: connections are accepted, calls time out
    try:
        first = UserMessage(text="first write while Redis hangs")
        started = time.monotonic()
        memory.add(first)  # the append times out after redis_timeout_seconds
        assert time.monotonic() - started < REST_SECONDS
        assert memstore_warnings(caplog)
        second = AiMessage(text="second write, while the cache rests")
        memory.add(second)  # not sent to Redis at all
        assert memory.messages() == [*TURN, first, second]  # from SQL meanwhile
    finally:
        private_redis.resume()

    # The key survived and misses at least the second write: serving it would be wrong.
    stale = cached_window(private_redis, app_id)
    assert stale is not None and stale[: len(TURN)] == TURN
    assert second not in stale

    wait_out_the_rest()
    assert memory.messages() == [*TURN, first, second] == sql_window(store, app_id)
    assert cached_window(private_redis, app_id) == [*TURN, first, second]  # rebuilt, cached

    third = UserMessage(text="after recovery")
    memory.add(third)
    assert memory.messages() == [*TURN, first, second, third] == sql_window(store, app_id)


def test_a_window_that_does_not_decode_is_replaced(
    store: MemoryStore,
    private_redis: RedisServer,
    app_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A damaged (or foreign) entry reads as a miss and the rebuild replaces the whole window,
    also when writes have bumped the version since the window was stored."""
    caplog.set_level(logging.WARNING, logger="memstore")
    cache_the_window(store, private_redis, app_id)
    memory = store.memory(app_id)
    later = AiMessage(text="appended after the window was stored")
    memory.add(later)  # bumps the version key
    with private_redis.client() as client:
        client.lset(window_key(app_id), 0, b"U\x1e{not json")

    assert memory.messages() == [*TURN, later] == sql_window(store, app_id)
    assert memstore_warnings(caplog)
    assert cached_window(private_redis, app_id) == [*TURN, later]  # replaced, not left as is
    caplog.clear()
    assert memory.messages() == [*TURN, later]
    assert memstore_warnings(caplog) == []  # a plain hit from now on
