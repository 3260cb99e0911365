"""Bounded staleness across instances (issue 13 part 3), against the real Redis.

A writer in a child process reaches Redis through a loopback proxy the test cuts; a reader
(this process, sync or async store) reaches Redis directly and keeps reading. The writer's
append commits in SQL, its Redis update fails and it stamps the app in SQL; the reader must
serve the new message within ``stale_window_max_seconds`` of the append's start, whether the
writer lives on or is SIGKILLed right after. On a SQLite file, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from memstore import MemoryStore, Settings
from memstore.aio import AsyncMemoryStore
from memstore.cache import keys
from memstore.sql.schema import app_generation
from tests.conftest import (
    REDIS_URL,
    SESSION_WORKER_ID,
    migrated_engine,
    redis_client,
    require_redis,
)
from tests.integration.stale_writer import serve
from tests.integration.tcp_proxy import TcpProxy

BOUND = 2.0
"""The reader's and writer's ``stale_window_max_seconds`` (small, so the tests are quick)."""
MARGIN = 1.0
"""Slack for a loaded machine: a read's own latency and scheduling, on top of the bound."""
WORKER_BASE = (SESSION_WORKER_ID + 300) % 1000


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return migrated_engine(request.param, tmp_path_factory)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    require_redis()  # skips (or fails) like every real-Redis test
    assert REDIS_URL is not None
    url = make_url(REDIS_URL.replace("redis://", "redis+x://", 1))
    server = TcpProxy(url.host or "127.0.0.1", url.port or 6379)
    yield server
    server.close()


@pytest.fixture
def app_id() -> Iterator[str]:
    app = f"stale-{uuid.uuid4().hex[:12]}"
    yield app
    client = redis_client()
    client.delete(*keys.app_keys(app))  # only this test's keys; never a flush
    client.close()


def db_number() -> int:
    assert REDIS_URL is not None
    return int(REDIS_URL.rsplit("/", 1)[1] or 0)


def settings(engine: Engine, redis_url: str, worker: int, bound: float = BOUND) -> Settings:
    return Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        redis_url=redis_url,
        redis_timeout_seconds=0.3,
        stale_window_max_seconds=bound,
        worker_id=worker,
    )


class Writer:
    """The writing instance, in a child process."""

    def __init__(self, config: Settings, flavor: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, config, flavor))
        self.process.start()

    def call(self, command: str, app_id: str, text: str = "") -> Any:
        self._conn.send((command, app_id, text))
        if not self._conn.poll(60):
            raise AssertionError(f"writer did not answer {command}")
        status, value = self._conn.recv()
        assert status == "ok", value
        return value

    def append(self, app_id: str, text: str) -> float:
        """Append; the wall-clock time the call started (before the write committed)."""
        started, _ = self.call("append", app_id, text)
        return float(started)

    def kill(self) -> None:
        self.process.kill()
        self.process.join(10)

    def close(self) -> None:
        if self.process.is_alive():
            self._conn.send(("close", "", ""))
            self.process.join(30)
        if self.process.is_alive():
            self.kill()


class Reader:
    """Another instance, reaching Redis directly: a sync store, or an async one on its loop."""

    def __init__(self, config: Settings, flavor: str) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        if flavor == "async":
            self._loop = asyncio.new_event_loop()
            self._astore = AsyncMemoryStore(config)
        else:
            self._store = MemoryStore(config)

    def texts(self, app_id: str) -> list[str]:
        if self._loop is None:
            window = self._store.memory(app_id).messages()
        else:
            window = self._loop.run_until_complete(self._astore.memory(app_id).messages())
        return [m.text for m in window]  # type: ignore[misc]

    def close(self) -> None:
        if self._loop is None:
            self._store.close()
            return
        self._loop.run_until_complete(self._astore.close())
        self._loop.close()


