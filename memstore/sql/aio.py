"""The asyncio form of :mod:`memstore.sql.repository`: the same statement steps
(:mod:`memstore.sql.runners`), awaited.

URLs are mapped to an asyncio driver: ``sqlite`` -> aiosqlite, ``postgresql`` -> psycopg 3
(async mode), ``mysql``/``mariadb`` -> asyncmy. An explicit async driver
(``postgresql+asyncpg``, ``mysql+aiomysql``...) is kept.

Importing this module needs greenlet, on which SQLAlchemy's asyncio layer runs (the ``async``
and ``asyncpg`` extras install it); without it the import raises
:class:`~memstore.errors.MissingExtraError`. It is the only module that loads
``sqlalchemy.ext.asyncio`` at run time; the others name its types for annotations only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_only, greenlet_spawn
from sqlalchemy.util.concurrency import in_greenlet

from memstore.extras import needs_extra

with needs_extra("AsyncMemoryStore", "async"):
    # SQLAlchemy 2.1 checks for greenlet when its asyncio layer is imported, 2.0 only when a
    # statement first runs: ask for it here, so both fail at once, typed.
    import greenlet  # noqa: F401
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from memstore.core.crypto import RowCipher
from memstore.core.loader import RowRequest
from memstore.core.plans import IdIssuer, WritePlan
from memstore.core.row_memo import NO_MEMO, RowMemo
from memstore.core.rows import FetchedRows
from memstore.reports import DisplayEntry
from memstore.sql import generation
from memstore.sql.direct import (
    DirectArgs,
    aiosqlite_write,
    arun_direct_retrying,
    direct_statements,
    runs_on_aiosqlite,
)
from memstore.sql.engine import (
    ENGINE_OPTIONS,
    commit_failed,
    driver_imports,
    install_idle_ping,
    install_sqlite_pragmas,
    is_dead_connection,
    no_ids,
    read_options,
    sqlite_options,
    translated_errors,
)
from memstore.sql.fastread import (
    aread_rows,
    async_fast_reads,
    lookahead_rows,
    splits_summary,
    window_read,
)
from memstore.sql.generation import GenerationStep
from memstore.sql.inline_read import InlineSqliteReads
from memstore.sql.queries import (
    ChainCheck,
    display_entry,
    history_query,
    window_rows_statement,
    written_ids,
)
from memstore.sql.repository import insert_steps, purge_steps, was_committed
from memstore.sql.runners import arun_connected, arun_steps

_ASYNC_DRIVERS = {
    "sqlite": "aiosqlite",
    "postgresql": "psycopg",
    "mysql": "asyncmy",
    "mariadb": "asyncmy",
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
logger = logging.getLogger("memstore")


def make_async_engine(url: str) -> AsyncEngine:
    """An async engine with the same per-database settings as :func:`make_engine`."""
    target = async_url(url)
    with driver_imports(target, "AsyncMemoryStore"):
        if target.get_backend_name() != "sqlite":
            engine = create_async_engine(target, **ENGINE_OPTIONS)
            install_idle_ping(engine.sync_engine)
            return engine
        options = sqlite_options(target, is_async=True)
        engine = create_async_engine(target, **ENGINE_OPTIONS, **options)
    if target.get_driver_name() == "aiosqlite":
        logging.getLogger("aiosqlite").addFilter(_AIOSQLITE_FILTER)  # a set: added once
        install_rollback_on_invalidate(engine)
    install_sqlite_pragmas(engine.sync_engine, target)
    return engine


class LentConnections:
    """The connections an async engine has lent out and not yet had back.

    A task cancelled at an unlucky point (while the event loop ends, say) can leave its
    connection checked out, and the garbage collector finds it later, when the loop that
    could close it is gone. The store's loop, as it ends, invalidates those here first.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._lent: set[ConnectionPoolEntry] = set()
        event.listen(engine.sync_engine, "checkout", self._lend)
        event.listen(engine.sync_engine, "checkin", self._return)

    def _lend(self, _dbapi_connection: Any, entry: ConnectionPoolEntry, _proxy: Any) -> None:
        self._lent.add(entry)

    def _return(self, _dbapi_connection: Any, entry: ConnectionPoolEntry) -> None:
        self._lent.discard(entry)

    async def invalidate_stranded(self) -> int:
        """Close every connection still lent out (call when no task can be using one: the
        loop's tasks have ended); how many there were."""
        stranded = [entry for entry in self._lent if entry.in_use]
        self._lent.clear()
        for entry in stranded:
            with contextlib.suppress(Exception):
                await greenlet_spawn(entry.invalidate)
        return len(stranded)


