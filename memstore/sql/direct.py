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
  :meth:`_Write.overtaken`): a row at or above them (a writer whose clock is ahead) has them
  issued again above the newest id; a lease that lapsed while the write waited rolls it back;
* psycopg sends ``BEGIN``, the upsert, the reads and both inserts (each one
  ``INSERT ... SELECT FROM unnest(<binary arrays>)``) in one pipeline, one round trip: each
  statement takes its snapshot when the server starts it, so the reads see every write
  committed before the upsert got the lock. ``COMMIT`` stays a round trip of its own, sent
  after the checks, so a connection that dies before it is told apart from a commit whose
  outcome is unknown;
* SQLite runs the transaction as one call on the connection's thread (``BEGIN IMMEDIATE``,
  so the write lock is held before anything is read; the upsert returns the newest ids too):
  one thread hop under aiosqlite instead of several per statement.

Only engines without statement listeners take this path (``before_cursor_execute`` /
``after_cursor_execute`` instrumentation and ``echo`` see every statement only through
SQLAlchemy); other drivers (MySQL/MariaDB, asyncpg) keep :func:`insert_plan`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import await_only, greenlet_spawn

from memstore.core.crypto import RowCipher
from memstore.core.id_order import newest_of
from memstore.core.plans import IdIssuer, WritePlan, rows_with_ids, unknown_call_error
from memstore.seams import aiosqlite_on_thread, aiosqlite_runs_functions, aiosqlite_sqlite3
from memstore.sql.engine import write_retrying
from memstore.sql.generation import GenerationStep, bump_statement
from memstore.sql.queries import (
    NEWEST_IDS,
    NEWEST_OF_TYPE,
    ONE_ROW,
    REQUEST_SCAN_PAGE,
    TOOL_REQUEST_TYPE,
    ChainCheck,
    in_app,
    latest_summary_query,
    newest_first,
    of_type,
    requested_ids_in,
    written_ids,
    written_in,
)
from memstore.sql.schema import app_generation, display, original

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

SQLITE_DRIVERS = ("pysqlite", "aiosqlite")
PSYCOPG_DRIVERS = ("psycopg", "psycopg_async")


@dataclass(frozen=True, slots=True)
class _Statement:
    """One statement compiled for a dialect: its SQL, the order of its positional
    parameters (``None`` for named ones) and the values of its constant parameters."""

    sql: str
    order: tuple[str, ...] | None
    names: tuple[str, ...]
    constants: dict[str, Any]

    def params(self, values: dict[str, Any]) -> Any:
        merged = {**self.constants, **values}
        if self.order is None:
            return {name: merged[name] for name in self.names}
        return tuple(merged[name] for name in self.order)


def _compiled(statement: Any, dialect: Dialect, placeholders: dict[str, Any]) -> _Statement:
    compiled = statement.compile(dialect=dialect)
    constants = compiled.construct_params(placeholders)
    names = tuple(constants)
    for name in placeholders:
        constants.pop(name)
    order = tuple(compiled.positiontup) if compiled.positiontup is not None else None
    return _Statement(compiled.string, order, names, constants)


_APP = sa.bindparam("d_app", type_=original.c.app_id.type)


def _request_page(before: bool) -> sa.Select[Any]:
    query = (
        sa.select(original.c.id, original.c.payload)
        .where(of_type(_APP, TOOL_REQUEST_TYPE), original.c.is_deleted == sa.false())
        .order_by(*NEWEST_OF_TYPE)
        .limit(written_in(REQUEST_SCAN_PAGE))
    )
    if before:
        query = query.where(original.c.id < sa.bindparam("d_before", type_=sa.BigInteger()))
    return query


def _newest_id(table: sa.Table) -> Any:
    return (
        sa.select(table.c.id)
        .where(in_app(table, _APP))
        .order_by(*newest_first(table))
        .limit(ONE_ROW)
        .scalar_subquery()
    )


SHARED_COLUMNS = frozenset({"app_id", "user_id", "created_at", "updated_at", "is_deleted"})
"""Columns every row of one write holds the same value in (one app, one user, one instant,
not deleted): PostgreSQL's insert sends them once, not as arrays."""


InsertCall = tuple[str, Any]
"""An insert's SQL and its parameters."""


