"""The async store's window reads on the event loop (``memstore.sql.inline_read``, issue 14).

A read on a SQLite file runs on the calling thread when it can take its locks at once, and
must then give exactly the window aiosqlite's thread gives, see every committed write, never
make the event loop wait for another connection's lock, and fail with the same typed errors.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import StaticPool

from memstore import AiMessage, MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.errors import SchemaError
from memstore.sql.aio import make_async_engine
from memstore.sql.inline_read import InlineSqliteReads
from tests.conftest import SESSION_WORKER_ID
from tests.integration.test_fast_read import random_turns


def file_url(tmp_path: Path, name: str = "inline.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def seeded(url: str, turns: int = 40, seed: int = 3) -> MemoryStore:
    store = MemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
    store.migrate()
    for turn in random_turns(random.Random(seed), turns):
        store.append("app", turn)
    return store


def test_inline_reads_give_the_windows_the_aiosqlite_thread_gives(tmp_path: Path) -> None:
    url = file_url(tmp_path)
    sync_store = seeded(url)

    async def main() -> None:
        inline = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        threaded = AsyncMemoryStore(
            Settings(
                database_url=url,
                worker_id=SESSION_WORKER_ID,
                async_sqlite_inline_reads=False,
                decoded_rows_cache_mb=0,
            )
        )
        try:
            assert inline.inline_reads is not None and threaded.inline_reads is None
            for size in (1, 2, 3, 7, 12, 25, 50, 500):
                for start_at_user in (False, True):
                    want = sync_store.load_window("app", size, start_at_user=start_at_user)
                    assert want or size < 50
                    got = await inline.load_window("app", size, start_at_user=start_at_user)
                    assert got == want
                    assert (
                        await threaded.load_window("app", size, start_at_user=start_at_user) == want
                    )
            assert inline.inline_reads.served >= 16
            assert inline.inline_reads.passed_on == 0
        finally:
            await inline.close()
            await threaded.close()

    try:
        asyncio.run(main())
    finally:
        sync_store.close()


def test_an_inline_read_sees_what_another_connection_just_committed(tmp_path: Path) -> None:
    url = file_url(tmp_path)
    writer = seeded(url, turns=3)

    async def main() -> None:
        store = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        try:
            for n in range(20):
                writer.append("app", [UserMessage(text=f"q{n}"), AiMessage(text=f"a{n}")])
                window = await store.load_window("app", 4)
                assert window[-2:] == [UserMessage(text=f"q{n}"), AiMessage(text=f"a{n}")]
                # and the store's own async writes, read back on the loop
                await store.append("app", [UserMessage(text=f"own{n}")])
                assert (await store.load_window("app", 1)) == [UserMessage(text=f"own{n}")]
            assert store.inline_reads is not None and store.inline_reads.served >= 40
        finally:
            await store.close()

    try:
        asyncio.run(main())
    finally:
        writer.close()


def test_a_read_that_would_wait_goes_to_the_thread_and_the_loop_runs_on(
    tmp_path: Path,
) -> None:
    url = file_url(tmp_path)
    writer = seeded(url, turns=10)
    want = writer.load_window("app", 20)
    writer.close()  # every other connection closed: the blocker may lock the file alone
    blocker = sqlite3.connect(str(tmp_path / "inline.db"), check_same_thread=False)
    blocker.isolation_level = None
    blocker.execute("PRAGMA locking_mode=EXCLUSIVE")
    blocker.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.6, blocker.close)

    async def main() -> None:
        store = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        try:
            release.start()
            window = await store.load_window("app", 20)
            assert window == want
            assert ticks >= 20  # the loop ran all the while the read waited for the lock
            assert store.inline_reads is not None and store.inline_reads.passed_on >= 1
            served = store.inline_reads.served
            assert await store.load_window("app", 20) == want  # the lock is gone: inline again
            assert store.inline_reads.served == served + 1
        finally:
            ticking.cancel()
            await store.close()

    try:
        asyncio.run(main())
    finally:
        release.cancel()
        blocker.close()


def test_a_failed_inline_read_raises_the_same_typed_error(tmp_path: Path) -> None:
    url = file_url(tmp_path, "empty.db")
    sqlite3.connect(str(tmp_path / "empty.db")).close()  # a database without memstore's tables

    async def main() -> None:
        store = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        try:
            for _ in range(2):
                with pytest.raises(SchemaError):
                    await store.load_window("app", 10)
            assert store.inline_reads is not None
            assert store.inline_reads.passed_on == 2 and store.inline_reads.served == 0
            # the tables appear: the next read runs inline
            seeded(url, turns=2).close()
            assert await store.load_window("app", 10)
            assert store.inline_reads.served == 1
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_databases_in_memory_are_never_read_inline(url: str) -> None:
    async def main() -> None:
        store = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        try:
            assert store.inline_reads is None
            await store.migrate()
            await store.append("app", [UserMessage(text="hi"), AiMessage(text="hello")])
            assert await store.load_window("app", 5) == [
                UserMessage(text="hi"),
                AiMessage(text="hello"),
            ]
        finally:
            await store.close()

    asyncio.run(main())


def test_closing_closes_every_threads_connection(tmp_path: Path) -> None:
    url = file_url(tmp_path)
    seeded(url, turns=2).close()

    async def main() -> None:
        store = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        inline = store.inline_reads
        assert inline is not None
        await store.load_window("app", 5)
        # a second thread reads with its own connection
        other = threading.Thread(target=lambda: asyncio.run(store.load_window("app", 5)))
        other.start()
        other.join()
        assert inline.served == 2
        await store.close()
        assert inline.read([("SELECT 1", ())]) is None  # closed: passed on

    asyncio.run(main())
    # nothing holds the file: it can be taken exclusively
    check = sqlite3.connect(str(tmp_path / "inline.db"), timeout=0, isolation_level=None)
    check.execute("PRAGMA locking_mode=EXCLUSIVE")
    check.execute("BEGIN EXCLUSIVE")
    check.execute("COMMIT")
    check.close()


def test_engines_other_than_aiosqlite_on_a_file_get_none(tmp_path: Path) -> None:
    engine = make_async_engine(file_url(tmp_path))
    assert InlineSqliteReads.for_engine(engine) is not None
    shared_memory = create_async_engine(
        "sqlite+aiosqlite:///file:inline_mem?mode=memory&cache=shared&uri=true",
        poolclass=StaticPool,
    )
    assert InlineSqliteReads.for_engine(shared_memory) is None
    assert InlineSqliteReads.for_engine(make_async_engine("postgresql://u@127.0.0.1:1/x")) is None
    for made in (engine, shared_memory):
        asyncio.run(made.dispose())
