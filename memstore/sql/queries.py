"""The SQL statements over the two history tables, and the write conditions the write paths
share (:mod:`memstore.sql.repository`'s Core path, :mod:`memstore.sql.direct`'s driver path,
:mod:`memstore.sql.fastread`'s reads): built here, run there. Nothing here runs a statement.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal, _TraverseInternalsType

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


ID_FLOOR = written_in(-(2**63))
"""The least ``BIGINT``: the lower id bound of an app's rows in a row-value range."""

ID_CEILING = written_in(2**63 - 1)
"""The greatest ``BIGINT``: the upper id bound of an app's rows in a row-value range."""


class InApp(sa.ColumnElement[bool]):
    """The rows of one app (between two ids), as :func:`in_app` writes them for each
    database."""

    __visit_name__ = "memstore_in_app"
    inherit_cache = True
    _is_implicitly_boolean = True  # a condition, not a value to compare with 1
    _traverse_internals: _TraverseInternalsType = [  # noqa: RUF012 (SQLAlchemy's own)
        ("app_column", InternalTraversal.dp_clauseelement),
        ("id_column", InternalTraversal.dp_clauseelement),
        ("app", InternalTraversal.dp_clauseelement),
        ("below", InternalTraversal.dp_clauseelement),
        ("above", InternalTraversal.dp_clauseelement),
    ]
    type = sa.Boolean()

    def __init__(
        self,
        table: sa.Table,
        app_id: str | sa.BindParameter[str],
        below: int | sa.BindParameter[int] | None = None,
        above: int | sa.BindParameter[int] | None = None,
    ) -> None:
        self.table = table
        self.app_column: sa.ColumnElement[str] = table.c.app_id
        self.id_column: sa.ColumnElement[int] = table.c.id
        # bound values typed as their columns (an untyped bindparam takes the column's type)
        self.app: sa.ColumnElement[str] = (table.c.app_id == app_id).right
        self.below = None if below is None else (table.c.id < below).right
        self.above = None if above is None else (table.c.id > above).right

    @property
    def _from_objects(self) -> list[Any]:  # the FROM this condition needs: its table
        return [self.table]

    def _id_bounds(self) -> list[sa.ColumnElement[bool]]:
        bounds = []
        if self.below is not None:
            bounds.append(self.id_column < self.below)
        if self.above is not None:
            bounds.append(self.id_column > self.above)
        return bounds

    def equality(self) -> sa.ColumnElement[bool]:
        return sa.and_(self.app_column == self.app, *self._id_bounds())

    def one_value_range(self) -> sa.ColumnElement[bool]:
        return sa.and_(self.app_column >= self.app, self.app_column <= self.app, *self._id_bounds())

    def row_value_range(self) -> sa.ColumnElement[bool]:
        # inclusive bounds: a row comparison is estimated by its leading column's operator,
        # and app_id < :app could be estimated at no rows at all
        low = ID_FLOOR if self.above is None else self.above + written_in(1)
        high = ID_CEILING if self.below is None else self.below - written_in(1)
        rows = sa.tuple_(self.app_column, self.id_column)
        return sa.and_(rows >= sa.tuple_(self.app, low), rows <= sa.tuple_(self.app, high))


@compiles(InApp)
def _in_app_equality(element: InApp, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.equality().self_group(), **kw))


@compiles(InApp, "postgresql")
def _in_app_row_values(element: InApp, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.row_value_range().self_group(), **kw))


@compiles(InApp, "mysql")
@compiles(InApp, "mariadb")
def _in_app_one_value_range(element: InApp, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.one_value_range().self_group(), **kw))


