"""The SQL statements over the two history tables, and the write conditions the write paths
share (:mod:`memstore.sql.repository`'s Core path, :mod:`memstore.sql.direct`'s driver path,
:mod:`memstore.sql.fastread`'s reads): built here, run there. Nothing here runs a statement.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from memstore.core.crypto import RowCipher
from memstore.core.loader import RowRequest
from memstore.core.rows import (
    SUMMARY,
    TOOL_REQUEST,
    decode_row,
    open_content,
    open_payload,
)
from memstore.core.window import StoredMessage
from memstore.errors import CompactionConflictError
from memstore.reports import DisplayEntry
from memstore.sql.generation import GenerationStep
from memstore.sql.schema import (
    adk_state,
    conversation_entries,
    conversations,
    display,
    original,
    tool_executions,
)

REQUEST_SCAN_PAGE = 200


@dataclass(frozen=True, slots=True)
class ChainCheck:
    """A compaction's write condition: the app's newest summary row is still ``previous_id``
    (``None``: the app still has no summary)."""

    app_id: str
    previous_id: int | None

    def check(self, newest_summary_id: int | None) -> None:
        if newest_summary_id != self.previous_id:
            raise CompactionConflictError(
                f"app {self.app_id!r} got another summary while this compaction was "
                "summarizing; nothing was written, run it again"
            )


def written_in(value: str | int) -> sa.ColumnElement[Any]:
    """A constant of memstore's own (a ``message_type``, a row limit) written into the SQL,
    not bound. PostgreSQL plans a prepared statement once for every value (a generic plan)
    only when that plan costs about what a plan for the actual values does; compared with a
    bound ``message_type`` or limited by a bound ``LIMIT`` (costed as a tenth of the rows),
    the window read planned anew on every call, ~80-100 µs of a read."""
    if isinstance(value, int):
        return sa.literal_column(str(int(value)), sa.Integer())
    if not value.replace("_", "").isalnum():
        raise ValueError("only memstore's own identifiers are written into SQL")
    return sa.literal_column(f"'{value}'", sa.String())


ONE_ROW = written_in(1)
"""``LIMIT 1``, written into the SQL (see :func:`written_in`)."""

SUMMARY_TYPE = written_in(SUMMARY)
"""The summary rows' ``message_type``, written into the SQL (see :func:`written_in`)."""

TOOL_REQUEST_TYPE = written_in(TOOL_REQUEST)
"""The tool-request rows' ``message_type``, written into the SQL (see :func:`written_in`)."""


def in_app(table: sa.Table, app_id: str | sa.BindParameter[str]) -> sa.ColumnElement[bool]:
    """``app_id = :app``, spelled as a one-value range.

    With plain equality PostgreSQL folds ``app_id`` out of the sort and, for an app whose rows
    are old, scans the primary key backwards through every newer row of other apps (100 ms at
    300k rows instead of 0.2 ms). The range keeps ``ORDER BY app_id, id`` meaningful, so every
    database walks the ``(app_id, id)`` index. Ids compare byte for byte, so the range holds
    exactly the rows equality would.
    """
    return sa.and_(table.c.app_id >= app_id, table.c.app_id <= app_id)


def newest_first(table: sa.Table) -> tuple[sa.UnaryExpression[Any], sa.UnaryExpression[Any]]:
    """The ``(app_id, id)`` index order, newest first (see :func:`in_app`)."""
    return table.c.app_id.desc(), table.c.id.desc()


def newest_rows_query(app_id: str, request: RowRequest) -> sa.Select[Any]:
    """The newest non-deleted original rows of one app (newest first), as the loader asks:
    summary rows left out; with ``request.summary`` also the app's newest summary row (one
    statement: ``UNION ALL`` of the two bounded index reads; the caller sorts by id)."""
    query = (
        sa.select(original.c.id, original.c.payload)
        .where(
            in_app(original, app_id),
            original.c.is_deleted == sa.false(),
            original.c.message_type != SUMMARY_TYPE,
        )
        .order_by(*newest_first(original))
        .limit(request.limit)
    )
    if request.before_id is not None:
        query = query.where(original.c.id < request.before_id)
    if request.after_id is not None:
        query = query.where(original.c.id > request.after_id)
    if request.summary:
        summary = latest_summary_query(app_id, payload=True).subquery()
        rows = query.subquery()
        return sa.union_all(
            sa.select(rows.c.id, rows.c.payload), sa.select(summary.c.id, summary.c.payload)
        )  # type: ignore[return-value]
    return query


