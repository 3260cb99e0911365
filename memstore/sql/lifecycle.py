"""Retention statements (prune): thin; the decision is :func:`memstore.core.retention.plan_prune`.

Every statement names one app with :func:`~memstore.sql.queries.in_app` and an id range, so
each delete walks the ``(app_id, id)`` index and locks only the rows it removes (no table-wide
lock); each batch is its own short transaction, so service traffic keeps flowing between them.
Deletes never reach past the ids the decision saw (the snapshot), so rows appended while a
prune runs are never touched.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Engine

from memstore.core.crypto import RowCipher
from memstore.core.retention import PruneBatch, PrunePlan, PruneRow, RetentionRule, plan_prune
from memstore.core.rows import AI, SYSTEM, TOOL_REQUEST, TOOL_RESULT
from memstore.core.window import KIND_AI, KIND_REQUEST, KIND_RESULT, KIND_SYSTEM, KIND_USER
from memstore.reports import PruneReport
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import in_app, requested_ids_in
from memstore.sql.runners import Steps, Unit, run_connected, run_in_transactions
from memstore.sql.schema import display, original, tool_executions

PRUNE_PAGE = 2000
"""Rows per read while deciding, and per display/guard delete batch."""

_KINDS = {AI: KIND_AI, SYSTEM: KIND_SYSTEM, TOOL_REQUEST: KIND_REQUEST, TOOL_RESULT: KIND_RESULT}


def as_utc(value: datetime) -> datetime:
    """Stored timestamps are UTC; SQLite and MariaDB hand them back without a zone."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def snapshot_query(app_id: str) -> sa.Select[Any]:
    """The newest id of each history of the app: the prune's snapshot."""
    return sa.select(
        sa.select(sa.func.max(original.c.id)).where(in_app(original, app_id)).scalar_subquery(),
        sa.select(sa.func.max(display.c.id)).where(in_app(display, app_id)).scalar_subquery(),
    )


def prune_rows_query(app_id: str, after_id: int, snapshot_id: int, limit: int) -> sa.Select[Any]:
    """One page of the app's visible rows as a decision needs them: the payload (for the call
    ids) of tool requests only, never message text."""
    request_payload = sa.case(
        (original.c.message_type == TOOL_REQUEST, original.c.payload), else_=sa.null()
    )
    return (
        sa.select(
            original.c.id,
            original.c.message_type,
            original.c.tool_call_id,
            original.c.created_at,
            request_payload.label("payload"),
        )
        .where(
            in_app(original, app_id),
            original.c.is_deleted == sa.false(),
            original.c.id > after_id,
            original.c.id <= snapshot_id,
        )
        .order_by(original.c.app_id, original.c.id)
        .limit(limit)
    )


def prune_row(row: Any, app_id: str, cipher: RowCipher) -> PruneRow:
    kind = _KINDS.get(row.message_type, KIND_USER)
    if kind == KIND_REQUEST:
        call_ids: tuple[str, ...] = tuple(requested_ids_in(row.payload, app_id, row.id, cipher))
    elif kind == KIND_RESULT:
        call_ids = (row.tool_call_id or "",)
    else:
        call_ids = ()
    return PruneRow(row.id, kind, call_ids, as_utc(row.created_at))


def original_batch_delete(app_id: str, batch: PruneBatch, after_id: int | None) -> sa.Delete:
    """One batch: every row of the app after the previous batch up to ``batch.last_id``
    (soft-deleted rows in between go too: a prune leaves no copy of pruned text)."""
    statement = original.delete().where(in_app(original, app_id), original.c.id <= batch.last_id)
    if after_id is not None:
        statement = statement.where(original.c.id > after_id)
    return statement


