"""Several processes on one database, each with its own in-process window cache (the embedded
default, as gunicorn workers run it): a read never misses a write another process committed.
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from memstore import MemoryStore, Settings, UserMessage, operations
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.core.check import REPAIR_MARK
from memstore.messages import AiMessage, ToolRequest
from tests.conftest import SESSION_WORKER_ID, migrated_engine
from tests.integration.cache_worker import serve


class Worker:
    """One child process serving a store over a pipe."""

    def __init__(self, url: str, worker_id: int, flavor: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=serve, args=(child, url, worker_id, flavor))
        self._process.start()

    def call(self, command: str, app_id: str, text: str = "") -> Any:
        self._conn.send((command, app_id, text))
        if not self._conn.poll(60):
            raise AssertionError(f"worker did not answer {command}")
        status, value = self._conn.recv()
        assert status == "ok", value
        return value

    def close(self) -> None:
        self._conn.send(("close", "", ""))
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    engine = migrated_engine(request.param, tmp_path_factory)  # skips when the URL is not set
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture(params=["sync", "async"])
def workers(request: pytest.FixtureRequest, db_url: str) -> Iterator[tuple[Worker, Worker]]:
    base = (SESSION_WORKER_ID + 100) % 1000
    pair = (Worker(db_url, base + 1, request.param), Worker(db_url, base + 2, request.param))
    try:
        yield pair
    finally:
        for worker in pair:
            worker.close()


def test_alternating_processes_read_every_committed_write(
    workers: tuple[Worker, Worker],
) -> None:
    app = f"mp-{uuid.uuid4().hex[:12]}"
    first, second = workers
    expected: list[str] = []
    for turn in range(6):
        writer, reader = (first, second) if turn % 2 == 0 else (second, first)
        assert reader.call("read", app) == expected  # the reader caches its window
        text = f"turn {turn}"
        writer.call("append", app, text)
        expected.append(text)
        assert reader.call("read", app) == expected
        assert writer.call("read", app) == expected
    # An append on a window that missed another process's write does not stack on it.
    first.call("append", app, "from first")
    second.call("append", app, "from second")
    expected += ["from first", "from second"]
    assert second.call("read", app) == expected
    assert first.call("read", app) == expected


def test_a_purge_by_another_process_is_never_served_stale(
    workers: tuple[Worker, Worker],
) -> None:
    app = f"mp-{uuid.uuid4().hex[:12]}"
    first, second = workers
    first.call("append", app, "before purge 1")
    first.call("append", app, "before purge 2")
    assert first.call("read", app) == ["before purge 1", "before purge 2"]
    second.call("purge", app)  # the operator's purge (CLI) in another process
    assert first.call("read", app) == []
    second.call("append", app, "after purge")
    assert first.call("read", app) == ["after purge"]
    first.call("append", app, "again")
    second.call("purge", app)
    second.call("append", app, "new 1")
    second.call("append", app, "new 2")
    assert first.call("read", app) == ["new 1", "new 2"]


@pytest.fixture
def two_stores(db_url: str) -> Iterator[tuple[MemoryStore, MemoryStore]]:
    """Two stores in this process, each with its own in-process cache: as two processes."""
    stores = [
        MemoryStore(Settings(database_url=db_url, worker_id=(SESSION_WORKER_ID + n) % 1024))
        for n in (200, 201)
    ]
    yield stores[0], stores[1]
    for store in stores:
        store.close()


def test_a_repair_by_another_process_is_never_served_stale(
    two_stores: tuple[MemoryStore, MemoryStore],
) -> None:
    server, operator = two_stores
    assert isinstance(server.cache, InProcessWindowCache)
    app = f"mp-{uuid.uuid4().hex[:12]}"
    request = ToolRequest(id="call_1", name="send_email", arguments="{}")
    server.append(app, [UserMessage(text="mail bob"), AiMessage(tool_requests=[request])])
    before = server.memory(app).messages()
    assert REPAIR_MARK not in before[-1].metadata  # the loader's interrupted answer
    operations.repair_app(operator, app)
    after = server.memory(app).messages()
    assert after[-1].metadata.get(REPAIR_MARK) == "interrupted"


def test_a_private_in_memory_database_reads_no_generation() -> None:
    """Nobody else can write to it, so the window is served without a SQL round trip."""
    with MemoryStore(Settings(database_url="sqlite:///:memory:")) as store:
        store.migrate()
        store.append("a", [UserMessage(text="hi")])
        store.memory("a").messages()
        store.engine.dispose()  # a SQL read would now need a new (empty) database
        assert [m.text for m in store.memory("a").messages()] == ["hi"]  # type: ignore[union-attr]


def test_a_shared_engine_is_checked(tmp_path_factory: pytest.TempPathFactory) -> None:
    engine = migrated_engine("sqlite", tmp_path_factory)
    settings = Settings(database_url=str(engine.url), worker_id=SESSION_WORKER_ID)
    policy = WindowPolicy.from_settings(settings)
    first = MemoryStore(settings, engine=engine, cache=InProcessWindowCache(policy))
    second = MemoryStore(settings, engine=engine, cache=InProcessWindowCache(policy))
    app = f"mp-{uuid.uuid4().hex[:12]}"
    first.append(app, [UserMessage(text="one")])
    assert len(first.memory(app).messages()) == 1
    second.append(app, [UserMessage(text="two")])
    assert [m.text for m in first.memory(app).messages()] == ["one", "two"]  # type: ignore[union-attr]
