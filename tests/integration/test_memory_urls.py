"""Every way of naming a SQLite database in memory is treated as one: ``sqlite://``,
``:memory:`` and ``file:`` URIs with ``mode=memory`` (a database private to its connection,
or to the process with ``cache=shared``)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from memstore import MemoryStore, Settings, UserMessage
from memstore.adapters._history import sync_twin
from memstore.aio import AsyncMemoryStore
from memstore.errors import ConfigurationError
from memstore.sql.engine import is_memory_sqlite


def memory_urls(driver: str = "sqlite") -> list[str]:
    name = uuid.uuid4().hex
    return [
        f"{driver}://",
        f"{driver}:///:memory:",
        f"{driver}:///file:{name}?mode=memory&uri=true",
        f"{driver}:///file:{name}-s?mode=memory&cache=shared&uri=true",
    ]


@pytest.mark.parametrize(
    ("url", "in_memory"),
    [
        *((url, True) for url in memory_urls()),
        *((url, True) for url in memory_urls("sqlite+aiosqlite")),
        ("sqlite:///memstore.db", False),
        ("sqlite:///file:memstore.db?uri=true", False),
        ("sqlite:///file:memstore.db?mode=ro&uri=true", False),
        ("postgresql+psycopg://u@h/memory", False),
    ],
)
def test_is_memory_sqlite(url: str, in_memory: bool) -> None:
    assert is_memory_sqlite(url) is in_memory


@pytest.mark.parametrize("url", memory_urls())
def test_a_memory_database_is_one_connection_every_thread_shares(url: str) -> None:
    with MemoryStore(Settings(database_url=url)) as store:
        store.migrate()
        store.append("a", [UserMessage(text="hi")])
        pool = store.engine.pool
        assert pool.size() == 1  # type: ignore[attr-defined]
        seen = asyncio.run(asyncio.to_thread(store.load_window, "a"))  # another thread
        assert [m.text for m in seen] == ["hi"]


@pytest.mark.parametrize("url", memory_urls("sqlite+aiosqlite"))
def test_no_sync_twin_of_an_async_store_in_memory(url: str) -> None:
    async def main() -> None:
        async with AsyncMemoryStore(Settings(database_url=url)) as store:
            with pytest.raises(ConfigurationError, match="in-memory SQLite"):
                sync_twin(store)

    asyncio.run(main())