def install_rollback_on_invalidate(engine: AsyncEngine) -> None:
    """Roll an aiosqlite connection back before SQLAlchemy drops it.

    A task cancelled inside a transaction makes SQLAlchemy invalidate its connection, and
    aiosqlite closes it with the transaction open; when a cursor of it is still alive, SQLite
    keeps the closed connection, and its write lock, until that cursor is garbage-collected,
    so every other connection and process finds the database busy. The rollback runs on the
    connection's own thread, after any statement still running there and before the close, and
    releases the lock at once. (Only inside SQLAlchemy's greenlet: a connection dropped by the
    garbage collector has no loop to run it on, and aiosqlite closes it without this.)
    """

    @event.listens_for(engine.sync_engine, "invalidate")
    def _roll_back(_dbapi_connection: Any, record: Any, _exception: Any) -> None:
        driver = record.driver_connection
        if driver is None or not in_greenlet():
            return
        try:
            # shielded: a second cancellation of the caller leaves the rollback queued, still
            # ahead of the close on the connection's thread
            await_only(asyncio.shield(driver.rollback()))
        except Exception:
            logger.debug("memstore: rollback before dropping an aiosqlite connection failed")


T = TypeVar("T")


async def aread_retrying(
    engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[T]], **options: Any
) -> T:
    """:func:`memstore.sql.engine.read_retrying` on an async engine."""
    try:
        async with engine.connect() as conn:
            if options:
                await conn.execution_options(**options)
            return await work(conn)
    except DBAPIError as error:
        if not is_dead_connection(error):
            raise
    async with engine.connect() as conn:
        if options:
            await conn.execution_options(**options)
        return await work(conn)


async def adbapi_retrying(work: Callable[[], Awaitable[T]]) -> T:
    """:func:`memstore.sql.engine.dbapi_retrying` for an async read."""
    try:
        return await work()
    except DBAPIError as error:
        if not is_dead_connection(error):
            raise
    return await work()


async def awrite_retrying(
    engine: AsyncEngine,
    work: Callable[[AsyncConnection], Awaitable[T]],
    issued: Callable[[T], Sequence[int]] = no_ids,
) -> T:
    """:func:`memstore.sql.engine.write_retrying` on an async engine."""
    for attempt in (1, 2):
        async with engine.connect() as conn:
            transaction = await conn.begin()
            try:
                result = await work(conn)
            except DBAPIError as error:
                if attempt == 1 and is_dead_connection(error):
                    continue
                raise
            try:
                await transaction.commit()
            except SQLAlchemyError as error:
                raise commit_failed(engine.dialect.name, error, issued(result)) from error
            return result
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.asynccontextmanager
async def awrite_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """:func:`memstore.sql.engine.write_transaction` on an async engine."""
    async with engine.connect() as conn:
        transaction = await conn.begin()
        try:
            yield conn
        except BaseException:
            if transaction.is_active:
                await transaction.rollback()
            raise
        try:
            await transaction.commit()
        except SQLAlchemyError as error:
            raise commit_failed(engine.dialect.name, error, ()) from error