def staleness(reader: Reader, app_id: str, text: str, started: float, limit: float) -> float:
    """Read until the window holds ``text``; seconds from ``started`` to the first read that
    served it (``inf`` when it did not within ``limit`` seconds)."""
    while True:
        seen = text in reader.texts(app_id)
        now = time.time()
        if seen:
            return now - started
        if now - started > limit:
            return float("inf")
        time.sleep(0.01)


def stamp_of(engine: Engine, app_id: str) -> int | None:
    query = sa.select(app_generation.c.stale_at_ms).where(app_generation.c.app_id == app_id)
    with engine.connect() as conn:
        value = conn.execute(query).scalar()
    return None if value is None else int(value)


def report(name: str, seconds: float) -> None:
    print(f"STALENESS {name}: {seconds:.3f} s (bound {BOUND} s)")


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_reader_serves_the_write_a_cut_off_writer_missed_within_the_bound(
    engine: Engine, proxy: TcpProxy, app_id: str, flavor: str, request: pytest.FixtureRequest
) -> None:
    assert REDIS_URL is not None
    writer = Writer(settings(engine, proxy.url(db_number()), WORKER_BASE + 1), flavor)
    reader = Reader(settings(engine, REDIS_URL, WORKER_BASE + 2), flavor)
    try:
        writer.append(app_id, "m0")
        assert reader.texts(app_id) == ["m0"]  # cached in Redis
        writer.append(app_id, "m1")  # through Redis: the window stays current
        assert reader.texts(app_id) == ["m0", "m1"]

        proxy.cut()
        started = writer.append(app_id, "m2")  # commits; its Redis update fails
        assert stamp_of(engine, app_id) is not None
        seconds = staleness(reader, app_id, "m2", started, limit=BOUND + 10)
        report(f"{request.node.callspec.id} cut link", seconds)
        assert seconds <= BOUND + MARGIN
        assert reader.texts(app_id) == ["m0", "m1", "m2"]
        assert stamp_of(engine, app_id) is None  # the reader dropped the window: cleared
        assert writer.call("read", app_id) == ["m0", "m1", "m2"]  # from SQL, Redis cut

        proxy.restore()
        time.sleep(1.1)  # the writer's cache rests 1 s after a failure
        restored = time.time()
        started = writer.append(app_id, "m3")
        seconds = staleness(reader, app_id, "m3", restored, limit=BOUND + 10)
        report(f"{request.node.callspec.id} after restore", seconds)
        assert seconds <= BOUND + MARGIN
        assert reader.texts(app_id) == writer.call("read", app_id) == ["m0", "m1", "m2", "m3"]
    finally:
        writer.close()
        reader.close()


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_the_bound_holds_when_the_writer_dies_after_its_failed_update(
    engine: Engine, proxy: TcpProxy, app_id: str, flavor: str, request: pytest.FixtureRequest
) -> None:
    assert REDIS_URL is not None
    writer = Writer(settings(engine, proxy.url(db_number()), WORKER_BASE + 3), flavor)
    reader = Reader(settings(engine, REDIS_URL, WORKER_BASE + 4), flavor)
    try:
        writer.append(app_id, "m0")
        assert reader.texts(app_id) == ["m0"]
        proxy.cut()
        started = writer.append(app_id, "m1")
        writer.kill()  # SIGKILL: its in-process list of windows to drop is gone
        proxy.restore()
        seconds = staleness(reader, app_id, "m1", started, limit=BOUND + 10)
        report(f"{request.node.callspec.id} writer killed", seconds)
        assert seconds <= BOUND + MARGIN
        assert reader.texts(app_id) == ["m0", "m1"]
    finally:
        writer.close()
        reader.close()


