"""Export and import statements: keyset pages out, idempotent batches in. Thin: the format and
the import decision live in :mod:`memstore.core.export`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Engine

from memstore.core.crypto import RowCipher
from memstore.core.export import (
    DISPLAY,
    ORIGINAL,
    TOOL_EXECUTION,
    AppCounts,
    ImportRow,
    changed_apps,
    plan_import,
    seal_inserts,
)
from memstore.reports import ImportCounts, ImportReport
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import in_app
from memstore.sql.runners import Steps, run_connected
from memstore.sql.schema import display, original, tool_executions
from memstore.sql.user_data import (
    execution_position,
    executions_by_key,
    unowned_executions_of,
    user_executions_page,
)

EXPORT_PAGE = 1000
IMPORT_BATCH = 500
"""Records per import transaction: each batch commits whole or not at all."""

TABLES = {ORIGINAL: original, DISPLAY: display}

Position = Callable[[Mapping[Any, Any]], Any]
"""Where a keyset page ends: the ``after`` of the next page, from its last row."""


def row_position(row: Mapping[Any, Any]) -> int:
    return int(row["id"])


def key_position(row: Mapping[Any, Any]) -> str:
    return str(row["idempotency_key"])


def app_page(table: sa.Table, app_id: str, after: int) -> sa.Select[Any]:
    """One keyset page of an app's rows (soft-deleted ones too), oldest first."""
    return (
        sa.select(table)
        .where(in_app(table, app_id), table.c.id > after)
        .order_by(table.c.app_id, table.c.id)
        .limit(EXPORT_PAGE)
    )


def user_page(table: sa.Table, user_id: str, after: int) -> sa.Select[Any]:
    return (
        sa.select(table)
        .where(table.c.user_id == user_id, table.c.id > after)
        .order_by(table.c.id)
        .limit(EXPORT_PAGE)
    )


def executions_page(app_id: str, after: str | None) -> sa.Select[Any]:
    query = executions_by_key(tool_executions.c.app_id == app_id, EXPORT_PAGE)
    if after is not None:
        query = query.where(tool_executions.c.idempotency_key > after)
    return query


def existing_ids_query(table: sa.Table, ids: Sequence[int]) -> sa.Select[Any]:
    return sa.select(table.c.id, table.c.app_id).where(table.c.id.in_(ids))


def existing_keys_query(keys: Sequence[tuple[str, str]]) -> sa.Select[Any]:
    by_app: dict[str, list[str]] = {}
    for app_id, key in keys:
        by_app.setdefault(app_id, []).append(key)
    return sa.select(tool_executions.c.app_id, tool_executions.c.idempotency_key).where(
        sa.or_(
            *(
                sa.and_(
                    tool_executions.c.app_id == app_id,
                    tool_executions.c.idempotency_key.in_(app_keys),
                )
                for app_id, app_keys in by_app.items()
            )
        )
    )


def existing_queries(batch: Sequence[ImportRow]) -> dict[str, sa.Select[Any]]:
    """The lookups of keys already stored, per table that the batch touches."""
    queries: dict[str, sa.Select[Any]] = {}
    for name, table in TABLES.items():
        ids = [row.key for row in batch if row.table == name]
        if ids:
            queries[name] = existing_ids_query(table, ids)
    keys = [row.key for row in batch if row.table == TOOL_EXECUTION]
    if keys:
        queries[TOOL_EXECUTION] = existing_keys_query(keys)
    return queries


def existing_from(table: str, rows: Sequence[Any]) -> dict[Any, str]:
    if table == TOOL_EXECUTION:
        return {(row[0], row[1]): row[0] for row in rows}
    return {row[0]: row[1] for row in rows}


INSERT_TABLES = {ORIGINAL: original, DISPLAY: display, TOOL_EXECUTION: tool_executions}


def import_report(records: int, counts: Mapping[str, AppCounts]) -> ImportReport:
    apps = {
        app: ImportCounts(
            original_inserted=c.original.inserted,
            original_skipped=c.original.skipped,
            display_inserted=c.display.inserted,
            display_skipped=c.display.skipped,
            tool_executions_inserted=c.tool_executions.inserted,
            tool_executions_skipped=c.tool_executions.skipped,
        )
        for app, c in counts.items()
    }
    total = {
        name: sum(getattr(c, name) for c in apps.values()) for name in ImportCounts.model_fields
    }
    return ImportReport(records=records, apps=apps, total=ImportCounts(**total))


