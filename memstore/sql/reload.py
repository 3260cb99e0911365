"""Reads for rebuilding many windows at once (``memstore reload``): the loader's first read of
a batch of apps in one statement, and their generations in another.

The first read is the same bounded index read :func:`memstore.sql.repository.newest_rows_query`
makes for one app, once per app, joined by ``UNION ALL`` (portable: SQLite, PostgreSQL,
MariaDB/MySQL); each branch stays an index range read with its own ``LIMIT``. The statement
is built once per batch size and summary shape, the app ids bound as parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.engine import Engine

from memstore.core.crypto import RowCipher
from memstore.core.loader import RowRequest
from memstore.core.rows import SUMMARY, open_payload
from memstore.core.window import StoredMessage
from memstore.errors import MemstoreError
from memstore.messages import MESSAGE_LIST_ADAPTER, STORED
from memstore.sql.engine import read_options, read_retrying, translated_errors
from memstore.sql.repository import in_app, newest_first, rows_to_messages
from memstore.sql.schema import app_generation, original


@functools.cache
def _first_reads_statement(apps: int, summary: bool) -> Any:
    """``UNION ALL`` of the first read of ``apps`` apps (parameters ``r_app_<i>``,
    ``r_limit``), each row with its app id."""
    limit = sa.bindparam("r_limit", type_=sa.Integer())
    branches: list[Any] = []
    for index in range(apps):
        app = sa.bindparam(f"r_app_{index}", type_=original.c.app_id.type)
        rows = (
            sa.select(original.c.app_id, original.c.id, original.c.payload)
            .where(
                in_app(original, app),
                original.c.is_deleted == sa.false(),
                original.c.message_type != SUMMARY,
            )
            .order_by(*newest_first(original))
            .limit(limit)
            .subquery()
        )
        branches.append(sa.select(rows.c.app_id, rows.c.id, rows.c.payload))
        if summary:
            newest = (
                sa.select(original.c.app_id, original.c.id, original.c.payload)
                .where(
                    original.c.app_id == app,
                    original.c.message_type == SUMMARY,
                    original.c.is_deleted == sa.false(),
                )
                .order_by(original.c.message_type.desc(), original.c.id.desc())
                .limit(1)
                .subquery()
            )
            branches.append(sa.select(newest.c.app_id, newest.c.id, newest.c.payload))
    return sa.union_all(*branches)


def first_reads(
    engine: Engine, apps: Sequence[str], request: RowRequest, cipher: RowCipher
) -> dict[str, list[StoredMessage]]:
    """The rows the loader's first ``request`` (no ``before_id``/``after_id``) reads, for each
    of ``apps`` (distinct), in one statement: chronological stored messages per app."""
    if not apps:
        return {}
    statement = _first_reads_statement(len(apps), request.summary)
    params: dict[str, Any] = {f"r_app_{i}": app for i, app in enumerate(apps)}
    params["r_limit"] = request.limit
    with translated_errors("reading history"):
        rows = read_retrying(
            engine, lambda conn: conn.execute(statement, params).all(), **read_options(engine)
        )
    grouped: dict[str, list[Any]] = {app: [] for app in apps}
    for row in rows:
        found = grouped.get(row.app_id)
        if found is not None:
            found.append(row)
    return {app: _decoded(found, app, cipher) for app, found in grouped.items()}


def _decoded(rows: list[Any], app_id: str, cipher: RowCipher) -> list[StoredMessage]:
    """One app's rows, chronological: every payload validated in one pass over a joined JSON
    array; a row that does not decode goes through the row-by-row path, which names it."""
    rows.sort(key=_row_id)
    try:
        payloads = [open_payload(cipher, app_id, row.id, row.payload) for row in rows]
        messages = MESSAGE_LIST_ADAPTER.validate_json(
            "[" + ",".join(payloads) + "]", context=STORED
        )
    except (ValidationError, ValueError, MemstoreError):
        return rows_to_messages(rows, app_id, cipher)
    return [StoredMessage(row.id, message) for row, message in zip(rows, messages, strict=True)]


def _row_id(row: Any) -> int:
    return int(row.id)


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