@dataclass(frozen=True, slots=True)
class DisplayScope:
    """Which display rows of an app a prune removes: up to the snapshot, older than the
    original history's cut, or created before the age cutoff."""

    app_id: str
    snapshot_id: int
    cut_id: int | None
    cutoff: datetime | None

    @property
    def empty(self) -> bool:
        return self.cut_id is None and self.cutoff is None

    def condition(self) -> sa.ColumnElement[bool]:
        reasons: list[sa.ColumnElement[bool]] = []
        if self.cut_id is not None:
            reasons.append(display.c.id < self.cut_id)
        if self.cutoff is not None:
            reasons.append(display.c.created_at < self.cutoff)
        return sa.and_(
            in_app(display, self.app_id), display.c.id <= self.snapshot_id, sa.or_(*reasons)
        )

    def page_query(self, after_id: int) -> sa.Select[Any]:
        return (
            sa.select(display.c.id)
            .where(self.condition(), display.c.id > after_id)
            .order_by(display.c.app_id, display.c.id)
            .limit(PRUNE_PAGE)
        )

    def delete(self, first_id: int, last_id: int) -> sa.Delete:
        return display.delete().where(
            self.condition(), display.c.id >= first_id, display.c.id <= last_id
        )

    def count(self) -> sa.Select[Any]:
        return sa.select(sa.func.count()).select_from(display).where(self.condition())


def guard_condition(app_id: str, cutoff: datetime) -> sa.ColumnElement[bool]:
    """Loop-guard records of the app last updated before the cutoff."""
    return sa.and_(tool_executions.c.app_id == app_id, tool_executions.c.updated_at < cutoff)


def guard_page_query(app_id: str, cutoff: datetime) -> sa.Select[Any]:
    return (
        sa.select(tool_executions.c.idempotency_key)
        .where(guard_condition(app_id, cutoff))
        .order_by(tool_executions.c.idempotency_key)
        .limit(PRUNE_PAGE)
    )


def guard_delete(app_id: str, cutoff: datetime, keys: Iterable[str]) -> sa.Delete:
    return tool_executions.delete().where(
        guard_condition(app_id, cutoff), tool_executions.c.idempotency_key.in_(list(keys))
    )


