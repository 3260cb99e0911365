"""The asyncio twin of :mod:`memstore.sql.lifecycle`: the same statements, awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from memstore.core.retention import PrunePlan, PruneRow
from memstore.sql.admin import APP_PAGE
from memstore.sql.engine import translated_errors
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

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def snapshot(self, app_id: str) -> Snapshot:
        with translated_errors("reading history for a prune"):
            async with self.engine.connect() as conn:
                newest_original, newest_display = (await conn.execute(snapshot_query(app_id))).one()
                rows: list[PruneRow] = []
                after = -1
                while newest_original is not None:
                    query = prune_rows_query(app_id, after, newest_original, PRUNE_PAGE)
                    page = (await conn.execute(query)).all()
                    rows.extend(prune_row(row) for row in page)
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