_WINDOW_APP = sa.bindparam("w_app", type_=original.c.app_id.type)
_WINDOW_COLUMNS = [original.c.id, original.c.payload, original.c.message_type]
"""A window read's rows: the type tells summary rows apart without decoding them."""


@functools.lru_cache(maxsize=256)
def window_statement(before: bool, after: bool, summary: bool, limit: int | None = None) -> Any:
    """The loader's read of one shape, built once with bound parameters (building the
    ``UNION ALL`` of two subqueries per call costs more than running it): rows of
    ``(id, payload, message_type)``, the type telling summary rows apart undecoded.
    ``limit``: the row limit written into the SQL (else bound as ``w_limit``); see
    :func:`memstore.sql.fastread.window_read`."""
    query = (
        sa.select(*_WINDOW_COLUMNS)
        .where(
            in_app(original, _WINDOW_APP),
            original.c.is_deleted == sa.false(),
            original.c.message_type != SUMMARY_TYPE,
        )
        .order_by(*newest_first(original))
        .limit(sa.bindparam("w_limit", type_=sa.Integer()) if limit is None else written_in(limit))
    )
    if before:
        query = query.where(original.c.id < sa.bindparam("w_before", type_=sa.BigInteger()))
    if after:
        query = query.where(original.c.id > sa.bindparam("w_after", type_=sa.BigInteger()))
    if not summary:
        return query
    newest_summary = summary_statement().subquery()
    rows = query.subquery()
    return sa.union_all(sa.select(*rows.c), sa.select(*newest_summary.c))


def summary_statement() -> Any:
    """The newest summary row of the app bound as ``w_app``, as ``(id, payload,
    message_type)`` (the second statement of a split window read)."""
    return latest_summary_query(_WINDOW_APP, columns=_WINDOW_COLUMNS)


def window_rows_statement(app_id: str, request: RowRequest) -> tuple[Any, dict[str, Any]]:
    """The statement and parameters of one loader read (:func:`newest_rows_query`'s rows,
    cached per shape)."""
    statement = window_statement(
        request.before_id is not None, request.after_id is not None, request.summary
    )
    params: dict[str, Any] = {"w_app": app_id, "w_limit": request.limit}
    if request.before_id is not None:
        params["w_before"] = request.before_id
    if request.after_id is not None:
        params["w_after"] = request.after_id
    return statement, params


def latest_summary_query(
    app_id: str | sa.BindParameter[str],
    *,
    payload: bool = False,
    columns: Sequence[sa.ColumnElement[Any]] | None = None,
) -> sa.Select[Any]:
    """The app's newest non-deleted summary row (its id, and payload when asked, or the given
    ``columns``): one lookup on the ``(app_id, message_type, id)`` index."""
    if columns is None:
        columns = [original.c.id, original.c.payload] if payload else [original.c.id]
    return (
        sa.select(*columns)
        .where(
            original.c.app_id == app_id,
            original.c.message_type == SUMMARY_TYPE,
            original.c.is_deleted == sa.false(),
        )
        .order_by(original.c.message_type.desc(), original.c.id.desc())
        .limit(ONE_ROW)
    )


def oldest_first_query(app_id: str, after_id: int, limit: int) -> sa.Select[Any]:
    """One keyset page of the app's non-deleted original rows with ``id > after_id``, oldest
    first: the walk over a whole history (CLI, adapters)."""
    return (
        sa.select(original.c.id, original.c.payload)
        .where(
            in_app(original, app_id),
            original.c.is_deleted == sa.false(),
            original.c.id > after_id,
        )
        .order_by(original.c.app_id, original.c.id)
        .limit(limit)
    )