def import_steps(
    dialect: Dialect, cipher: RowCipher, batch: Sequence[ImportRow], counts: dict[str, AppCounts]
) -> Steps[set[str]]:
    """Insert the batch's new rows (statement steps, run in one transaction); the apps whose
    original history got rows."""
    existing: dict[str, dict[Any, str]] = {}
    for name, query in existing_queries(batch).items():
        existing[name] = existing_from(name, (yield query, None).all())
    inserts = seal_inserts(cipher, plan_import(batch, existing, counts))
    for app_id in changed_apps(inserts):
        # in-process windows of other processes see it
        yield from generation.bump_steps(dialect, app_id)
    for name, rows in inserts.items():
        if rows:
            yield INSERT_TABLES[name].insert(), rows
    return {row["app_id"] for row in inserts[ORIGINAL]}


def unowned_queries(app_id: str, user_id: str, call_ids: Sequence[str]) -> Iterator[sa.Select[Any]]:
    """The lookups of :func:`~memstore.sql.user_data.unowned_executions_of`, a page of call
    ids each."""
    for start in range(0, len(call_ids), EXPORT_PAGE):
        yield unowned_executions_of(app_id, user_id, list(call_ids[start : start + EXPORT_PAGE]))


Pages = TypeVar("Pages", Iterator[Any], AsyncIterator[Any])


class ExportPages(Generic[Pages]):
    """Which keyset pages an export reads, on one engine; :meth:`pages` reads them
    (:class:`SqlExport`, and :class:`~memstore.sql.aio_lifecycle.AsyncSqlExport`)."""

    def __init__(self, engine: Any, cipher: RowCipher) -> None:
        self.engine = engine
        self.cipher = cipher

    def pages(self, make: Callable[[Any], sa.Select[Any]], start: Any, position: Position) -> Pages:
        """Rows of ``make(after)`` page by page, a short connection per page."""
        raise NotImplementedError

    def app_rows(self, table: sa.Table, app_id: str) -> Pages:
        return self.pages(partial(app_page, table, app_id), -1, row_position)

    def user_rows(self, table: sa.Table, user_id: str) -> Pages:
        return self.pages(partial(user_page, table, user_id), -1, row_position)

    def app_executions(self, app_id: str) -> Pages:
        return self.pages(partial(executions_page, app_id), None, key_position)

    def user_executions(self, user_id: str) -> Pages:
        """The loop-guard records carrying ``user_id``, page by page."""
        page = partial(user_executions_page, user_id, EXPORT_PAGE)
        return self.pages(page, None, execution_position)


class SqlExport(ExportPages[Iterator[Any]]):
    """Export pages and import batches on one synchronous engine."""

    engine: Engine

    def pages(
        self, make: Callable[[Any], sa.Select[Any]], start: Any, position: Position
    ) -> Iterator[Any]:
        """Rows of ``make(after)`` page by page, a short connection per page."""
        after = start
        while True:
            with translated_errors("exporting history"), self.engine.connect() as conn:
                page = list(conn.execute(make(after)).mappings())
            yield from page
            if len(page) < EXPORT_PAGE:
                return
            after = position(page[-1])

    def unowned_executions(
        self, app_id: str, user_id: str, call_ids: Sequence[str]
    ) -> Iterator[Any]:
        """The app's records with no user id that only ``user_id``'s calls name."""
        for query in unowned_queries(app_id, user_id, call_ids):
            with translated_errors("exporting history"), self.engine.connect() as conn:
                yield from list(conn.execute(query).mappings())

    def import_batch(self, batch: Sequence[ImportRow], counts: dict[str, AppCounts]) -> set[str]:
        """Insert the batch's new rows in one transaction; return the apps whose original
        history got rows."""
        steps = import_steps(self.engine.dialect, self.cipher, batch, counts)
        with translated_errors("importing records"):
            return run_connected(self.engine, steps, begin=True)