def test_a_stamp_nobody_could_apply_waits_for_redis(
    engine: Engine, proxy: TcpProxy, app_id: str
) -> None:
    """Redis unreachable for every instance: the stamp stays until one can drop the window,
    even for an instance that starts after the writer died."""
    assert REDIS_URL is not None
    reader_proxy = TcpProxy(proxy_target(), redis_port())
    writer = Writer(settings(engine, proxy.url(db_number()), WORKER_BASE + 5), "sync")
    reader = Reader(settings(engine, reader_proxy.url(db_number()), WORKER_BASE + 6), "sync")
    try:
        writer.append(app_id, "m0")
        assert reader.texts(app_id) == ["m0"]
        proxy.cut()
        reader_proxy.cut()
        writer.append(app_id, "m1")
        writer.kill()
        time.sleep(BOUND / 2)
        assert reader.texts(app_id) == ["m0", "m1"]  # a miss: served from SQL
        assert stamp_of(engine, app_id) is not None  # the reader could not drop it: kept
        assert raw_window_texts(app_id) == ["m0"]  # the stale window still sits in Redis

        late = Reader(settings(engine, REDIS_URL, WORKER_BASE + 7), "sync")
        try:
            assert late.texts(app_id) == ["m0", "m1"]  # its first read looks for stamps
        finally:
            late.close()
        assert stamp_of(engine, app_id) is None
    finally:
        writer.close()
        reader.close()
        reader_proxy.close()


def test_without_the_bound_the_stale_window_is_served_on(
    engine: Engine, proxy: TcpProxy, app_id: str
) -> None:
    """The control: with ``stale_window_max_seconds=0`` the window the writer could not
    update is still served after the bound (so the tests above can fail)."""
    if engine.dialect.name != "sqlite":
        pytest.skip("one database is enough for the control")
    assert REDIS_URL is not None
    writer = Writer(settings(engine, proxy.url(db_number()), WORKER_BASE + 8, 0), "sync")
    reader = Reader(settings(engine, REDIS_URL, WORKER_BASE + 9, 0), "sync")
    try:
        writer.append(app_id, "m0")
        assert reader.texts(app_id) == ["m0"]
        proxy.cut()
        started = writer.append(app_id, "m1")
        assert stamp_of(engine, app_id) is None
        assert staleness(reader, app_id, "m1", started, limit=BOUND + MARGIN) == float("inf")
    finally:
        writer.close()
        reader.close()


def proxy_target() -> str:
    assert REDIS_URL is not None
    return make_url(REDIS_URL.replace("redis://", "redis+x://", 1)).host or "127.0.0.1"


def redis_port() -> int:
    assert REDIS_URL is not None
    return make_url(REDIS_URL.replace("redis://", "redis+x://", 1)).port or 6379


def raw_window_texts(app_id: str) -> list[str]:
    from memstore.cache.base import decode_entries

    client: redis.Redis = redis_client()
    try:
        raw = client.lrange(keys.window_key(app_id), 0, -1)
    finally:
        client.close()
    return [m.text for m in decode_entries(raw)]  # type: ignore[misc]


def test_the_bound_holds_when_the_writer_link_hangs(
    engine: Engine, proxy: TcpProxy, app_id: str, request: pytest.FixtureRequest
) -> None:
    """The link forwards nothing (calls time out rather than fail at once): the stamp comes a
    Redis timeout later, still within the bound."""
    assert REDIS_URL is not None
    writer = Writer(settings(engine, proxy.url(db_number()), WORKER_BASE + 10), "sync")
    reader = Reader(settings(engine, REDIS_URL, WORKER_BASE + 11), "sync")
    try:
        writer.append(app_id, "m0")
        assert reader.texts(app_id) == ["m0"]
        proxy.freeze()
        started = writer.append(app_id, "m1")  # waits out the 0.3 s timeout, then stamps
        writer.kill()
        seconds = staleness(reader, app_id, "m1", started, limit=BOUND + 10)
        report(f"{request.node.callspec.id} link hangs", seconds)
        assert seconds <= BOUND + MARGIN
    finally:
        proxy.restore()
        writer.close()
        reader.close()