def guard_count(app_id: str, cutoff: datetime) -> sa.Select[Any]:
    return (
        sa.select(sa.func.count())
        .select_from(tool_executions)
        .where(guard_condition(app_id, cutoff))
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one app holds at the instant a prune decides."""

    rows: list[PruneRow]
    display_snapshot_id: int | None


@dataclass(frozen=True, slots=True)
class PruneCounts:
    original_rows: int
    display_rows: int
    tool_executions: int


@dataclass(frozen=True, slots=True)
class PruneDecision:
    """Everything one app's prune deletes, decided from one snapshot."""

    plan: PrunePlan
    display: DisplayScope | None
    guard_cutoff: datetime | None


def decide_prune(
    app_id: str, snapshot: Snapshot, rule: RetentionRule, now: datetime
) -> PruneDecision:
    plan = plan_prune(snapshot.rows, rule, now)
    cutoff = rule.cutoff(now)
    scope = None
    if snapshot.display_snapshot_id is not None:
        scope = DisplayScope(app_id, snapshot.display_snapshot_id, plan.cut_id, cutoff)
        if scope.empty:
            scope = None
    return PruneDecision(plan, scope, cutoff)


def prune_report(
    app_id: str,
    decision: PruneDecision,
    counts: PruneCounts,
    *,
    dropped: bool,
    dry_run: bool = False,
) -> PruneReport:
    return PruneReport(
        app_id=app_id,
        original_rows=counts.original_rows,
        display_rows=counts.display_rows,
        tool_executions=counts.tool_executions,
        first_kept_id=decision.plan.first_kept_id,
        window_dropped=dropped,
        dry_run=dry_run,
    )


def prune_is_empty(report: PruneReport) -> bool:
    return not (report.original_rows or report.display_rows or report.tool_executions)


def snapshot_steps(app_id: str, cipher: RowCipher) -> Steps[Snapshot]:
    """What the app holds now, page by page (statement steps: :mod:`memstore.sql.runners`)."""
    newest_original, newest_display = (yield snapshot_query(app_id), None).one()
    rows: list[PruneRow] = []
    after = -1
    while newest_original is not None:
        query = prune_rows_query(app_id, after, newest_original, PRUNE_PAGE)
        page = (yield query, None).all()
        rows.extend(prune_row(row, app_id, cipher) for row in page)
        if len(page) < PRUNE_PAGE:
            break
        after = page[-1].id
    return Snapshot(rows, newest_display)


def count_steps(app_id: str, decision: PruneDecision) -> Steps[PruneCounts]:
    """What :func:`apply_units` would remove (a dry run), as statement steps."""
    displays = guards = 0
    if decision.display is not None:
        displays = int((yield decision.display.count(), None).scalar() or 0)
    if decision.guard_cutoff is not None:
        guards = int((yield guard_count(app_id, decision.guard_cutoff), None).scalar() or 0)
    return PruneCounts(decision.plan.drop, displays, guards)


def _batch_steps(
    dialect: Dialect, app_id: str, batch: PruneBatch, after: int | None
) -> Steps[None]:
    yield from generation.bump_steps(dialect, app_id)  # waits for the app's writers; caches see it
    yield original_batch_delete(app_id, batch, after), None


def _display_page_steps(scope: DisplayScope, after: int) -> Steps[tuple[int | None, int]]:
    """One page of display rows deleted: its last id (``None``: none left) and the count."""
    ids = list((yield scope.page_query(after), None).scalars())
    if not ids:
        return None, 0
    return ids[-1], (yield scope.delete(ids[0], ids[-1]), None).rowcount


def _guard_page_steps(app_id: str, cutoff: datetime) -> Steps[int | None]:
    """One page of loop-guard records deleted: the count (``None``: none left)."""
    keys = list((yield guard_page_query(app_id, cutoff), None).scalars())
    if not keys:
        return None
    return int((yield guard_delete(app_id, cutoff, keys), None).rowcount)


def apply_units(
    dialect: Dialect, app_id: str, decision: PruneDecision
) -> Generator[Unit, Any, PruneCounts]:
    """The decision's deletes, oldest first, one short transaction per batch (each yielded
    unit: :func:`memstore.sql.runners.run_in_transactions`)."""
    plan, scope, guard_cutoff = decision.plan, decision.display, decision.guard_cutoff
    originals = displays = guards = 0
    after: int | None = None
    for batch in plan.batches:
        yield _batch_steps(dialect, app_id, batch, after)
        originals += batch.rows
        after = batch.last_id
    if scope is not None:
        last: int | None = -1
        while last is not None:
            last, deleted = yield _display_page_steps(scope, last)
            displays += deleted
    if guard_cutoff is not None:
        while (deleted := (yield _guard_page_steps(app_id, guard_cutoff))) is not None:
            guards += deleted
    return PruneCounts(originals, displays, guards)


class SqlRetention:
    """Prune statements on one synchronous engine."""

    def __init__(self, engine: Engine, cipher: RowCipher) -> None:
        self.engine = engine
        self.cipher = cipher

    def snapshot(self, app_id: str) -> Snapshot:
        with translated_errors("reading history for a prune"):
            return run_connected(self.engine, snapshot_steps(app_id, self.cipher))

    def count(self, app_id: str, decision: PruneDecision) -> PruneCounts:
        """What :meth:`apply` would remove (a dry run)."""
        with translated_errors("counting rows to prune"):
            return run_connected(self.engine, count_steps(app_id, decision))

    def apply(self, app_id: str, decision: PruneDecision) -> PruneCounts:
        """Run the decision's deletes, one short transaction per batch, oldest first."""
        units = apply_units(self.engine.dialect, app_id, decision)
        with translated_errors("pruning history"):
            return run_in_transactions(self.engine, units)