class AsyncSqlHistory:
    """The two history tables on one async engine."""

    def __init__(
        self,
        engine: AsyncEngine,
        cipher: RowCipher,
        memo: RowMemo = NO_MEMO,
        inline: InlineSqliteReads | None = None,
    ) -> None:
        self.engine = engine
        self.cipher = cipher
        self.memo = memo
        """Decoded rows the loader's reads reuse (:class:`~memstore.core.row_memo.RowMemo`)."""
        self._read_options = read_options(engine.sync_engine)
        self._split_summary = splits_summary(engine)
        self.lookahead = lookahead_rows(engine.dialect)
        """See :class:`memstore.sql.repository.SqlHistory`."""
        self._direct = engine.dialect.driver != "aiosqlite" or runs_on_aiosqlite(engine)
        """See :class:`memstore.sql.repository.SqlHistory`."""
        self.inline = inline
        """Window reads tried on the calling thread first (SQLite files:
        :class:`~memstore.sql.inline_read.InlineSqliteReads`)."""

    async def fetch(self, app_id: str, request: RowRequest) -> FetchedRows:
        """See :meth:`memstore.sql.repository.SqlHistory.fetch` (the DBAPI path runs on the
        driver's own connection: :func:`~memstore.sql.fastread.aread_rows`)."""
        with translated_errors("reading history"):
            if async_fast_reads(self.engine):
                reads = window_read(
                    self.engine.dialect, app_id, request, split_summary=self._split_summary
                )
                inline = self.inline
                found = None if inline is None else inline.read(reads)
                if found is not None:
                    rows = found
                else:
                    rows = await adbapi_retrying(lambda: aread_rows(self.engine, reads))
            else:
                statement, params = window_rows_statement(app_id, request)

                async def work(conn: AsyncConnection) -> list[Any]:
                    return list((await conn.execute(statement, params)).all())

                rows = await aread_retrying(self.engine, work, **self._read_options)
        return FetchedRows.from_rows(rows, self.cipher, app_id, self.memo)

    async def insert(
        self,
        app_id: str,
        plan: WritePlan,
        issue_ids: IdIssuer,
        chain: ChainCheck | None = None,
        *,
        reads_first: bool = False,
    ) -> tuple[list[int], GenerationStep | None]:
        """See :meth:`memstore.sql.repository.SqlHistory.insert`."""
        if not plan.id_count:
            return [], None
        direct = direct_statements(self.engine.sync_engine) if self._direct else None
        if direct is not None:
            args = DirectArgs(direct, app_id, plan, issue_ids, self.cipher, chain, reads_first)
            with translated_errors("writing history"):
                if self.engine.dialect.driver == "aiosqlite":
                    return await aiosqlite_write(self.engine, args)
                return await arun_direct_retrying(self.engine, args)

        async def work(conn: AsyncConnection) -> tuple[list[int], GenerationStep | None]:
            steps = insert_steps(conn.dialect, app_id, plan, issue_ids, self.cipher, chain)
            return await arun_steps(conn, steps)

        with translated_errors("writing history"):
            return await awrite_retrying(self.engine, work, written_ids)

    async def was_committed(self, app_id: str, first_id: int) -> bool:
        """See :meth:`memstore.sql.repository.SqlHistory.was_committed`."""

        async def work(conn: AsyncConnection) -> bool:
            return await conn.run_sync(was_committed, app_id, first_id)

        with translated_errors("checking a write"):
            return await awrite_retrying(self.engine, work)

    async def generation(self, app_id: str) -> int:
        """See :meth:`memstore.sql.repository.SqlHistory.generation`."""
        with translated_errors("reading history"):
            return await aread_retrying(
                self.engine, lambda conn: generation.aread(conn, app_id), **self._read_options
            )

    async def history(self, app_id: str, limit: int, before_id: int | None) -> list[DisplayEntry]:
        with translated_errors("reading display history"):
            async with self.engine.connect() as conn:
                result = await conn.execute(history_query(app_id, limit, before_id))
                return [display_entry(row, self.cipher) for row in result.all()]

    async def purge(self, app_id: str) -> tuple[int, int, int]:
        """See :meth:`memstore.sql.repository.SqlHistory.purge`."""
        with translated_errors("purging history"):
            steps = purge_steps(self.engine.dialect, app_id)
            return await arun_connected(self.engine, steps, begin=True)
