"""The asyncio twin of :mod:`memstore.sql.repository`: same statements, awaited.

URLs are mapped to an asyncio driver: ``sqlite`` -> aiosqlite, ``postgresql`` -> psycopg 3
(async mode), ``mysql``/``mariadb`` -> asyncmy. An explicit async driver
(``postgresql+asyncpg``, ``mysql+aiomysql``...) is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from memstore.core.loader import RowRequest
from memstore.core.window import StoredMessage
from memstore.reports import DisplayEntry
from memstore.sql import generation
from memstore.sql.engine import install_sqlite_pragmas, sqlite_options, translated_errors
from memstore.sql.generation import GenerationStep
from memstore.sql.repository import (
    REQUEST_SCAN_PAGE,
    display_entry,
    history_query,
    newest_rows_query,
    purge_statements,
    request_scan_query,
    requested_ids_in,
    rows_to_messages,
)
from memstore.sql.schema import display, original

_ASYNC_DRIVERS = {
    "sqlite": "aiosqlite",
    "postgresql": "psycopg",
    "mysql": "asyncmy",
    "mariadb": "aiomysql",
}
_SYNC_ONLY = {"pysqlite", "psycopg2", "pymysql", "mysqldb", "mysqlconnector", ""}


def async_url(url: str) -> URL:
    """``url`` with an asyncio driver (see the module docstring)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    driver = parsed.get_driver_name() if "+" in parsed.drivername else ""
    if driver in _SYNC_ONLY or driver == _ASYNC_DRIVERS.get(backend):
        parsed = parsed.set(drivername=f"{backend}+{_ASYNC_DRIVERS[backend]}")
    return parsed


def make_async_engine(url: str) -> AsyncEngine:
    """An async engine with the same per-database settings as :func:`make_engine`."""
    target = async_url(url)
    if target.get_backend_name() != "sqlite":
        return create_async_engine(target, pool_pre_ping=True)
    engine = create_async_engine(target, **sqlite_options(target))
    install_sqlite_pragmas(engine.sync_engine, target)
    return engine


class AsyncSqlHistory:
    """The two history tables on one async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def fetch(self, app_id: str, request: RowRequest) -> list[StoredMessage]:
        with translated_errors("reading history"):
            async with self.engine.connect() as conn:
                result = await conn.execute(newest_rows_query(app_id, request))
                return rows_to_messages(result.all())

    async def insert(
        self,
        app_id: str,
        original_rows: Sequence[dict[str, Any]],
        display_rows: Sequence[dict[str, Any]],
        unresolved_call_ids: set[str],
    ) -> tuple[set[str], GenerationStep | None]:
        """See :meth:`memstore.sql.repository.SqlHistory.insert`."""
        with translated_errors("writing history"):
            async with self.engine.begin() as conn:
                missing = await self._unrequested(conn, app_id, unresolved_call_ids)
                if missing:
                    return missing, None
                step = None
                if original_rows:
                    step = await generation.abump(conn, app_id)
                    await conn.execute(original.insert(), list(original_rows))
                if display_rows:
                    await conn.execute(display.insert(), list(display_rows))
                return set(), step

    async def generation(self, app_id: str) -> int:
        """See :meth:`memstore.sql.repository.SqlHistory.generation`."""
        with translated_errors("reading history"):
            async with self.engine.connect() as conn:
                return await generation.aread(conn, app_id)

    @staticmethod
    async def _unrequested(conn: AsyncConnection, app_id: str, call_ids: set[str]) -> set[str]:
        missing = set(call_ids)
        before: int | None = None
        while missing:
            page = (await conn.execute(request_scan_query(app_id, before))).all()
            for row in page:
                missing.difference_update(requested_ids_in(row.payload))
            if len(page) < REQUEST_SCAN_PAGE:
                break
            before = page[-1].id
        return missing

    async def history(self, app_id: str, limit: int, before_id: int | None) -> list[DisplayEntry]:
        with translated_errors("reading display history"):
            async with self.engine.connect() as conn:
                result = await conn.execute(history_query(app_id, limit, before_id))
                return [display_entry(row) for row in result.all()]

    async def purge(self, app_id: str) -> tuple[int, int, int]:
        with translated_errors("purging history"):
            async with self.engine.begin() as conn:
                await generation.abump(conn, app_id)
                counts = [
                    (await conn.execute(statement)).rowcount
                    for statement in purge_statements(app_id)
                ]
                return counts[0], counts[1], counts[2]