def in_app(
    table: sa.Table,
    app_id: str | sa.BindParameter[str],
    *,
    below: int | sa.BindParameter[int] | None = None,
    above: int | sa.BindParameter[int] | None = None,
) -> sa.ColumnElement[bool]:
    """The rows of one app: ``app_id = :app`` (and ``id < below``, ``id > above`` when
    given), spelled per database so that a read ordered by :func:`newest_first` (or
    ``app_id, id``) with a ``LIMIT`` is a range scan of the ``(app_id, id)`` index that stops
    at the limit, whatever the planner knows about the table: statistics or none (before a
    table's first ``ANALYZE``: after a bulk import, autovacuum lagging), a generic plan of a
    prepared statement, one huge app among many small ones, its rows the oldest or the
    newest. Each spelling holds exactly the rows equality would (ids compare byte for byte,
    and every id lies in ``BIGINT``). ``tests/integration/test_query_plans.py`` checks every
    hot read with EXPLAIN, before and after ``ANALYZE``, on each database:

    * PostgreSQL: the row-value range ``(app_id, id) >= (:app, <least bigint>) AND (app_id,
      id) <= (:app, <greatest bigint>)``. With plain equality PostgreSQL folds ``app_id`` out
      of the ordering: with statistics it then walks the primary key backwards through every
      newer row of other apps (for an app whose rows are old: 100 ms at 300k rows instead of
      0.2 ms); without statistics it estimates an app at 0.5% of the table and, when that is
      near the limit, reads and sorts every row of the app instead (100-250 ms for an app of
      200k rows). The one-value range ``app_id >= :app AND app_id <= :app`` keeps the order
      but is estimated at 0.5% without statistics too. A row-value comparison is estimated
      from its leading column alone: the two bounds together at a ninth of the table without
      statistics, and with statistics at least at the app's share of it, so the ordered scan
      with its limit costs less than reading the app's rows and sorting them (without
      statistics, unless the whole table is only a few dozen limits long: then a sort reads
      little either way).
    * MySQL/MariaDB: the one-value range. MariaDB does not use a row-value comparison as an
      index range (it scans the whole index), and with equality it sorts the app's rows
      (``ORDER BY app_id DESC, id DESC``) or, before ``ANALYZE TABLE``, walks the primary key
      (``ORDER BY id DESC``).
    * SQLite and others: plain equality.

    ``below`` / ``above`` (a keyset page's bounds) belong here rather than beside: on
    PostgreSQL they become the row values' own bounds, ``(:app, :below - 1)`` and ``(:app,
    :above + 1)``. Beside them, ``id < :before AND id > :after`` is a range of the primary key
    that a generic plan (a statement the driver prepared, planned without its values)
    estimated at 0.5% of the table and read, sorting what it found. Other id conditions
    beside this one still hold and every database starts the scan at them, but PostgreSQL
    may read the app's other index entries to check them.
    """
    if "id" not in table.c:  # a table keyed by (app_id, ...) without ids: its key's prefix
        assert below is None and above is None
        return table.c.app_id == app_id
    return InApp(table, app_id, below, above)


def newest_first(table: sa.Table) -> tuple[sa.UnaryExpression[Any], sa.UnaryExpression[Any]]:
    """The ``(app_id, id)`` index order, newest first (see :func:`in_app`): ``app_id`` is
    named so that no database reads the app's rows in primary-key order instead."""
    return table.c.app_id.desc(), table.c.id.desc()


def of_type(
    app_id: str | sa.BindParameter[str], message_type: sa.ColumnElement[str]
) -> sa.ColumnElement[bool]:
    """The original rows of one app and one ``message_type`` (:data:`SUMMARY_TYPE`,
    :data:`TOOL_REQUEST_TYPE`), read in :data:`NEWEST_OF_TYPE` order: a range of the
    ``(app_id, message_type, id)`` index. Plain equality on both columns: PostgreSQL (with
    or without statistics), MariaDB (before and after ``ANALYZE TABLE``) and SQLite then
    read that index in order (``tests/integration/test_query_plans.py``). A row-value range
    as in :func:`in_app` does not work here: PostgreSQL then reads the app's rows through
    ``(app_id, id)`` and sorts them by type (an incremental sort over the whole app)."""
    return sa.and_(original.c.app_id == app_id, original.c.message_type == message_type)


