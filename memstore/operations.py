"""Operator actions over a store: check and repair histories, purge by user, reload many
windows. The CLI's engine."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from memstore.core.check import (
    UNANSWERED_REQUEST,
    Finding,
    HistoryChecker,
    RepairPlan,
    repair_plan,
)
from memstore.core.id_order import newest_of
from memstore.core.retention import RetentionRule
from memstore.core.rows import original_row, seal_original
from memstore.reports import PruneReport, ReloadReport
from memstore.sql import admin, generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import newest_id_query
from memstore.sql.schema import original
from memstore.store import RELOAD_BATCH, MemoryStore


@dataclass(frozen=True, slots=True)
class CheckResult:
    app_id: str
    findings: list[Finding]
    repaired: RepairPlan | None = None


def check_app(store: MemoryStore, app_id: str) -> list[Finding]:
    """Every provider-invalid spot of the app's original history, with row ids."""
    checker = HistoryChecker()
    for row in admin.iter_history(store.engine, app_id, store.cipher):
        checker.feed(row)
    return checker.finish()


def repair_app(store: MemoryStore, app_id: str) -> CheckResult:
    """Check, then fix what has a fix in one transaction, and drop the app's cached window.

    Unanswered requests get a durable interrupted error result (with the request's user id);
    orphan results are
    soft-deleted. Duplicate ids, bad arguments and consecutive user messages are reported only.
    """
    findings = check_app(store, app_id)
    plan = repair_plan(findings)
    if plan.empty:
        return CheckResult(app_id, findings, plan)
    now = datetime.now(timezone.utc)
    store._ensure_lease()  # before the transaction: a lease renewal never waits on its locks
    request_rows = {f.call_id: f.row_id for f in findings if f.code == UNANSWERED_REQUEST}
    with translated_errors("repairing history"), store.engine.begin() as conn:
        generation.bump(conn, app_id)  # locks the app: ids above its newest
        newest = newest_of(*conn.execute(newest_id_query(app_id)).one())
        owner_query = sa.select(original.c.id, original.c.user_id).where(
            original.c.id.in_(list(request_rows.values()))
        )
        owners = {row.id: row.user_id for row in conn.execute(owner_query)}
        rows = [
            seal_original(
                store.cipher,
                original_row(row_id, app_id, owners.get(request_rows[answer.id]), answer, now),
            )
            for row_id, answer in zip(
                store._issue_ids(len(plan.answers), newest), plan.answers, strict=True
            )
        ]
        if rows:
            conn.execute(original.insert(), rows)
        if plan.soft_delete_row_ids:
            conn.execute(
                original.update()
                .where(original.c.app_id == app_id, original.c.id.in_(plan.soft_delete_row_ids))
                .values(is_deleted=True, updated_at=now)
            )
    store.memory(app_id).invalidate()
    return CheckResult(app_id, findings, plan)


def purge_user(store: MemoryStore, user_id: str) -> tuple[admin.RowCounts, list[str]]:
    """Hard-delete every row written for ``user_id`` and drop the windows of the apps rows
    were deleted from (listed inside the deleting transactions: see
    :func:`memstore.sql.admin.purge_user`)."""
    counts, apps = admin.purge_user(store.engine, user_id, store.cipher)
    for app_id in apps:
        store.memory(app_id).invalidate()
    return counts, apps


def retention_rule(older_than: timedelta | None, keep_last: int | None) -> RetentionRule:
    """Check a prune's rule once, before walking any app."""
    return RetentionRule(older_than, keep_last)


def prune_app(
    store: MemoryStore, app_id: str, rule: RetentionRule, *, dry_run: bool = False
) -> PruneReport:
    """Prune one app under ``rule`` (see :meth:`MemoryStore.prune`)."""
    [report] = store.prune(rule.older_than, rule.keep_last, [app_id], dry_run=dry_run)
    return report


BULK_GC_THRESHOLD = 10_000
"""Allocations between young collections during :func:`reload_apps` (Python's default: 700)."""


@contextmanager
def bulk_collection() -> Iterator[None]:
    """Run a long bulk operation in this process with a calmer garbage collector: the objects
    alive at its start (modules, engines, pools) are set aside from collections
    (``gc.freeze``) and young collections come every :data:`BULK_GC_THRESHOLD` allocations.
    A window rebuild allocates thousands of short-lived objects that reference counting
    frees; the collector scanning them and everything else cost about a third of a
    ``memstore reload --all`` (measured). The collector's settings come back afterwards.
    Meant for the CLI's own process, not for a service's threads."""
    thresholds = gc.get_threshold()
    freezing = gc.get_freeze_count() == 0  # a freeze of someone else's stays as it is
    if freezing:
        gc.freeze()
    gc.set_threshold(BULK_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freezing:
            gc.unfreeze()


def reload_apps(
    store: MemoryStore, app_ids: Iterable[str], max_messages: int | None = None
) -> Iterator[ReloadReport]:
    """Reload the windows of ``app_ids`` (normalized) in batches of
    :data:`~memstore.store.RELOAD_BATCH` (shared round trips, flat memory), as
    ``memstore reload`` does; reports in order. While a batch's windows are built and stored,
    a worker thread already drops the next batch's windows and reads its rows (each batch
    keeps its own order: versions, rows, generations, store), so the database's and Redis's
    waits overlap the Python work. Run it inside :func:`bulk_collection` in a process of its
    own."""
    apps = iter(app_ids)

    def next_reads(executor: ThreadPoolExecutor) -> Future[Any] | None:
        batch = list(itertools.islice(apps, RELOAD_BATCH))
        return executor.submit(store._reload_reads, batch, max_messages) if batch else None

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memstore-reload") as executor:
        pending = next_reads(executor)
        try:
            while pending is not None:
                reads = pending.result()
                pending = next_reads(executor)
                yield from store._reload_stores(reads)
        finally:
            if pending is not None:
                pending.cancel()
