"""Reads for rebuilding many windows at once (``memstore reload``): the loader's first read of
a batch of apps in one statement, and their generations in another.

The first read is the same bounded index read :func:`memstore.sql.queries.newest_rows_query`
makes for one app, once per app: on PostgreSQL one ``CROSS JOIN LATERAL`` over the array of
app ids (planned once, an index range read with its own ``LIMIT`` per app); elsewhere (SQLite,
MariaDB/MySQL, which has no ``LATERAL``) a ``UNION ALL`` of the per-app reads, at most
:data:`UNION_APPS` apps per statement (a larger union costs more to plan than it saves).
The statements are built once, the app ids bound as parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memstore.core.crypto import RowCipher
from memstore.core.loader import RowRequest
from memstore.core.rows import FetchedRows
from memstore.sql.engine import read_options, read_retrying, translated_errors
from memstore.sql.queries import (
    SUMMARY_TYPE,
    in_app,
    latest_summary_query,
    newest_first,
    written_in,
)
from memstore.sql.schema import app_generation, original

UNION_APPS = 25
"""Apps per ``UNION ALL`` statement (databases without ``LATERAL``)."""


@functools.lru_cache(maxsize=32)
def _lateral_statement(summary: bool, limit: int) -> Any:
    """PostgreSQL: the first read of every app of the array ``:r_apps`` in one statement
    (``limit`` rows each, written into the SQL: see
    :func:`memstore.sql.fastread.window_read`; the app's rows as the row-value range that
    :func:`memstore.sql.queries.in_app` writes for PostgreSQL)."""
    table, c = original.name, original.c
    rows = (
        f"SELECT a.app_id, r.id, r.payload, r.message_type "
        f"FROM unnest(CAST(:r_apps AS text[])) AS a(app_id) "
        f"CROSS JOIN LATERAL (SELECT o.{c.id.name} AS id, o.{c.payload.name} AS payload, "
        f"o.{c.message_type.name} AS message_type "
        f"FROM {table} o WHERE (o.{c.app_id.name}, o.{c.id.name}) >= (a.app_id, {-(2**63)}) "
        f"AND (o.{c.app_id.name}, o.{c.id.name}) <= (a.app_id, {2**63 - 1}) "
        f"AND o.{c.is_deleted.name} = false AND o.{c.message_type.name} <> {SUMMARY_TYPE} "
        f"ORDER BY o.{c.app_id.name} DESC, o.{c.id.name} DESC LIMIT {written_in(limit)}) r"
    )
    if summary:
        rows += (
            f" UNION ALL SELECT a.app_id, s.id, s.payload, s.message_type "
            f"FROM unnest(CAST(:r_apps AS text[])) AS a(app_id) "
            f"CROSS JOIN LATERAL (SELECT o.{c.id.name} AS id, o.{c.payload.name} AS payload, "
            f"o.{c.message_type.name} AS message_type "
            f"FROM {table} o WHERE o.{c.app_id.name} = a.app_id "
            f"AND o.{c.message_type.name} = {SUMMARY_TYPE} AND o.{c.is_deleted.name} = false "
            f"ORDER BY o.{c.message_type.name} DESC, o.{c.id.name} DESC LIMIT 1) s"
        )
    return sa.text(rows)


_COLUMNS = [original.c.app_id, original.c.id, original.c.payload, original.c.message_type]


@functools.cache
def _first_reads_statement(apps: int, summary: bool) -> Any:
    """``UNION ALL`` of the first read of ``apps`` apps (parameters ``r_app_<i>``,
    ``r_limit``), each row with its app id: ``(app_id, id, payload, message_type)``."""
    limit = sa.bindparam("r_limit", type_=sa.Integer())
    branches: list[Any] = []
    for index in range(apps):
        app = sa.bindparam(f"r_app_{index}", type_=original.c.app_id.type)
        rows = (
            sa.select(*_COLUMNS)
            .where(
                in_app(original, app),
                original.c.is_deleted == sa.false(),
                original.c.message_type != SUMMARY_TYPE,
            )
            .order_by(*newest_first(original))
            .limit(limit)
            .subquery()
        )
        branches.append(sa.select(*rows.c))
        if summary:
            newest = latest_summary_query(app, columns=_COLUMNS).subquery()
            branches.append(sa.select(*newest.c))
    return sa.union_all(*branches)


def first_reads(
    engine: Engine, apps: Sequence[str], request: RowRequest, cipher: RowCipher
) -> dict[str, FetchedRows]:
    """The rows the loader's first ``request`` (no ``before_id``/``after_id``) reads, for each
    of ``apps`` (distinct), in one statement: chronological rows per app, each decoded when
    the loader uses it (:class:`~memstore.core.rows.FetchedRows`)."""
    if not apps:
        return {}
    reads: list[tuple[Any, dict[str, Any]]] = []
    params: dict[str, Any]
    if engine.dialect.name == "postgresql":
        params = {"r_apps": list(apps)}
        reads.append((_lateral_statement(request.summary, request.limit), params))
    else:
        for start in range(0, len(apps), UNION_APPS):
            part = apps[start : start + UNION_APPS]
            params = {f"r_app_{i}": app for i, app in enumerate(part)}
            params["r_limit"] = request.limit
            reads.append((_first_reads_statement(len(part), request.summary), params))
    with translated_errors("reading history"):
        rows = read_retrying(
            engine,
            lambda conn: [row for stmt, p in reads for row in conn.execute(stmt, p).all()],
            **read_options(engine),
        )
    grouped: dict[str, list[Any]] = {app: [] for app in apps}
    for app_id, row_id, payload, kind in rows:
        found = grouped.get(app_id)
        if found is not None:
            found.append((row_id, payload, kind))
    return {app: FetchedRows.from_rows(found, cipher, app) for app, found in grouped.items()}


def generations(engine: Engine, apps: Sequence[str]) -> dict[str, int]:
    """The generation of each of ``apps`` now (0 for an app that never had a write)."""
    if not apps:
        return {}
    query = sa.select(app_generation.c.app_id, app_generation.c.generation).where(
        app_generation.c.app_id.in_(list(apps))
    )
    with translated_errors("reading history"):
        rows = read_retrying(engine, lambda conn: conn.execute(query).all(), **read_options(engine))
    found = {row.app_id: int(row.generation) for row in rows}
    return {app: found.get(app, 0) for app in apps}
