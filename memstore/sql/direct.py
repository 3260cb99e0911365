"""An append's transaction straight on the driver connection: ``sqlite3`` (also inside
aiosqlite's thread) and psycopg 3 (sync and async, pipelined).

It keeps every rule of :func:`memstore.sql.repository.insert_plan`: the generation upsert
first (it locks the app's row, so writers of one app take turns), ids above the app's newest
id of either history read under that lock, the compaction chain checked, every result id
answering a request stored below the new ids, both histories in one transaction. What
differs is the cost of getting there:

* the statements are compiled once per dialect by SQLAlchemy (same SQL, same casts) and sent
  without SQLAlchemy's per-statement execution context; values go through the columns' bind
  processors once per write;
* the ids and rows are made before the app's lock and checked under it (see
  :meth:`~memstore.sql.direct_checks.DirectWrite.overtaken`): a row at or above them (a
  writer whose clock is ahead) has them issued again above the newest id; a lease that
  lapsed while the write waited rolls it back;
* psycopg sends ``BEGIN``, the upsert, the reads and both inserts (each one
  ``INSERT ... SELECT FROM unnest(<binary arrays>)``) in one pipeline, one round trip: each
  statement takes its snapshot when the server starts it, so the reads see every write
  committed before the upsert got the lock. ``COMMIT`` stays a round trip of its own, sent
  after the checks, so a connection that dies before it is told apart from a commit whose
  outcome is unknown;
* SQLite runs the transaction as one call on the connection's thread (``BEGIN IMMEDIATE``,
  so the write lock is held before anything is read; the upsert returns the newest ids too):
  one thread hop under aiosqlite instead of several per statement.

The pieces, one job each: :mod:`~memstore.sql.direct_statements` (compiled statements and
inserts), :mod:`~memstore.sql.direct_checks` (the checks both drivers make),
:mod:`~memstore.sql.direct_sqlite` and :mod:`~memstore.sql.direct_psycopg` (the transaction
on each driver); this module picks the driver, turns its errors into SQLAlchemy's and runs
the write on the async engines.

The transaction runs on a pooled driver connection without SQLAlchemy's ``Connection``
around it (:func:`direct_write_retrying`; the pool's checkout and check-in events still run).
So only engines without statement or transaction listeners take this path
(``before_cursor_execute`` / ``after_cursor_execute`` instrumentation, ``echo``, ``begin`` /
``commit`` / ``rollback`` events see the write only through SQLAlchemy); other drivers
(MySQL/MariaDB, asyncpg) keep :func:`insert_plan`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import await_only, greenlet_spawn

from memstore.seams import aiosqlite_on_thread, aiosqlite_runs_functions, aiosqlite_sqlite3
from memstore.sql.direct_checks import DirectArgs, DirectWrite, LockedReads, Written
from memstore.sql.direct_psycopg import apsycopg_write, psycopg_write
from memstore.sql.direct_sqlite import sqlite_write
from memstore.sql.direct_statements import (
    PSYCOPG_DRIVERS,
    SHARED_COLUMNS,
    SQLITE_DRIVERS,
    DirectStatements,
    InsertCall,
    _newest_id,
    _request_page,
    direct_statements,
)
from memstore.sql.engine import commit_failed
from memstore.sql.queries import REQUEST_SCAN_PAGE, written_ids

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "PSYCOPG_DRIVERS",
    "REQUEST_SCAN_PAGE",
    "SHARED_COLUMNS",
    "SQLITE_DRIVERS",
    "DirectArgs",
    "DirectStatements",
    "DirectWrite",
    "InsertCall",
    "LockedReads",
    "Written",
    "_newest_id",
    "_request_page",
    "aiosqlite_write",
    "apsycopg_write",
    "arun_direct_retrying",
    "direct_statements",
    "direct_write_retrying",
    "psycopg_write",
    "runs_on_aiosqlite",
    "sqlite_write",
    "wrapped",
]


# -- driver errors -------------------------------------------------------------------------------


def _driver_error_class(driver_conn: Any) -> type[Exception]:
    if isinstance(driver_conn, sqlite3.Connection):
        return sqlite3.Error
    import psycopg

    return psycopg.Error


def _is_dead(error: Exception, driver_conn: Any) -> bool:
    """Whether ``error`` left the connection unusable (the same work may run again on a fresh
    one, as :func:`memstore.sql.engine.is_dead_connection` decides for SQLAlchemy's errors)."""
    if isinstance(error, sqlite3.ProgrammingError):
        return "closed" in str(error)
    return bool(getattr(driver_conn, "closed", False) or getattr(driver_conn, "broken", False))


def wrapped(error: Exception, driver_conn: Any, dialect: Dialect) -> DBAPIError:
    """A driver error as SQLAlchemy would raise it (no statement parameters), so
    :func:`memstore.sql.engine.translated_errors` classifies it and the write retries a dead
    connection once."""
    wrapped_error = DBAPIError.instance(
        "memstore direct write",
        None,
        error,
        _driver_error_class(driver_conn),
        hide_parameters=True,
        connection_invalidated=_is_dead(error, driver_conn),
        dialect=dialect,
    )
    assert isinstance(wrapped_error, DBAPIError)  # ``error`` is one of the driver's
    return wrapped_error


def _write_on(driver_conn: Any, args: DirectArgs) -> Written:
    """The write's statements on the driver connection, in a transaction the caller ends."""
    if isinstance(driver_conn, sqlite3.Connection):
        return sqlite_write(driver_conn, args, commit=False)
    if _is_async_psycopg(driver_conn):
        result: Written = await_only(apsycopg_write(driver_conn, args))
        return result
    return psycopg_write(driver_conn, args)


def _end(driver_conn: Any, commit: bool) -> None:
    """``COMMIT`` or ``ROLLBACK`` on the driver connection (awaited on psycopg's async one)."""
    end = driver_conn.commit if commit else driver_conn.rollback
    if _is_async_psycopg(driver_conn):
        await_only(end())
    else:
        end()


def _runs_again(
    raised: DBAPIError,
    error: BaseException,
    invalidate: Callable[[BaseException], Any],
    attempt: int,
) -> bool:
    """Whether a write that failed with ``raised`` (the wrapped driver ``error``) runs once
    more: only when the error left its connection dead (invalidated here, so the pool drops
    it) on the first attempt; nothing was written, the transaction died with it."""
    if not raised.connection_invalidated:
        return False
    invalidate(error)
    return attempt == 1


def direct_write_retrying(engine: Engine, args: DirectArgs) -> Written:
    """The direct write in its own transaction on a pooled driver connection, by the rules of
    :func:`memstore.sql.engine.write_retrying`: once more on a fresh connection when a
    statement before the commit finds the connection dead (nothing was written); a failed
    ``COMMIT`` is never retried (on a lost connection its outcome is unknown:
    :func:`~memstore.sql.engine.commit_failed`). The driver's errors are raised as
    :func:`wrapped` ones.

    The connection comes straight from the pool (its checkout and check-in events run, a
    stale one is pinged and replaced as usual) without SQLAlchemy's ``Connection`` and
    ``Transaction`` around it: their bookkeeping was 1-7 % of a turn (PostgreSQL, SQLite),
    and the write already decides every statement itself. On an async engine call it in
    SQLAlchemy's greenlet (:func:`arun_direct_retrying`)."""
    for attempt in (1, 2):
        pooled = engine.raw_connection()
        try:
            driver_conn = pooled.driver_connection
            errors = _driver_error_class(driver_conn)
            try:
                result = _write_on(driver_conn, args)
            except BaseException as error:
                with suppress(Exception):  # a dead connection: invalidated and discarded below
                    _end(driver_conn, commit=False)
                if not isinstance(error, errors):
                    raise
                raised = wrapped(error, driver_conn, engine.dialect)
                if _runs_again(raised, error, pooled.invalidate, attempt):
                    continue
                raise raised from error
            try:
                _end(driver_conn, commit=True)
            except errors as error:
                raised = wrapped(error, driver_conn, engine.dialect)
                if raised.connection_invalidated:
                    pooled.invalidate(error)
                else:  # a refused COMMIT (SQLite busy) can leave the transaction open
                    with suppress(Exception):
                        _end(driver_conn, commit=False)
                issued = written_ids(result)
                raise commit_failed(engine.dialect.name, raised, issued) from error
            return result
        finally:
            pooled.close()
    raise AssertionError("unreachable")  # pragma: no cover


def _is_async_psycopg(driver_conn: Any) -> bool:
    """Whether ``driver_conn`` is psycopg's ``AsyncConnection`` (a sqlite3 connection is
    answered without importing psycopg, which a core install lacks)."""
    if isinstance(driver_conn, sqlite3.Connection):
        return False
    import psycopg

    return isinstance(driver_conn, psycopg.AsyncConnection)


# -- async ---------------------------------------------------------------------------------------


def runs_on_aiosqlite(engine: AsyncEngine) -> bool:
    """Whether the async engine's connections are aiosqlite's, whose worker thread can run
    the whole SQLite write as one call."""
    return engine.dialect.driver == "aiosqlite" and aiosqlite_runs_functions()


async def arun_direct_retrying(engine: AsyncEngine, args: DirectArgs) -> Written:
    """:func:`direct_write_retrying` on an async engine (psycopg): checkout, the write,
    ``COMMIT`` and check-in in one greenlet instead of one per step."""
    return await greenlet_spawn(direct_write_retrying, engine.sync_engine, args)


async def aiosqlite_write(engine: AsyncEngine, args: DirectArgs) -> Written:
    """:func:`sqlite_write` as one call on the aiosqlite connection's thread, committing
    there: checking a connection out, the write and checking it in run in one greenlet (the
    pool's rollback at check-in is the only other thread hop). A connection found closed
    before the commit is replaced and the write runs once more (a closed SQLite connection
    rolled its transaction back)."""

    def work() -> Written:
        for attempt in (1, 2):
            pooled = engine.sync_engine.raw_connection()  # as direct_write_retrying does
            try:
                driver_conn: Any = pooled.driver_connection
                target = aiosqlite_sqlite3(driver_conn)
                run = aiosqlite_on_thread(driver_conn)
                assert run is not None  # runs_on_aiosqlite(engine) holds
                try:
                    result: Written = await_only(run(sqlite_write, args, commit=True))
                    return result
                except sqlite3.Error as error:
                    raised = wrapped(error, target, engine.dialect)
                    if _runs_again(raised, error, pooled.invalidate, attempt):
                        continue
                    raise raised from error
            finally:
                pooled.close()
        raise AssertionError("unreachable")  # pragma: no cover

    return await greenlet_spawn(work)
