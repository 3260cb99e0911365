"""The asyncio forms of :mod:`memstore.sql.lifecycle` and :mod:`memstore.sql.export`: the
same statement steps (:mod:`memstore.sql.runners`) and export pages, awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from memstore.core.crypto import RowCipher
from memstore.core.export import (
    AppCounts,
    ImportRow,
)
from memstore.sql.admin import APP_PAGE, app_ids_page
from memstore.sql.engine import translated_errors
from memstore.sql.export import (
    EXPORT_PAGE,
    ExportPages,
    Position,
    import_steps,
    unowned_queries,
)
from memstore.sql.lifecycle import (
    PruneCounts,
    PruneDecision,
    Snapshot,
    apply_units,
    count_steps,
    snapshot_steps,
)
from memstore.sql.runners import arun_connected, arun_in_transactions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


async def iter_app_ids(engine: AsyncEngine, page: int = APP_PAGE) -> AsyncIterator[str]:
    """Every app id with rows in the original history, in byte order, page by page."""
    after: str | None = None
    while True:
        query = app_ids_page(after, page)
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
            return await arun_connected(self.engine, snapshot_steps(app_id, self.cipher))

    async def count(self, app_id: str, decision: PruneDecision) -> PruneCounts:
        with translated_errors("counting rows to prune"):
            return await arun_connected(self.engine, count_steps(app_id, decision))

    async def apply(self, app_id: str, decision: PruneDecision) -> PruneCounts:
        units = apply_units(self.engine.dialect, app_id, decision)
        with translated_errors("pruning history"):
            return await arun_in_transactions(self.engine, units)


class AsyncSqlExport(ExportPages[AsyncIterator[Any]]):
    """Export pages and import batches on one async engine (see
    :class:`memstore.sql.export.SqlExport`)."""

    engine: AsyncEngine

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
        for query in unowned_queries(app_id, user_id, call_ids):
            with translated_errors("exporting history"):
                async with self.engine.connect() as conn:
                    rows = list((await conn.execute(query)).mappings())
            for row in rows:
                yield row

    async def import_batch(
        self, batch: Sequence[ImportRow], counts: dict[str, AppCounts]
    ) -> set[str]:
        steps = import_steps(self.engine.dialect, self.cipher, batch, counts)
        with translated_errors("importing records"):
            return await arun_connected(self.engine, steps, begin=True)
