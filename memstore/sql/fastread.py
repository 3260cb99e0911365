"""The loader's window read on the pooled DBAPI connection (SQLite, PostgreSQL).

A window read is one statement of four shapes (on SQLite, with the newest-summary lookup as a
second statement in the same read transaction: :func:`window_read`). SQLAlchemy Core spends
more executing it (the compiled-cache lookup, an execution context, result wrapping) than
SQLite spends running it, so here each shape is compiled once per dialect into its SQL string
and parameter order and run on the pooled DBAPI connection, its rows plain tuples. What Core
would add is kept:

* the engine's pool: checkout (its events: the idle ping), return (the reset on return is
  skipped only when no transaction is open: SQLite outside one, PostgreSQL in autocommit);
* PostgreSQL reads in autocommit (no ``BEGIN``/``ROLLBACK`` round trips), as
  :func:`~memstore.sql.engine.read_options` asks of Core;
* a driver error becomes SQLAlchemy's ``DBAPIError`` with ``connection_invalidated`` set by the
  dialect's disconnect test, and a disconnect invalidates the pool's connections of that
  generation, as Core does; :func:`~memstore.sql.engine.translated_errors` then raises the same
  typed :class:`~memstore.errors.StorageError`, and the dead-connection retry works unchanged.

Engines with statement events or SQL logging (instrumentation, tests counting statements),
and other drivers (MySQL/MariaDB), take the Core path, so listeners see every read.
The async store runs the statement on the driver's own connection (asyncpg, psycopg,
aiosqlite: one call; one thread hop for aiosqlite where Core takes several). Server-side
prepared statements are the drivers' own (psycopg prepares a statement from its fifth run on a
connection, asyncpg caches them; both settings stay the user's, e.g. off behind PgBouncer).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from memstore.core.loader import LOOKAHEAD_ROWS, RowRequest
from memstore.seams import (
    adapted_error,
    aiosqlite_on_thread,
    bind_processors,
    has_events,
    invalidate_pool,
    raise_checkout_error,
    release_idle,
)
from memstore.sql.queries import summary_statement, window_statement

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

SYNC_DRIVERS = frozenset({("sqlite", "pysqlite"), ("postgresql", "psycopg")})
ASYNC_DRIVERS = frozenset(
    {("sqlite", "aiosqlite"), ("postgresql", "psycopg"), ("postgresql", "asyncpg")}
)

Args = tuple[Any, ...] | dict[str, Any]


@dataclass(frozen=True, slots=True)
class CompiledRead:
    """One statement compiled for one dialect: its SQL and how to lay out its parameters."""

    sql: str
    names: tuple[str, ...]
    """The parameter names in placeholder order (positional paramstyles), else ``()``."""
    constants: dict[str, Any]
    """The statement's own bound values (literals SQLAlchemy binds), processed."""
    processors: dict[str, Callable[[Any], Any]]

    def args(self, values: dict[str, Any]) -> Args:
        params = dict(self.constants)
        for name, value in values.items():
            processor = self.processors.get(name)
            params[name] = value if processor is None else processor(value)
        if self.names:
            return tuple(params[name] for name in self.names)
        return params


def compile_read(statement: Any, dialect: Dialect, sample: dict[str, Any]) -> CompiledRead:
    """Compile ``statement`` for ``dialect``; ``sample`` names its variable parameters."""
    compiled = statement.compile(dialect=dialect)
    if compiled.literal_execute_params or compiled.post_compile_params:
        raise ValueError("statement needs per-call rendering")
    processors = bind_processors(compiled, dialect)
    params = compiled.construct_params(sample)
    constants = {
        name: (processors[name](value) if name in processors else value)
        for name, value in params.items()
        if name not in sample
    }
    names = tuple(compiled.positiontup or ()) if dialect.positional else ()
    return CompiledRead(compiled.string, names, constants, processors)


@functools.lru_cache(maxsize=256)
def _window_read(
    dialect: Dialect,
    before: bool,
    after: bool,
    summary: bool,
    limit: int | None,
    requests_only: bool = False,
) -> CompiledRead:

    statement = window_statement(before, after, summary, limit, requests_only)
    sample: dict[str, Any] = {"w_app": ""}
    if limit is None:
        sample["w_limit"] = 1
    if before:
        sample["w_before"] = 0
    if after:
        sample["w_after"] = 0
    return compile_read(statement, dialect, sample)


SQLITE_LOOKAHEAD_ROWS = 8
"""The loader's look-ahead on SQLite (see :func:`lookahead_rows`)."""


def lookahead_rows(dialect: Dialect) -> int:
    """How many rows the loader's first read takes beyond the window: over a network a second
    read is a round trip, so :data:`~memstore.core.loader.LOOKAHEAD_ROWS`; SQLite runs
    in-process, where every row read costs on every read (half a microsecond) and a second
    read costs one more statement, so :data:`SQLITE_LOOKAHEAD_ROWS`."""
    return SQLITE_LOOKAHEAD_ROWS if dialect.name == "sqlite" else LOOKAHEAD_ROWS


