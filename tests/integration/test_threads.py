"""Thread and task safety on every URL, ``sqlite:///:memory:`` included (issue 9, item 2), and
``file:`` URIs with ``mode=memory`` (each thread had a database of its own before they were
recognized as memory databases).

Before the fix, an in-memory SQLite store handed its one connection to every thread at once:
transactions of different threads interleaved on it and the sqlite3 module raised
``SystemError``/``StorageError`` or crashed the process. Each scenario is run several times so
the race is near certain to show.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.core.validate import validate
from memstore.messages import Message
from tests.conftest import MYSQL_URL, POSTGRES_URL, SESSION_WORKER_ID

THREADS = 4
TURNS = 15
ROUNDS = 3


def turn(n: int) -> list[Message]:
    call = f"c-{n}-{uuid.uuid4().hex[:6]}"
    return [
        UserMessage(text=f"question {n}"),
        AiMessage(tool_requests=[ToolRequest(id=call, name="lookup", arguments='{"n": 1}')]),
        ToolResult(id=call, tool_name="lookup", text=f"result {n}"),
        AiMessage(text=f"answer {n}"),
    ]


def assert_complete(window: list[Message], turns: int) -> None:
    assert len(window) == 4 * turns
    assert [m.text for m in window if isinstance(m, UserMessage)] == [
        f"question {n}" for n in range(turns)
    ]
    assert validate(window, "openai") == []


def url_for(name: str, tmp_path: Path) -> str:
    if name == "memory":
        return "sqlite:///:memory:"
    if name.startswith("memory-uri"):  # a file: URI naming a memory database
        shared = "&cache=shared" if name.endswith("shared") else ""
        return f"sqlite:///file:threads-{uuid.uuid4().hex}?mode=memory{shared}&uri=true"
    if name == "file":
        return f"sqlite:///{tmp_path / 'threads.db'}"
    url = POSTGRES_URL if name == "postgres" else MYSQL_URL
    if not url:
        pytest.skip(f"MEMSTORE_TEST_{name.upper()}_URL is not set")
    return url


def append_from_threads(store: MemoryStore) -> None:
    apps = [f"thread-{uuid.uuid4().hex[:10]}" for _ in range(THREADS)]
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def writer(app: str) -> None:
        try:
            start.wait()
            for n in range(TURNS):
                store.append(app, turn(n), user_id="u")
                store.memory(app).messages()  # reads interleave with the writes
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for app in apps:
        assert_complete(store.load_window(app, 1000), TURNS)
        assert_complete(store.memory(app).messages(), TURNS)
        assert len(store.history(app, limit=1000)) == TURNS * 2  # user row + ai row


@pytest.mark.parametrize(
    "database", ["memory", "memory-uri", "memory-uri-shared", "file", "postgres", "mysql"]
)
def test_threads_appending_at_once_lose_nothing(database: str, tmp_path: Path) -> None:
    for _ in range(ROUNDS):
        settings = Settings(database_url=url_for(database, tmp_path), worker_id=SESSION_WORKER_ID)
        with MemoryStore(settings) as store:
            store.migrate()
            append_from_threads(store)


def test_async_tasks_on_an_in_memory_database_lose_nothing() -> None:
    async def main() -> None:
        settings = Settings(database_url="sqlite:///:memory:", worker_id=SESSION_WORKER_ID)
        async with AsyncMemoryStore(settings) as store:
            await store.migrate()
            apps = [f"task-{uuid.uuid4().hex[:10]}" for _ in range(THREADS)]

            async def writer(app: str) -> None:
                for n in range(TURNS):
                    await store.append(app, turn(n))
                    await store.memory(app).messages()

            await asyncio.gather(*(writer(app) for app in apps))
            for app in apps:
                assert_complete(await store.load_window(app, 1000), TURNS)
                assert_complete(await store.memory(app).messages(), TURNS)

    for _ in range(ROUNDS):
        asyncio.run(main())


def test_sync_store_through_asyncio_to_thread_on_an_in_memory_database() -> None:
    """What the OpenAI Agents session does with a sync store."""

    async def main(store: MemoryStore) -> None:
        apps = [f"to-thread-{uuid.uuid4().hex[:10]}" for _ in range(THREADS)]

        async def writer(app: str) -> None:
            for n in range(TURNS):
                await asyncio.to_thread(store.append, app, turn(n))
                await asyncio.to_thread(store.load_window, app, 100)

        await asyncio.gather(*(writer(app) for app in apps))
        for app in apps:
            assert_complete(store.load_window(app, 1000), TURNS)

    for _ in range(ROUNDS):
        settings = Settings(database_url="sqlite:///:memory:", worker_id=SESSION_WORKER_ID)
        with MemoryStore(settings) as store:
            store.migrate()
            asyncio.run(main(store))