def rows_to_messages(rows: Iterable[Any], app_id: str, cipher: RowCipher) -> list[StoredMessage]:
    """Result rows of ``app_id`` (newest first, or in any order) to chronological stored
    messages. The rows are fetched whole first: a row that fails to decode must not leave a
    half-read cursor (on SQLite an unfinished statement keeps its read snapshot on the pooled
    connection)."""
    fetched = list(rows)
    out = [
        StoredMessage(row.id, decode_row(cipher, app_id, row.id, row.payload)) for row in fetched
    ]
    out.sort(key=_row_id)
    return out


def _row_id(row: StoredMessage) -> int:
    return row.id


def newest_id_query(app_id: str | sa.BindParameter[str]) -> sa.Select[Any]:
    """The app's newest id in each history (``None`` for an empty one), deleted rows
    included: one row, two index lookups."""

    def newest(table: sa.Table) -> sa.ScalarSelect[Any]:
        return (
            sa.select(table.c.id)
            .where(in_app(table, app_id))
            .order_by(*newest_first(table))
            .limit(ONE_ROW)
            .scalar_subquery()
        )

    return sa.select(newest(original), newest(display))


NEWEST_IDS = newest_id_query(sa.bindparam("app_id", type_=sa.String))
""":func:`newest_id_query` built once, the app id bound as ``:app_id``."""


def request_scan_query(app_id: str, before_id: int | None) -> sa.Select[Any]:
    """One page of the app's tool-request rows below ``before_id``, newest first."""
    query = (
        sa.select(original.c.id, original.c.payload)
        .where(
            in_app(original, app_id),
            original.c.message_type == TOOL_REQUEST_TYPE,
            original.c.is_deleted == sa.false(),
        )
        .order_by(*newest_first(original))
        .limit(written_in(REQUEST_SCAN_PAGE))
    )
    if before_id is not None:
        query = query.where(original.c.id < before_id)
    return query


def requested_ids_in(payload: str, app_id: str, row_id: int, cipher: RowCipher) -> list[str]:
    """The call ids a stored tool-request payload (row ``row_id`` of ``app_id``) holds."""
    data = json.loads(open_payload(cipher, app_id, row_id, payload))
    return [call["id"] for call in data.get("tool_requests", [])]


def history_query(app_id: str, limit: int, before_id: int | None) -> sa.Select[Any]:
    query = (
        sa.select(display)
        .where(in_app(display, app_id), display.c.is_deleted == sa.false())
        .order_by(*newest_first(display))
        .limit(limit)
    )
    if before_id is not None:
        query = query.where(display.c.id < before_id)
    return query


def display_entry(row: Any, cipher: RowCipher) -> DisplayEntry:
    return DisplayEntry(
        id=row.id,
        app_id=row.app_id,
        user_id=row.user_id,
        role=row.role,
        text=open_content(cipher, row.app_id, row.id, row.content),
        status=row.status,
        created_at=row.created_at,
    )


def purge_statements(app_id: str) -> tuple[sa.Delete, sa.Delete, sa.Delete]:
    """Exact-match deletes of one app's rows: original, display, tool executions."""
    return (
        original.delete().where(original.c.app_id == app_id),
        display.delete().where(display.c.app_id == app_id),
        tool_executions.delete().where(tool_executions.c.app_id == app_id),
    )


def adapter_record_deletes(app_id: str) -> tuple[sa.Delete, ...]:
    """Exact-match deletes of the framework adapters' bookkeeping for one app: pydantic-ai's
    entry locations in the app and the conversation record named after it, and the ADK
    session row whose events the app holds. A purged app leaves no record pointing at rows
    that are gone."""
    return (
        conversation_entries.delete().where(conversation_entries.c.app_id == app_id),
        conversations.delete().where(conversations.c.conversation_id == app_id),
        adk_state.delete().where(adk_state.c.history_app_id == app_id),
    )


def written_ids(result: tuple[list[int], GenerationStep | None]) -> list[int]:
    """The original-history ids a write's result names (what a commit in doubt reports)."""
    return result[0]