@functools.lru_cache(maxsize=8)
def _summary_read(dialect: Dialect) -> CompiledRead:

    return compile_read(summary_statement(), dialect, {"w_app": ""})


Statement = tuple[str, Args]
"""One SQL string and its DBAPI parameters."""


def window_read(
    dialect: Dialect, app_id: str, request: RowRequest, *, split_summary: bool = False
) -> list[Statement]:
    """The statements of the loader read ``request`` on ``dialect``: one, or with
    ``split_summary`` and a summary asked for, the rows and then the newest summary (to run
    in one read transaction: :func:`sqlite_reads`). SQLite runs a ``UNION ALL`` of two
    ``LIMIT`` subqueries by copying every row of the first through a co-routine, a fifth of
    the read; in-process, two statements cost less. PostgreSQL keeps the one statement (one
    round trip), with the row limit written into the SQL: PostgreSQL costs a prepared
    statement's generic plan with a bound ``LIMIT`` as if it read a tenth of the rows, so it
    planned the read anew on every call (~80 µs at a million rows) instead of reusing its plan
    (a statement per limit: the usual windows use a few)."""
    split = split_summary and request.summary
    literal = dialect.name == "postgresql"
    compiled = _window_read(
        dialect,
        request.before_id is not None,
        request.after_id is not None,
        request.summary and not split,
        request.limit if literal else None,
        request.requests_only,
    )
    values: dict[str, Any] = {"w_app": app_id}
    if not literal:
        values["w_limit"] = request.limit
    if request.before_id is not None:
        values["w_before"] = request.before_id
    if request.after_id is not None:
        values["w_after"] = request.after_id
    statements = [(compiled.sql, compiled.args(values))]
    if split:
        summary = _summary_read(dialect)
        statements.append((summary.sql, summary.args({"w_app": app_id})))
    return statements


def sqlite_reads(connection: Any, statements: Sequence[Statement]) -> list[Any]:
    """The rows of ``statements`` run on one ``sqlite3`` connection, in one read transaction
    when there are several (one snapshot, as one statement would see)."""
    snapshot = len(statements) > 1 and not connection.in_transaction
    cursor = connection.cursor()
    try:
        if snapshot:
            cursor.execute("BEGIN")
        rows: list[Any] = []
        for sql, args in statements:
            rows += cursor.execute(sql, args).fetchall()
        if snapshot:
            cursor.execute("COMMIT")
    finally:
        cursor.close()
    return rows


async def _aiosqlite_snapshot(driver: Any, statements: Sequence[Statement]) -> list[Any]:
    """:func:`sqlite_reads` through aiosqlite's public API (one hop per statement): the
    fallback of :func:`memstore.seams.aiosqlite_on_thread`."""
    snapshot = not driver.in_transaction
    if snapshot:
        await driver.execute("BEGIN")
    try:
        return [row for sql, args in statements for row in await driver.execute_fetchall(sql, args)]
    finally:
        if snapshot:
            await driver.execute("COMMIT")


def _plain_engine(engine: Engine) -> bool:
    """No statement events, dialect events or SQL logging that a DBAPI call would skip."""
    return not (has_events(engine) or engine.echo or engine.logger.isEnabledFor(logging.INFO))


def fast_reads(engine: Engine, drivers: frozenset[tuple[str, str]] = SYNC_DRIVERS) -> bool:
    """Whether the loader's reads on ``engine`` may take the DBAPI path (checked per read:
    a listener added later sends reads back through Core)."""
    dialect = engine.dialect
    return (dialect.name, dialect.driver) in drivers and _plain_engine(engine)


# -- sync ---------------------------------------------------------------------------------------


def _wrapped(
    engine: Engine, fairy: PoolProxiedConnection, error: BaseException, sql: str, args: Args
) -> BaseException:
    """What Core raises for ``error`` (a driver exception) on ``fairy``; hands the connection
    back (invalidating the pool's connections of its generation on a disconnect). Must run
    where the driver may do I/O (in a greenlet for async drivers)."""
    dialect = engine.dialect
    dbapi_error = dialect.loaded_dbapi.Error
    if not isinstance(error, dbapi_error):
        # a cancellation or a bug mid-statement: the connection's state is unknown
        fairy.invalidate(error)
        return error
    try:
        disconnect = bool(dialect.is_disconnect(error, fairy.dbapi_connection, None))
    except Exception:
        disconnect = True
    if disconnect:
        invalidate_pool(engine, fairy, error)
    else:
        try:
            if dialect.name == "postgresql":
                connection: Any = fairy.dbapi_connection
                connection.autocommit = False  # as the pool handed it out
            fairy.close()  # rollback on return
        except Exception:
            fairy.invalidate(error)
    return DBAPIError.instance(
        sql,
        args,
        error,
        dbapi_error,
        hide_parameters=engine.hide_parameters,
        connection_invalidated=disconnect,
        dialect=dialect,
    )