NEWEST_OF_TYPE = (original.c.message_type.desc(), original.c.id.desc())
"""The ``(app_id, message_type, id)`` index order, newest first, for :func:`of_type`."""


def newest_rows_query(app_id: str, request: RowRequest) -> sa.Select[Any]:
    """The newest non-deleted original rows of one app (newest first), as the loader asks:
    summary rows left out; with ``request.summary`` also the app's newest summary row (one
    statement: ``UNION ALL`` of the two bounded index reads; the caller sorts by id)."""
    if request.requests_only:
        return (
            sa.select(original.c.id, original.c.payload)
            .where(*_requests_between(app_id, request.before_id, request.after_id))
            .order_by(*NEWEST_OF_TYPE)
            .limit(request.limit)
        )
    query = (
        sa.select(original.c.id, original.c.payload)
        .where(
            in_app(original, app_id, below=request.before_id, above=request.after_id),
            original.c.is_deleted == sa.false(),
            original.c.message_type != SUMMARY_TYPE,
        )
        .order_by(*newest_first(original))
        .limit(request.limit)
    )
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
def window_statement(
    before: bool,
    after: bool,
    summary: bool,
    limit: int | None = None,
    requests_only: bool = False,
) -> Any:
    """The loader's read of one shape, built once with bound parameters (building the
    ``UNION ALL`` of two subqueries per call costs more than running it): rows of
    ``(id, payload, message_type)``, the type telling summary rows apart undecoded.
    ``limit``: the row limit written into the SQL (else bound as ``w_limit``); see
    :func:`memstore.sql.fastread.window_read`. ``requests_only``: the tool-request rows alone,
    read on the ``(app_id, message_type, id)`` index
    (:attr:`~memstore.core.loader.RowRequest.requests_only`)."""
    below = sa.bindparam("w_before", type_=sa.BigInteger()) if before else None
    above = sa.bindparam("w_after", type_=sa.BigInteger()) if after else None
    w_limit = sa.bindparam("w_limit", type_=sa.Integer()) if limit is None else written_in(limit)
    if requests_only:
        requests: Any = (
            sa.select(*_WINDOW_COLUMNS)
            .where(*_requests_between(_WINDOW_APP, below, above))
            .order_by(*NEWEST_OF_TYPE)
            .limit(w_limit)
        )
        return requests
    query = (
        sa.select(*_WINDOW_COLUMNS)
        .where(
            in_app(original, _WINDOW_APP, below=below, above=above),
            original.c.is_deleted == sa.false(),
            original.c.message_type != SUMMARY_TYPE,
        )
        .order_by(*newest_first(original))
        .limit(w_limit)
    )
    if not summary:
        return query
    newest_summary = summary_statement().subquery()
    rows = query.subquery()
    return sa.union_all(sa.select(*rows.c), sa.select(*newest_summary.c))


def _requests_between(
    app_id: str | sa.BindParameter[str],
    below: int | sa.BindParameter[int] | None,
    above: int | sa.BindParameter[int] | None,
) -> list[sa.ColumnElement[bool]]:
    """The app's non-deleted tool-request rows with ``id < below`` and ``id > above`` (each
    when given): a range of the ``(app_id, message_type, id)`` index, read in
    :data:`NEWEST_OF_TYPE` order (one probe for the newest)."""
    conditions = [of_type(app_id, TOOL_REQUEST_TYPE), original.c.is_deleted == sa.false()]
    if below is not None:
        conditions.append(original.c.id < below)
    if above is not None:
        conditions.append(original.c.id > above)
    return conditions


def summary_statement() -> Any:
    """The newest summary row of the app bound as ``w_app``, as ``(id, payload,
    message_type)`` (the second statement of a split window read)."""
    return latest_summary_query(_WINDOW_APP, columns=_WINDOW_COLUMNS)


