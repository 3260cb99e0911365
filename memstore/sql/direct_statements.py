"""The direct write's statements (:mod:`memstore.sql.direct`), compiled once per dialect by
SQLAlchemy (same SQL, same casts) to be sent straight on the driver connection, and each
table's insert with its rows' values through the columns' bind processors."""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Engine

from memstore.sql.generation import bump_statement
from memstore.sql.queries import (
    NEWEST_IDS,
    latest_summary_query,
    newest_id_subquery,
    request_scan_query,
)
from memstore.sql.schema import app_generation, display, original

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
    return request_scan_query(
        _APP, sa.bindparam("d_before", type_=sa.BigInteger()) if before else None
    )


def _newest_id(table: sa.Table) -> Any:
    return newest_id_subquery(table, _APP)


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
        self._columns = operator.itemgetter(*self.names)
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
        columns = self._columns
        # a write's rows share one app, user and instant: the very objects, processed once
        raw: dict[int, Any] = {}
        done: dict[int, Any] = {}
        out: list[Any] = []
        for row in rows:
            values = list(columns(row))
            for index, process in self.processors:
                value = values[index]
                if value is None:
                    continue
                if raw.get(index, raw) is not value:
                    raw[index] = value
                    done[index] = process(value)
                values[index] = done[index]
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
    listening to its statements or transactions."""
    dialect = engine.dialect
    if dialect.driver not in SQLITE_DRIVERS + PSYCOPG_DRIVERS:
        return None
    if dialect.driver in SQLITE_DRIVERS and sqlite3.sqlite_version_info < (3, 35):
        return None  # no RETURNING (the driver links the same library as the sqlite3 module)
    events = engine.dispatch
    if engine.echo or events.before_cursor_execute or events.after_cursor_execute:
        return None
    if events.begin or events.commit or events.rollback:
        return None  # the direct write ends its transaction on the driver connection
    key = (dialect.name, dialect.driver, dialect.paramstyle)
    cached = _STATEMENTS.get(key)
    if cached is None:
        cached = _STATEMENTS[key] = DirectStatements(dialect)
    return cached