class _Insert:
    """The insert of one table's rows and the rows' parameters, each value through its
    column type's bind processor as SQLAlchemy would send it (timestamps as SQLite's text,
    booleans as integers...).

    SQLite: the table's ``INSERT`` compiled by SQLAlchemy, run with ``executemany`` (one
    prepared statement stepped per row, no round trips to save). PostgreSQL: one
    ``INSERT ... SELECT ... FROM unnest(<one array per column that varies>)``, a single
    statement whatever the number of rows (psycopg would otherwise queue and send one command
    per row), the :data:`SHARED_COLUMNS` as single values (psycopg builds binary arrays in
    Python: five fewer arrays spare a sixth of a 20-message write's client time)."""

    def __init__(self, table: sa.Table, dialect: Dialect) -> None:
        self.names = tuple(column.name for column in table.columns)
        self.processors = [
            (index, process)
            for index, column in enumerate(table.columns)
            if (process := column.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        ]
        self.columnar = dialect.name == "postgresql"
        if self.columnar:
            quote = dialect.identifier_preparer.quote
            self.shared = tuple(i for i, name in enumerate(self.names) if name in SHARED_COLUMNS)
            self.varying = tuple(i for i in range(len(self.names)) if i not in self.shared)
            columns = list(table.columns)

            def cast(index: int) -> str:
                return f"%b::{columns[index].type.compile(dialect=dialect)}"

            picked = ", ".join(
                cast(i) if i in self.shared else f"u.{quote(self.names[i])}"
                for i in range(len(self.names))
            )
            arrays = ", ".join(f"{cast(i)}[]" for i in self.varying)
            aliases = ", ".join(quote(self.names[i]) for i in self.varying)
            into = (
                f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
                f"({', '.join(quote(name) for name in self.names)}) "
            )
            self.sql = f"{into}SELECT {picked} FROM unnest({arrays}) AS u({aliases})"
            every = ", ".join(f"{cast(i)}[]" for i in range(len(self.names)))
            self.wide_sql = f"{into}SELECT * FROM unnest({every})"
            """Every column as an array: for rows that differ in a shared column (not the
            store's own writes, whose rows share one app, user and instant)."""
            return
        compiled = table.insert().compile(dialect=dialect)
        if compiled.positiontup is None or tuple(compiled.positiontup) != self.names:
            raise ValueError("the insert's parameters are not positional, in column order")
        self.sql = compiled.string

    def values(self, rows: Sequence[dict[str, Any]]) -> InsertCall | None:
        """The statement and its parameters (``None`` without rows): ``executemany``'s (one
        tuple per row), or the ``unnest`` statement's (the shared columns' values, then one
        list per varying column; every column as a list when the rows differ in a shared
        one)."""
        if not rows:
            return None
        names = self.names
        memo: dict[tuple[int, Any], Any] = {}  # a write's rows share app, user, timestamps
        out: list[Any] = []
        for row in rows:
            values = [row[name] for name in names]
            for index, process in self.processors:
                value = values[index]
                if value is not None:
                    key = (index, value)
                    processed = memo.get(key, memo)
                    if processed is memo:
                        processed = memo[key] = process(value)
                    values[index] = processed
            out.append(values)
        if not self.columnar:
            return self.sql, [tuple(values) for values in out]
        first = out[0]
        if any(values[i] != first[i] for values in out[1:] for i in self.shared):
            return self.wide_sql, [list(column) for column in zip(*out, strict=True)]
        shared = [first[i] for i in self.shared]
        return self.sql, shared + [[values[i] for values in out] for i in self.varying]


class DirectStatements:
    """The statements of a direct write, compiled once for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        bump = bump_statement(dialect, sa.bindparam("gen_app", type_=sa.String))
        self.bump = _compiled(bump.returning(app_generation.c.generation), dialect, {"gen_app": ""})
        self.bump_newest: _Statement | None = None
        """SQLite: the upsert returning the app's newest ids too (under ``BEGIN IMMEDIATE``
        the write lock is held before the statement reads anything, so its subqueries see
        every committed row; PostgreSQL's would read the snapshot taken before the lock)."""
        if dialect.name == "sqlite":
            newest = [_newest_id(table) for table in (original, display)]
            self.bump_newest = _compiled(
                bump.returning(app_generation.c.generation, *newest),
                dialect,
                {"gen_app": "", "d_app": ""},
            )
        self.newest = _compiled(NEWEST_IDS, dialect, {"app_id": ""})
        self.summary = _compiled(latest_summary_query(_APP), dialect, {"d_app": ""})
        self.requests = _compiled(_request_page(False), dialect, {"d_app": ""})
        self.requests_before = _compiled(_request_page(True), dialect, {"d_app": "", "d_before": 0})
        self.insert_original = _Insert(original, dialect)
        self.insert_display = _Insert(display, dialect)


_STATEMENTS: dict[tuple[str, str, str], DirectStatements] = {}


def direct_statements(engine: Engine) -> DirectStatements | None:
    """The compiled statements when ``engine`` can take the direct write, else ``None``:
    sqlite3, aiosqlite or psycopg, an upsert that returns the generation, and nobody
    listening to its statements."""
    dialect = engine.dialect
    if dialect.driver not in SQLITE_DRIVERS + PSYCOPG_DRIVERS:
        return None
    if dialect.driver in SQLITE_DRIVERS and sqlite3.sqlite_version_info < (3, 35):
        return None  # no RETURNING (the driver links the same library as the sqlite3 module)
    if engine.echo or engine.dispatch.before_cursor_execute or engine.dispatch.after_cursor_execute:
        return None
    key = (dialect.name, dialect.driver, dialect.paramstyle)
    cached = _STATEMENTS.get(key)
    if cached is None:
        cached = _STATEMENTS[key] = DirectStatements(dialect)
    return cached


# -- the pieces both drivers share ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockedReads:
    """What the transaction read right after taking the app's lock."""

    generation: int
    newest: int
    summary_id: int | None
    request_page: list[tuple[int, str]] | None
    """The newest page of the app's tool requests (asked only when the plan has result ids
    to resolve)."""


def _step(generation: int) -> GenerationStep:
    return GenerationStep(generation - 1, generation)


def _missing_after_page(
    missing: set[str], page: Sequence[Sequence[Any]], app_id: str, cipher: RowCipher
) -> int | None:
    """Strike the call ids ``page`` (newest first) requests off ``missing``; the id to read
    the next page below, or ``None`` when no page is left to read."""
    for row_id, payload in page:
        missing.difference_update(requested_ids_in(payload, app_id, row_id, cipher))
    if missing and len(page) >= REQUEST_SCAN_PAGE:
        return int(page[-1][0])
    return None


class _Write:
    """One write's ids, rows and checks: the app's reads taken under its lock come in, the
    verdict (chain, ids above the newest, every result id requested) goes out."""

    def __init__(
        self,
        statements: DirectStatements,
        app_id: str,
        plan: WritePlan,
        cipher: RowCipher,
        chain: ChainCheck | None,
    ) -> None:
        self.statements = statements
        self.app_id = app_id
        self.plan = plan
        self.cipher = cipher
        self.chain = chain
        self.names = _app(app_id)
        self.ids: list[int] = []
        self.missing = set(plan.unresolved_call_ids)
        self.before: int | None = None
        """Where the next page of tool requests starts (``None``: no page left to read)."""

    def issue(
        self, issue_ids: IdIssuer, newest: int
    ) -> tuple[InsertCall | None, InsertCall | None]:
        """Issue the ids above ``newest``; the parameters of both inserts."""
        self.ids = issue_ids(self.plan.id_count, newest)
        originals, displays = rows_with_ids(self.plan, self.ids, self.cipher)
        return (
            self.statements.insert_original.values(originals),
            self.statements.insert_display.values(displays),
        )

    def overtaken(self, reads: LockedReads, issue_ids: IdIssuer) -> bool:
        """Whether the ids issued before the app's lock must be issued again, above the
        newest id read under it: a row of the app is at or above the first of them (a writer
        whose clock is ahead). Else the issuer confirms that the lease it issued them on still
        holds (asked for no ids, it raises :class:`~memstore.errors.WorkerLeaseLostError`
        when the lease lapsed while the write waited for the lock), so no id of a lapsed lease
        is written."""
        if reads.newest >= self.ids[0]:
            return True
        issue_ids(0, reads.newest)
        return False

    def check(self, reads: LockedReads) -> None:
        """The chain, and the first page of tool requests when it was read along (in a
        pipeline whose ids were not overtaken, every row it saw is below them)."""
        if self.chain is not None:
            self.chain.check(reads.summary_id)
        if self.missing and reads.request_page is not None:
            self.next_page(reads.request_page)

    def scan_below_ids(self) -> None:
        """Look for the requested call ids below the ids issued (page by page, newest first):
        a result must answer a request stored before it."""
        self.before = self.ids[0] if self.missing else None

    def next_page(self, page: Sequence[Sequence[Any]]) -> None:
        self.before = _missing_after_page(self.missing, page, self.app_id, self.cipher)

    def page_params(self) -> Any:
        """The parameters of the next page of tool requests."""
        return self.statements.requests_before.params(
            {"d_app": self.app_id, "d_before": self.before}
        )

    def answered(self) -> None:
        """Raise when a result id answers no stored request (all pages read)."""
        if self.missing:
            raise unknown_call_error(self.app_id, self.missing)

    def result(self, generation: int) -> tuple[list[int], GenerationStep]:
        return self.ids[: len(self.plan.original_rows)], _step(generation)


def _app(app_id: str) -> dict[str, Any]:
    return {"gen_app": app_id, "app_id": app_id, "d_app": app_id}


# -- SQLite --------------------------------------------------------------------------------------


def sqlite_write(
    conn: sqlite3.Connection,
    statements: DirectStatements,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None,
    commit: bool,
    reads_first: bool = False,
) -> tuple[list[int], GenerationStep]:
    """The write on a ``sqlite3`` connection, in the calling thread. With ``commit`` the
    transaction is committed here (rolled back on any failure); without, the caller commits
    or rolls back (through SQLAlchemy)."""
    s = statements
    write = _Write(s, app_id, plan, cipher, chain)
    names = write.names
    # ids and rows before the write lock, which other writers wait for meanwhile; checked
    # against the app's newest id under the lock (see _Write.overtaken)
    originals, displays = (None, None) if reads_first else write.issue(issue_ids, -1)
    cursor = conn.cursor()
    try:
        cursor.execute("BEGIN IMMEDIATE")
        if s.bump_newest is not None:
            bumped = cursor.execute(s.bump_newest.sql, s.bump_newest.params(names)).fetchone()
            generation, newest = int(bumped[0]), newest_of(*bumped[1:])
        else:  # pragma: no cover - the direct write takes SQLite and psycopg only
            generation = int(cursor.execute(s.bump.sql, s.bump.params(names)).fetchone()[0])
            newest = newest_of(*cursor.execute(s.newest.sql, s.newest.params(names)).fetchone())
        summary = None
        if chain is not None:
            found = cursor.execute(s.summary.sql, s.summary.params(names)).fetchone()
            summary = None if found is None else found[0]
        reads = LockedReads(generation, newest, summary, None)
        write.check(reads)
        if reads_first or write.overtaken(reads, issue_ids):
            originals, displays = write.issue(issue_ids, newest)
        write.scan_below_ids()
        while write.before is not None:
            write.next_page(cursor.execute(s.requests_before.sql, write.page_params()).fetchall())
        write.answered()
        if originals:
            cursor.executemany(*originals)
        if displays:
            cursor.executemany(*displays)
        if commit:
            conn.commit()
        return write.result(generation)
    except BaseException:
        if commit:
            conn.rollback()
        raise
    finally:
        cursor.close()


# -- psycopg -------------------------------------------------------------------------------------
#
# One pipeline holds the whole transaction but its COMMIT: the upsert (which waits for the
# app's lock), the reads, then both inserts, with ids issued before it was sent. The server
# runs the statements in order, each on a snapshot taken when it starts, so the reads see
# every write committed before the lock was granted. Before committing, the reads are
# checked: a row at or above the first id sent (a writer whose clock is ahead) makes the
# write roll back and run again with the reads first and ids above the newest; a broken
# chain, an unrequested result id or a lapsed lease rolls back and raises. The COMMIT is its
# own round trip, so a connection that dies before it wrote nothing and is retried.


def _reads(generation: Any, newest: Any, summary: Any, page: list[Any] | None) -> LockedReads:
    return LockedReads(
        int(generation[0]),
        newest_of(*newest),
        None if summary is None else summary[0],
        page,
    )


def psycopg_write(
    conn: Any,
    statements: DirectStatements,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None,
    reads_first: bool = False,
) -> tuple[list[int], GenerationStep]:
    """The write on a psycopg connection in a transaction the caller commits."""
    s = statements
    write = _Write(s, app_id, plan, cipher, chain)
    names = write.names
    if reads_first:
        return _psycopg_reads_first(conn, write, issue_ids)
    originals, displays = write.issue(issue_ids, -1)
    with conn.pipeline():
        bump = conn.execute(s.bump.sql, s.bump.params(names))
        summary = conn.execute(s.summary.sql, s.summary.params(names)) if chain else None
        newest = conn.execute(s.newest.sql, s.newest.params(names))
        page = (
            conn.execute(s.requests.sql, s.requests.params(names))
            if plan.unresolved_call_ids
            else None
        )
        if originals:
            conn.execute(*originals)
        if displays:
            conn.execute(*displays)
    # leaving the pipeline sent its one Sync and took in every result (one round trip)
    reads = _reads(
        bump.fetchone(),
        newest.fetchone(),
        None if summary is None else summary.fetchone(),
        None if page is None else page.fetchall(),
    )
    if write.overtaken(reads, issue_ids):
        conn.rollback()
        return _psycopg_reads_first(conn, write, issue_ids)
    write.check(reads)
    while write.before is not None:
        write.next_page(conn.execute(s.requests_before.sql, write.page_params()).fetchall())
    write.answered()
    return write.result(reads.generation)


def _psycopg_reads_first(
    conn: Any, write: _Write, issue_ids: IdIssuer
) -> tuple[list[int], GenerationStep]:
    s, names = write.statements, write.names
    with conn.pipeline() as pipe:
        bump = conn.execute(s.bump.sql, s.bump.params(names))
        summary = conn.execute(s.summary.sql, s.summary.params(names)) if write.chain else None
        newest = conn.execute(s.newest.sql, s.newest.params(names))
        pipe.sync()
        reads = _reads(
            bump.fetchone(),
            newest.fetchone(),
            None if summary is None else summary.fetchone(),
            None,
        )
        write.check(reads)
        originals, displays = write.issue(issue_ids, reads.newest)
        write.scan_below_ids()
        while write.before is not None:
            more = conn.execute(s.requests_before.sql, write.page_params())
            pipe.sync()
            write.next_page(more.fetchall())
        write.answered()
        if originals:
            conn.execute(*originals)
        if displays:
            conn.execute(*displays)
        pipe.sync()
    return write.result(reads.generation)


async def apsycopg_write(
    conn: Any,
    statements: DirectStatements,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None,
    reads_first: bool = False,
) -> tuple[list[int], GenerationStep]:
    """:func:`psycopg_write` on a psycopg ``AsyncConnection``."""
    s = statements
    write = _Write(s, app_id, plan, cipher, chain)
    names = write.names
    if reads_first:
        return await _apsycopg_reads_first(conn, write, issue_ids)
    originals, displays = write.issue(issue_ids, -1)
    async with conn.pipeline():
        bump = await conn.execute(s.bump.sql, s.bump.params(names))
        summary = await conn.execute(s.summary.sql, s.summary.params(names)) if chain else None
        newest = await conn.execute(s.newest.sql, s.newest.params(names))
        page = (
            await conn.execute(s.requests.sql, s.requests.params(names))
            if plan.unresolved_call_ids
            else None
        )
        if originals:
            await conn.execute(*originals)
        if displays:
            await conn.execute(*displays)
    reads = _reads(
        await bump.fetchone(),
        await newest.fetchone(),
        None if summary is None else await summary.fetchone(),
        None if page is None else await page.fetchall(),
    )
    if write.overtaken(reads, issue_ids):
        await conn.rollback()
        return await _apsycopg_reads_first(conn, write, issue_ids)
    write.check(reads)
    while write.before is not None:
        more = await conn.execute(s.requests_before.sql, write.page_params())
        write.next_page(await more.fetchall())
    write.answered()
    return write.result(reads.generation)


async def _apsycopg_reads_first(
    conn: Any, write: _Write, issue_ids: IdIssuer
) -> tuple[list[int], GenerationStep]:
    s, names = write.statements, write.names
    async with conn.pipeline() as pipe:
        bump = await conn.execute(s.bump.sql, s.bump.params(names))
        summary = (
            await conn.execute(s.summary.sql, s.summary.params(names)) if write.chain else None
        )
        newest = await conn.execute(s.newest.sql, s.newest.params(names))
        await pipe.sync()
        reads = _reads(
            await bump.fetchone(),
            await newest.fetchone(),
            None if summary is None else await summary.fetchone(),
            None,
        )
        write.check(reads)
        originals, displays = write.issue(issue_ids, reads.newest)
        write.scan_below_ids()
        while write.before is not None:
            more = await conn.execute(s.requests_before.sql, write.page_params())
            await pipe.sync()
            write.next_page(await more.fetchall())
        write.answered()
        if originals:
            await conn.execute(*originals)
        if displays:
            await conn.execute(*displays)
        await pipe.sync()
    return write.result(reads.generation)


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


@contextmanager
def driver_errors(conn: Connection, driver_conn: Any) -> Iterator[None]:
    """Re-raise the driver's errors as :func:`wrapped` ones; invalidate a dead connection."""
    try:
        yield
    except _driver_error_class(driver_conn) as error:
        raised = wrapped(error, driver_conn, conn.dialect)
        if raised.connection_invalidated:
            conn.invalidate(error)
        raise raised from error


def run_direct(
    conn: Connection,
    statements: DirectStatements,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None,
    reads_first: bool = False,
) -> tuple[list[int], GenerationStep]:
    """The direct write on a SQLAlchemy connection in a transaction (the caller commits).

    On an async engine's connection this runs in SQLAlchemy's greenlet (see
    :func:`arun_direct_retrying`) and awaits psycopg's ``AsyncConnection`` from there."""
    driver_conn = conn.connection.driver_connection
    with driver_errors(conn, driver_conn):
        if isinstance(driver_conn, sqlite3.Connection):
            return sqlite_write(
                driver_conn,
                statements,
                app_id,
                plan,
                issue_ids,
                cipher,
                chain,
                commit=False,
                reads_first=reads_first,
            )
        if _is_async_psycopg(driver_conn):
            result: tuple[list[int], GenerationStep] = await_only(
                apsycopg_write(
                    driver_conn, statements, app_id, plan, issue_ids, cipher, chain, reads_first
                )
            )
            return result
        return psycopg_write(
            driver_conn, statements, app_id, plan, issue_ids, cipher, chain, reads_first
        )


def _is_async_psycopg(driver_conn: Any) -> bool:
    import psycopg

    return isinstance(driver_conn, psycopg.AsyncConnection)


# -- async ---------------------------------------------------------------------------------------


def runs_on_aiosqlite(engine: AsyncEngine) -> bool:
    """Whether the async engine's connections are aiosqlite's, whose worker thread can run
    the whole SQLite write as one call."""
    return engine.dialect.driver == "aiosqlite" and aiosqlite_runs_functions()


async def arun_direct_retrying(
    engine: AsyncEngine,
    statements: DirectStatements,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None,
    reads_first: bool = False,
) -> tuple[list[int], GenerationStep]:
    """:func:`run_direct` in :func:`memstore.sql.engine.write_retrying` on an async engine
    (psycopg): checkout, ``BEGIN``, the write, ``COMMIT`` and checkin in one greenlet
    instead of one per step."""
    return await greenlet_spawn(
        write_retrying,
        engine.sync_engine,
        lambda conn: run_direct(
            conn, statements, app_id, plan, issue_ids, cipher, chain, reads_first
        ),
        written_ids,
    )


async def aiosqlite_write(
    engine: AsyncEngine,
    statements: DirectStatements,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None,
    reads_first: bool = False,
) -> tuple[list[int], GenerationStep]:
    """:func:`sqlite_write` as one call on the aiosqlite connection's thread, committing
    there: checking a connection out, the write and checking it in run in one greenlet (the
    pool's rollback at check-in is the only other thread hop). A connection found closed
    before the commit is replaced and the write runs once more (a closed SQLite connection
    rolled its transaction back)."""

    def work() -> tuple[list[int], GenerationStep]:
        for attempt in (1, 2):
            with engine.sync_engine.connect() as conn:
                driver_conn: Any = conn.connection.driver_connection
                target = aiosqlite_sqlite3(driver_conn)
                run = aiosqlite_on_thread(driver_conn)
                assert run is not None  # runs_on_aiosqlite(engine) holds
                try:
                    result: tuple[list[int], GenerationStep] = await_only(
                        run(
                            sqlite_write,
                            statements,
                            app_id,
                            plan,
                            issue_ids,
                            cipher,
                            chain,
                            commit=True,
                            reads_first=reads_first,
                        )
                    )
                    return result
                except sqlite3.Error as error:
                    raised = wrapped(error, target, conn.dialect)
                    if raised.connection_invalidated:
                        conn.invalidate(error)
                        if attempt == 1:
                            continue
                    raise raised from error
        raise AssertionError("unreachable")  # pragma: no cover

    return await greenlet_spawn(work)
