"""The asyncio twin of :mod:`memstore.sql.lifecycle`: the same statements, awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from memstore.core.crypto import RowCipher
from memstore.core.export import (
    ORIGINAL,
    AppCounts,
    ImportRow,
    changed_apps,
    plan_import,
    seal_inserts,
)
from memstore.core.retention import PrunePlan, PruneRow
from memstore.sql import generation
from memstore.sql.admin import APP_PAGE
from memstore.sql.engine import translated_errors
from memstore.sql.export import (
    EXPORT_PAGE,
    INSERT_TABLES,
    Position,
    app_page,
    executions_page,
    existing_from,
    existing_queries,
    key_position,
    row_position,
    user_page,
)
from memstore.sql.lifecycle import (
    PRUNE_PAGE,
    DisplayScope,
    PruneCounts,
    Snapshot,
    guard_count,
    guard_delete,
    guard_page_query,
    original_batch_delete,
    prune_row,
    prune_rows_query,
    snapshot_query,
)
from memstore.sql.schema import original
from memstore.sql.user_data import (
    execution_position,
    unowned_executions_of,
    user_executions_page,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


async def iter_app_ids(engine: AsyncEngine, page: int = APP_PAGE) -> AsyncIterator[str]:
    """Every app id with rows in the original history, in byte order, page by page."""
    after: str | None = None
    while True:
        query = sa.select(original.c.app_id).distinct().order_by(original.c.app_id).limit(page)
        if after is not None:
            query = query.where(original.c.app_id > after)
        with translated_errors("listing apps"):
            async with engine.connect() as conn:
                batch = list((await conn.execute(query)).scalars())
        for app_id in batch:
            yield app_id
        if len(batch) < page:
            return
        after = batch[-1]


class AsyncSqlRetention:
    """Prune statements on one async engine (see :class:`memstore.sql.lifecycle.SqlRetention`)."""

    def __init__(self, engine: AsyncEngine, cipher: RowCipher) -> None:
        self.engine = engine
        self.cipher = cipher

    async def snapshot(self, app_id: str) -> Snapshot:
        with translated_errors("reading history for a prune"):
            async with self.engine.connect() as conn:
                newest_original, newest_display = (await conn.execute(snapshot_query(app_id))).one()
                rows: list[PruneRow] = []
                after = -1
                while newest_original is not None:
                    query = prune_rows_query(app_id, after, newest_original, PRUNE_PAGE)
                    page = (await conn.execute(query)).all()
                    rows.extend(prune_row(row, app_id, self.cipher) for row in page)
                    if len(page) < PRUNE_PAGE:
                        break
                    after = page[-1].id
        return Snapshot(rows, newest_display)

    async def count(
        self,
        plan: PrunePlan,
        scope: DisplayScope | None,
        guard_cutoff: datetime | None,
        app_id: str,
    ) -> PruneCounts:
        with translated_errors("counting rows to prune"):
            async with self.engine.connect() as conn:
                displays = 0
                if scope is not None:
                    displays = int((await conn.execute(scope.count())).scalar() or 0)
                guards = 0
                if guard_cutoff is not None:
                    query = guard_count(app_id, guard_cutoff)
                    guards = int((await conn.execute(query)).scalar() or 0)
        return PruneCounts(plan.drop, displays, guards)

    async def apply(
        self,
        app_id: str,
        plan: PrunePlan,
        scope: DisplayScope | None,
        guard_cutoff: datetime | None,
    ) -> PruneCounts:
        originals = displays = guards = 0
        with translated_errors("pruning history"):
            after: int | None = None
            for batch in plan.batches:
                async with self.engine.begin() as conn:
                    await generation.abump(conn, app_id)  # waits for writers; caches see it
                    await conn.execute(original_batch_delete(app_id, batch, after))
                originals += batch.rows
                after = batch.last_id
            if scope is not None:
                last = -1
                while True:
                    async with self.engine.begin() as conn:
                        ids = list((await conn.execute(scope.page_query(last))).scalars())
                        if not ids:
                            break
                        displays += (await conn.execute(scope.delete(ids[0], ids[-1]))).rowcount
                    last = ids[-1]
            if guard_cutoff is not None:
                while True:
                    async with self.engine.begin() as conn:
                        page = guard_page_query(app_id, guard_cutoff)
                        keys = list((await conn.execute(page)).scalars())
                        if not keys:
                            break
                        statement = guard_delete(app_id, guard_cutoff, keys)
                        guards += (await conn.execute(statement)).rowcount
        return PruneCounts(originals, displays, guards)


class AsyncSqlExport:
    """Export pages and import batches on one async engine (see
    :class:`memstore.sql.export.SqlExport`)."""

    def __init__(self, engine: AsyncEngine, cipher: RowCipher) -> None:
        self.engine = engine
        self.cipher = cipher

    def app_rows(self, table: sa.Table, app_id: str) -> AsyncIterator[Any]:
        return self.pages(partial(app_page, table, app_id), -1, row_position)

    def user_rows(self, table: sa.Table, user_id: str) -> AsyncIterator[Any]:
        return self.pages(partial(user_page, table, user_id), -1, row_position)

    def app_executions(self, app_id: str) -> AsyncIterator[Any]:
        return self.pages(partial(executions_page, app_id), None, key_position)

    def user_executions(self, user_id: str) -> AsyncIterator[Any]:
        """The loop-guard records carrying ``user_id``, page by page."""
        page = partial(user_executions_page, user_id, EXPORT_PAGE)
        return self.pages(page, None, execution_position)

    async def pages(
        self, make: Callable[[Any], sa.Select[Any]], start: Any, position: Position
    ) -> AsyncIterator[Any]:
        after = start
        while True:
            with translated_errors("exporting history"):
                async with self.engine.connect() as conn:
                    page = list((await conn.execute(make(after))).mappings())
            for row in page:
                yield row
            if len(page) < EXPORT_PAGE:
                return
            after = position(page[-1])

    async def unowned_executions(
        self, app_id: str, user_id: str, call_ids: Sequence[str]
    ) -> AsyncIterator[Any]:
        """The app's records with no user id that only ``user_id``'s calls name."""
        for start in range(0, len(call_ids), EXPORT_PAGE):
            chunk = list(call_ids[start : start + EXPORT_PAGE])
            query = unowned_executions_of(app_id, user_id, chunk)
            with translated_errors("exporting history"):
                async with self.engine.connect() as conn:
                    rows = list((await conn.execute(query)).mappings())
            for row in rows:
                yield row

    async def import_batch(
        self, batch: Sequence[ImportRow], counts: dict[str, AppCounts]
    ) -> set[str]:
        with translated_errors("importing records"):
            async with self.engine.begin() as conn:
                existing = {
                    name: existing_from(name, (await conn.execute(query)).all())
                    for name, query in existing_queries(batch).items()
                }
                inserts = seal_inserts(self.cipher, plan_import(batch, existing, counts))
                for app_id in changed_apps(inserts):
                    await generation.abump(conn, app_id)
                for name, rows in inserts.items():
                    if rows:
                        await conn.execute(INSERT_TABLES[name].insert(), rows)
        return {row["app_id"] for row in inserts[ORIGINAL]}