def window_rows_statement(app_id: str, request: RowRequest) -> tuple[Any, dict[str, Any]]:
    """The statement and parameters of one loader read (:func:`newest_rows_query`'s rows,
    cached per shape)."""
    statement = window_statement(
        request.before_id is not None,
        request.after_id is not None,
        request.summary,
        requests_only=request.requests_only,
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
        .where(of_type(app_id, SUMMARY_TYPE), original.c.is_deleted == sa.false())
        .order_by(*NEWEST_OF_TYPE)
        .limit(ONE_ROW)
    )


def oldest_first_query(app_id: str, after_id: int, limit: int) -> sa.Select[Any]:
    """One keyset page of the app's non-deleted original rows with ``id > after_id``, oldest
    first: the walk over a whole history (CLI, adapters)."""
    return (
        sa.select(original.c.id, original.c.payload)
        .where(in_app(original, app_id, above=after_id), original.c.is_deleted == sa.false())
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


def newest_id_subquery(table: sa.Table, app_id: str | sa.BindParameter[str]) -> Any:
    """The app's newest id in ``table`` (deleted rows included) as a scalar subquery: one
    index lookup."""
    return (
        sa.select(table.c.id)
        .where(in_app(table, app_id))
        .order_by(*newest_first(table))
        .limit(ONE_ROW)
        .scalar_subquery()
    )


def newest_id_query(app_id: str | sa.BindParameter[str]) -> sa.Select[Any]:
    """The app's newest id in each history (``None`` for an empty one), deleted rows
    included: one row, two index lookups."""
    return sa.select(newest_id_subquery(original, app_id), newest_id_subquery(display, app_id))


NEWEST_IDS = newest_id_query(sa.bindparam("app_id", type_=sa.String))
""":func:`newest_id_query` built once, the app id bound as ``:app_id``."""


def request_scan_query(
    app_id: str | sa.BindParameter[str], before_id: int | sa.BindParameter[int] | None
) -> sa.Select[Any]:
    """One page of the app's tool-request rows below ``before_id``, newest first: a range of
    the ``(app_id, message_type, id)`` index (see :func:`of_type`)."""
    return (
        sa.select(original.c.id, original.c.payload)
        .where(*_requests_between(app_id, before_id, None))
        .order_by(*NEWEST_OF_TYPE)
        .limit(written_in(REQUEST_SCAN_PAGE))
    )


def requested_ids_in(payload: str, app_id: str, row_id: int, cipher: RowCipher) -> list[str]:
    """The call ids a stored tool-request payload (row ``row_id`` of ``app_id``) holds."""
    data = json.loads(open_payload(cipher, app_id, row_id, payload))
    return [call["id"] for call in data.get("tool_requests", [])]


def missing_after_page(
    missing: set[str], page: Sequence[Sequence[Any]], app_id: str, cipher: RowCipher
) -> int | None:
    """Strike the call ids ``page`` (a :func:`request_scan_query` page: ``(id, payload)``
    rows, newest first) requests off ``missing``; the id to read the next page below, or
    ``None`` when no page is left to read."""
    for row_id, payload in page:
        missing.difference_update(requested_ids_in(payload, app_id, row_id, cipher))
    if missing and len(page) >= REQUEST_SCAN_PAGE:
        return int(page[-1][0])
    return None


def history_query(app_id: str, limit: int, before_id: int | None) -> sa.Select[Any]:
    return (
        sa.select(display)
        .where(in_app(display, app_id, below=before_id), display.c.is_deleted == sa.false())
        .order_by(*newest_first(display))
        .limit(limit)
    )


Model = TypeVar("Model", bound=BaseModel)


def model_from_row(model: type[Model], row: Any, **opened: Any) -> Model:
    """``model`` with each field from ``row``'s column of that name, but those in ``opened``
    (a sealed column's value, opened)."""
    values = {name: getattr(row, name) for name in model.model_fields if name not in opened}
    return model(**values, **opened)


def display_entry(row: Any, cipher: RowCipher) -> DisplayEntry:
    return model_from_row(
        DisplayEntry, row, text=open_content(cipher, row.app_id, row.id, row.content)
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
