"""The asyncio twin of :mod:`memstore.sql.repository`: same statements, awaited.

URLs are mapped to an asyncio driver: ``sqlite`` -> aiosqlite, ``postgresql`` -> psycopg 3
(async mode), ``mysql``/``mariadb`` -> asyncmy. An explicit async driver
(``postgresql+asyncpg``, ``mysql+aiomysql``...) is kept.
"""

from __future__ import annotations

import logging

from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from memstore.core.id_order import newest_of
from memstore.core.loader import RowRequest
from memstore.core.plans import IdIssuer, WritePlan, rows_with_ids, unknown_call_error
from memstore.core.window import StoredMessage
from memstore.reports import DisplayEntry
from memstore.sql import generation
from memstore.sql.engine import (
    ENGINE_OPTIONS,
    install_sqlite_pragmas,
    sqlite_options,
    translated_errors,
)
from memstore.sql.generation import GenerationStep
from memstore.sql.repository import (
    REQUEST_SCAN_PAGE,
    ChainCheck,
    adapter_record_deletes,
    display_entry,
    history_query,
    latest_summary_query,
    newest_id_query,
    purge_statements,
    request_scan_query,
    requested_ids_in,
    rows_to_messages,
    window_rows_statement,
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


class _NoStatementArguments(logging.Filter):
    """aiosqlite logs every call it runs at DEBUG, SQL parameters (chat text) included; keep
    the record and name the operation only."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args and isinstance(record.args, tuple):
            record.args = tuple(
                arg if isinstance(arg, BaseException) else _operation_name(arg)
                for arg in record.args
            )
        return True


def _operation_name(value: object) -> str:
    target = getattr(value, "func", value)
    return str(getattr(target, "__qualname__", type(target).__name__))


_AIOSQLITE_FILTER = _NoStatementArguments()


def make_async_engine(url: str) -> AsyncEngine:
    """An async engine with the same per-database settings as :func:`make_engine`."""
    target = async_url(url)
    if target.get_backend_name() != "sqlite":
        return create_async_engine(target, pool_pre_ping=True, **ENGINE_OPTIONS)
    if target.get_driver_name() == "aiosqlite":
        logging.getLogger("aiosqlite").addFilter(_AIOSQLITE_FILTER)  # a set: added once
    engine = create_async_engine(target, **ENGINE_OPTIONS, **sqlite_options(target, is_async=True))
    install_sqlite_pragmas(engine.sync_engine, target)
    return engine


class AsyncSqlHistory:
    """The two history tables on one async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def fetch(self, app_id: str, request: RowRequest) -> list[StoredMessage]:
        with translated_errors("reading history"):
            async with self.engine.connect() as conn:
                result = await conn.execute(*window_rows_statement(app_id, request))
                return rows_to_messages(result.all())

    async def insert(
        self, app_id: str, plan: WritePlan, issue_ids: IdIssuer, chain: ChainCheck | None = None
    ) -> tuple[list[int], GenerationStep | None]:
        """See :meth:`memstore.sql.repository.SqlHistory.insert`."""
        if not plan.id_count:
            return [], None
        with translated_errors("writing history"):
            async with self.engine.begin() as conn:
                step = await generation.abump(conn, app_id)
                if chain is not None:
                    chain.check((await conn.execute(latest_summary_query(app_id))).scalar())
                newest = (await conn.execute(newest_id_query(app_id))).one()
                ids = issue_ids(plan.id_count, newest_of(*newest))
                missing = await self._unrequested(
                    conn, app_id, plan.unresolved_call_ids, below=ids[0]
                )
                if missing:
                    raise unknown_call_error(app_id, missing)
                original_rows, display_rows = rows_with_ids(plan, ids)
                if original_rows:
                    await conn.execute(original.insert(), original_rows)
                if display_rows:
                    await conn.execute(display.insert(), display_rows)
                return ids[: len(original_rows)], step

    async def generation(self, app_id: str) -> int:
        """See :meth:`memstore.sql.repository.SqlHistory.generation`."""
        with translated_errors("reading history"):
            async with self.engine.connect() as conn:
                return await generation.aread(conn, app_id)

    @staticmethod
    async def _unrequested(
        conn: AsyncConnection, app_id: str, call_ids: set[str], below: int
    ) -> set[str]:
        missing = set(call_ids)
        before = below
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
                await generation.abump(conn, app_id)  # first: waits for the app's writers
                counts = [
                    (await conn.execute(statement)).rowcount
                    for statement in purge_statements(app_id)
                ]
                for statement in adapter_record_deletes(app_id):
                    await conn.execute(statement)
                return counts[0], counts[1], counts[2]