def _checkout(engine: Engine) -> PoolProxiedConnection:
    try:
        return engine.raw_connection()
    except engine.dialect.loaded_dbapi.Error as error:
        raise_checkout_error(error, engine)


def _release(fairy: PoolProxiedConnection, idle: bool) -> None:
    """Return ``fairy`` to the pool; without the reset round trip when ``idle`` (no
    transaction open on it)."""
    if not (idle and release_idle(fairy)):
        fairy.close()


def read_rows(engine: Engine, statements: Sequence[Statement]) -> list[Sequence[Any]]:
    """Run ``statements`` (one, or on SQLite several: :func:`sqlite_reads`) on a pooled
    connection of ``engine`` (pysqlite or psycopg); their rows."""
    postgres = engine.dialect.name == "postgresql"
    if postgres and len(statements) != 1:
        raise ValueError("a PostgreSQL window read is one statement")
    fairy = _checkout(engine)
    dbapi: Any = fairy.dbapi_connection
    sql, args = statements[0]
    try:
        if postgres:
            dbapi.autocommit = True
            cursor = dbapi.cursor()
            try:
                rows = cursor.execute(sql, args).fetchall()
            finally:
                cursor.close()
            dbapi.autocommit = False
            idle = True
        else:
            rows = sqlite_reads(dbapi, statements)
            idle = not dbapi.in_transaction
    except BaseException as error:
        wrapped = _wrapped(engine, fairy, error, sql, args)
        if wrapped is error:
            raise
        raise wrapped from error
    _release(fairy, idle)
    return rows  # type: ignore[no-any-return]


# -- async --------------------------------------------------------------------------------------


def async_fast_reads(engine: AsyncEngine) -> bool:
    """:func:`fast_reads` for an async engine."""
    return fast_reads(engine.sync_engine, ASYNC_DRIVERS)


def splits_summary(engine: Engine | AsyncEngine) -> bool:
    """Whether window reads on ``engine`` run the newest-summary lookup as a statement of its
    own (:func:`window_read`): on SQLite, where the statements run in one call (pysqlite, or
    aiosqlite when its worker thread can take a function)."""
    dialect = engine.dialect
    if dialect.name != "sqlite":
        return False
    return dialect.driver != "aiosqlite" or _aiosqlite_runs_functions()


def _aiosqlite_runs_functions() -> bool:
    import aiosqlite

    return hasattr(aiosqlite.Connection, "_execute") and hasattr(aiosqlite.Connection, "_conn")


async def aread_rows(engine: AsyncEngine, statements: Sequence[Statement]) -> list[Sequence[Any]]:
    """:func:`read_rows` on the driver's own asyncio connection (asyncpg, psycopg, aiosqlite:
    all of ``statements`` in one hop to its thread)."""
    sync_engine = engine.sync_engine
    name = sync_engine.dialect.driver
    if name != "aiosqlite" and len(statements) != 1:
        raise ValueError("a PostgreSQL window read is one statement")
    fairy = await greenlet_spawn(_checkout, sync_engine)
    adapted: Any = fairy.dbapi_connection
    driver: Any = fairy.driver_connection
    sql, args = statements[0]
    idle = True
    try:
        try:
            if name == "asyncpg":
                # outside a transaction: asyncpg runs the statement as its own (autocommit)
                rows: list[Any] = await driver.fetch(sql, *args)
            elif name == "psycopg":
                await driver.set_autocommit(True)
                cursor = driver.cursor()
                try:
                    await cursor.execute(sql, args)
                    rows = await cursor.fetchall()
                finally:
                    await cursor.close()
                await driver.set_autocommit(False)
            elif len(statements) == 1:  # aiosqlite: execute and fetch in one hop
                rows = list(await driver.execute_fetchall(sql, args))
                idle = not driver.in_transaction
            else:
                on_thread = aiosqlite_on_thread(driver)
                if on_thread is None:
                    rows = await _aiosqlite_snapshot(driver, statements)
                else:
                    rows = await on_thread(sqlite_reads, statements)
                idle = not driver.in_transaction
        except Exception as error:
            adapted_error(adapted, error)  # the dialect's DBAPI exception for it
            raise
    except BaseException as error:
        wrapped = await greenlet_spawn(_wrapped, sync_engine, fairy, error, sql, args)
        if wrapped is error:
            raise
        raise wrapped from error
    if idle:
        _release(fairy, True)
    else:
        await greenlet_spawn(fairy.close)
    return rows
