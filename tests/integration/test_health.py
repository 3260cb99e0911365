"""``health()`` against real failures: a private Redis killed or frozen, a database never (or
not fully) migrated, a database host that refuses or never answers; sync and async stores."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore import MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.reports import HealthReport
from memstore.sql import migrate
from memstore.sql.engine import make_engine
from memstore.sql.health import head_revision
from tests.integration.conftest import RedisServer, free_port

REDIS_TIMEOUT = 0.2
HEAD = head_revision()


def health(flavor: str, settings: Settings, timeout: float = 5.0) -> HealthReport:
    """One probe by a fresh store of ``flavor``, closed afterwards."""
    if flavor == "sync":
        with MemoryStore(settings) as store:
            return store.health(timeout)

    async def probe() -> HealthReport:
        async with AsyncMemoryStore(settings) as store:
            return await store.health(timeout)

    return asyncio.run(probe())


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'health.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def test_healthy_with_redis_then_not_ready_when_redis_dies(
    flavor: str, sqlite_url: str, private_redis: RedisServer
) -> None:
    settings = Settings(
        database_url=sqlite_url,
        redis_url=private_redis.url,
        redis_timeout_seconds=REDIS_TIMEOUT,
    )
    report = health(flavor, settings)
    assert report.ok, report
    assert report.cache.detail == "Redis answers PING"
    private_redis.stop()
    started = time.monotonic()
    report = health(flavor, settings)
    assert time.monotonic() - started < 2
    assert not report.ok and report.degraded
    assert report.database.status == "ok" and report.migrations.status == "ok"
    assert report.cache.status == "failed"
    assert report.cache.detail == "ConnectionError"
    assert private_redis.url not in str(report.model_dump())  # no URL in a reason


@pytest.mark.parametrize(
    ("path", "cause"),
    [("/99", "database index in the Redis URL is out of range")],
)
def test_a_redis_refusal_is_named_by_its_cause(
    flavor: str, sqlite_url: str, private_redis: RedisServer, path: str, cause: str
) -> None:
    settings = Settings(
        database_url=sqlite_url,
        redis_url=private_redis.url.rsplit("/", 1)[0] + path,
        redis_timeout_seconds=REDIS_TIMEOUT,
    )
    report = health(flavor, settings)
    assert report.cache.status == "failed" and report.cache.detail is not None
    assert cause in report.cache.detail, report.cache.detail


def test_a_frozen_redis_fails_within_the_socket_timeout(
    flavor: str, sqlite_url: str, private_redis: RedisServer
) -> None:
    settings = Settings(
        database_url=sqlite_url,
        redis_url=private_redis.url,
        redis_timeout_seconds=REDIS_TIMEOUT,
    )
    private_redis.pause()
    try:
        started = time.monotonic()
        report = health(flavor, settings, timeout=10)
        elapsed = time.monotonic() - started
    finally:
        private_redis.resume()
    assert elapsed < 2, elapsed  # the cache's socket timeout bounds it, not the 10 s
    assert report.cache.status == "failed" and report.degraded
    assert report.cache.detail is not None and "Timeout" in report.cache.detail


@pytest.mark.parametrize("scratch_database_url", ["sqlite", "postgres", "mysql"], indirect=True)
def test_unmigrated_then_behind_then_at_head(flavor: str, scratch_database_url: str) -> None:
    settings = Settings(database_url=scratch_database_url)
    report = health(flavor, settings)
    assert not report.ok and not report.degraded
    assert report.database.status == "ok"
    assert report.migrations.status == "failed"
    assert report.migrations.detail == "not migrated: run `memstore migrate`"
    assert report.lease.status == "skipped"
    engine = make_engine(scratch_database_url)
    try:
        migrate.upgrade(engine, "0005")
        report = health(flavor, settings)
        assert report.migrations.status == "failed"
        assert report.migrations.detail is not None
        assert report.migrations.detail.startswith(f"at revision 0005, head is {HEAD}")
        migrate.upgrade(engine)
        report = health(flavor, settings)
        assert report.ok, report
        assert report.lease.status == "ok"  # none held yet: an id is free to claim
        assert report.lease.detail is not None and "no lease held yet" in report.lease.detail
        with engine.begin() as conn:  # what a newer memstore's migration leaves
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
        try:
            report = health(flavor, settings)
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{HEAD}'")
        assert report.ok, report  # the previous version stays ready during an upgrade
        assert (
            report.migrations.detail == f"at revision 9999, newer than this memstore's head {HEAD}"
        )
    finally:
        migrate.downgrade(engine, "base")
        engine.dispose()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections (the kernel's backlog) but never says a
    word: a database host that hangs rather than refuses."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.mark.parametrize("driver", ["postgresql+psycopg", "mysql+pymysql"])
def test_a_database_that_never_answers_fails_within_the_timeout(
    flavor: str, driver: str, silent_port: int
) -> None:
    settings = Settings(database_url=f"{driver}://memstore:secret@127.0.0.1:{silent_port}/db")
    started = time.monotonic()
    report = health(flavor, settings, timeout=1)
    elapsed = time.monotonic() - started
    assert elapsed < 3, elapsed
    assert not report.ok and not report.degraded
    assert report.database.status == "failed"
    assert report.database.detail == "no answer within 1s"
    assert report.migrations.status == "skipped"
    assert report.cache.status == "ok"  # the in-process cache
    assert "secret" not in str(report.model_dump())


@pytest.mark.parametrize("driver", ["postgresql+psycopg", "mysql+pymysql"])
def test_a_refused_database_fails_fast_by_kind(flavor: str, driver: str) -> None:
    port = free_port()  # nothing listens there
    settings = Settings(database_url=f"{driver}://memstore:secret@127.0.0.1:{port}/db")
    started = time.monotonic()
    report = health(flavor, settings)
    assert time.monotonic() - started < 3
    assert report.database.status == "failed"
    assert report.database.detail == "connection failed"
    assert "secret" not in str(report.model_dump())


def _lapse(store: Any, seconds: float) -> None:
    lease = store._lease
    store._lease = dataclasses.replace(lease, renewed_at=lease.renewed_at - seconds)


def test_a_held_lease_is_healthy_until_its_renewals_are_overdue(sqlite_url: str) -> None:
    settings = Settings(database_url=sqlite_url, worker_id="auto", worker_lease_seconds=30)
    with MemoryStore(settings) as store:
        store.append("health-lease", [UserMessage(text="claims a lease")])
        report = store.health()
        assert report.ok and report.lease.status == "ok"
        assert report.lease.detail == f"worker id {store.worker_id}, renewed 0s ago"
        _lapse(store, 21)  # two heartbeats (every 10 s) missed
        report = store.health()
        assert not report.ok and report.lease.status == "failed"
        assert report.lease.detail is not None and "renewal overdue" in report.lease.detail
        _lapse(store, 10)  # past the lease's usable end
        report = store.health()
        assert report.lease.detail is not None and "may have lapsed" in report.lease.detail
        store.append("health-lease", [UserMessage(text="renews first")])
        assert store.health().ok
        assert store.metrics()["lease_renewals"] == 1


def test_an_async_lease_is_checked_alike(sqlite_url: str) -> None:
    settings = Settings(database_url=sqlite_url, worker_id="auto", worker_lease_seconds=30)

    async def scenario() -> tuple[HealthReport, HealthReport]:
        async with AsyncMemoryStore(settings) as store:
            await store.append("health-lease", [UserMessage(text="claims a lease")])
            healthy = await store.health()
            _lapse(store, 31)
            return healthy, await store.health()

    healthy, lapsed = asyncio.run(scenario())
    assert healthy.ok and healthy.lease.status == "ok"
    assert lapsed.lease.status == "failed" and not lapsed.ok


def test_every_worker_id_leased_is_not_ready(sqlite_url: str) -> None:
    settings = Settings(database_url=sqlite_url, worker_id="auto", worker_lease_seconds=600)
    engine = make_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO worker_leases (worker_id, holder, epoch, expires_at_ms, last_ms) "
                "VALUES " + ", ".join(f"({i}, 'other', 1, 99999999999999, 0)" for i in range(1024))
            )
        with MemoryStore(settings) as store:
            report = store.health()
        assert report.lease.status == "failed"
        assert report.lease.detail is not None
        assert report.lease.detail.startswith("all 1024 worker ids are leased")
        assert not report.ok and not report.degraded
    finally:
        engine.dispose()


def test_fixed_worker_id_skips_the_lease(sqlite_url: str) -> None:
    with MemoryStore(Settings(database_url=sqlite_url, worker_id=7)) as store:
        report = store.health()
    assert report.ok
    assert report.lease.status == "skipped" and report.lease.detail == "fixed worker id 7: no lease"


def test_reads_while_redis_is_down_are_misses_without_rebuilds(
    flavor: str, sqlite_url: str, private_redis: RedisServer
) -> None:
    settings = Settings(
        database_url=sqlite_url,
        redis_url=private_redis.url,
        redis_timeout_seconds=REDIS_TIMEOUT,
        worker_id=5,
    )

    async def reads(store: Any) -> tuple[dict[str, int], dict[str, int]]:
        memory = store.memory("health-down")
        await store.append("health-down", [UserMessage(text="hi")])
        await memory.messages()
        await memory.messages()
        up = store.metrics()
        private_redis.stop()
        await memory.messages()
        return up, store.metrics()

    if flavor == "sync":
        with MemoryStore(settings) as sync_store:
            memory = sync_store.memory("health-down")
            sync_store.append("health-down", [UserMessage(text="hi")])
            memory.messages()
            memory.messages()
            up = sync_store.metrics()
            private_redis.stop()
            assert memory.messages() == [UserMessage(text="hi")]  # from SQL
            down = sync_store.metrics()
    else:

        async def run() -> tuple[dict[str, int], dict[str, int]]:
            async with AsyncMemoryStore(settings) as store:
                return await reads(store)

        up, down = asyncio.run(run())
    assert (up["cache_misses"], up["cache_rebuilds"], up["cache_hits"]) == (1, 1, 1)
    assert (down["cache_misses"], down["cache_rebuilds"], down["cache_hits"]) == (2, 1, 1)
