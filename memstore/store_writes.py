"""The store's writes, decided once for :class:`~memstore.MemoryStore` and
:class:`~memstore.aio.AsyncMemoryStore` (the one-source rule of docs/contributing.md).

Each write is a generator of I/O steps (:mod:`memstore.core.steps`). A step is a
zero-argument callable making one call on the store's own backends (``self._sql``,
``self.cache``, ``self._local``, ``self._retention``, ``self._export``, the lease): on a
``MemoryStore`` it returns the result, on an ``AsyncMemoryStore`` an awaitable that the async
runner awaits. The backends of both stores have the same method names, so one closure serves
both; the generator decides, the stores only drive it (:func:`call` / :func:`acall`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from memstore.core.compaction import plan_compaction
from memstore.core.display import DisplayDraft, display_drafts
from memstore.core.export import AppCounts, ImportRow
from memstore.core.inputs import normalize_app_id, normalize_user_id
from memstore.core.plans import WritePlan, purge_report
from memstore.core.retention import RetentionRule
from memstore.core.window import WindowEntry
from memstore.errors import (
    CommitOutcomeUnknownError,
    IdCollisionError,
    StorageError,
    WorkerLeaseLostError,
)
from memstore.messages import Message, parse_message
from memstore.reports import CompactionReport, PruneReport, PurgeReport
from memstore.sql.generation import GenerationStep
from memstore.sql.lifecycle import PruneDecision, decide_prune, prune_report
from memstore.sql.queries import ChainCheck
from memstore.store_base import Summarizer, retry_probe, still_unknown
from memstore.store_reads import IO, Steps, StoreReads
from memstore.store_steps import acall as acall
from memstore.store_steps import call as call

T = TypeVar("T")


class StoreWrites(StoreReads):
    """The write generators both stores drive. The stores provide the backends and
    ``_through`` (how a write runs to its end: the async store shields it from its
    caller's cancellation)."""

    if TYPE_CHECKING:  # what the stores provide (their own types; sync or async)
        _sql: Any
        _local: Any
        _retention: Any
        _export: Any
        cache: Any

        def _through(self, steps: Steps[T], *app_ids: str, purge: bool = False) -> Any:
            """Run a write's steps to the end (its result, or an awaitable of it)."""

        def memory(self, app_id: str | int) -> Any: ...
        def _cache_update(self, update: Callable[[], Any]) -> Any: ...
        def _ensure_lease(self) -> Any: ...

        compact: Callable[..., Any]

    def _invalidation(self, app_id: str) -> IO:
        """The step that drops the app's window (a skipped drop is stamped stale)."""
        return lambda: self._cache_update(lambda: self.cache.invalidate(app_id))

    # -- appends -----------------------------------------------------------------------------

    def _append_steps(
        self,
        app_id: str | int,
        messages: Iterable[Message | dict[str, Any]],
        user_id: str | None,
        retry_of: CommitOutcomeUnknownError | None,
    ) -> Steps[list[int]]:
        app = normalize_app_id(app_id)
        user = normalize_user_id(user_id)
        batch = [parse_message(message) for message in messages]
        if retry_of is not None and (
            yield from self._was_committed_steps(app, retry_of, len(batch))
        ):
            return list(retry_of.ids)
        drafts = display_drafts(batch, self._formatters)
        ids: list[int] = yield from self._write_steps(app, user, batch, drafts)
        if ids and self._summarizer is not None and self.settings.compact_at_tokens is not None:
            yield from self._auto_compact_steps(app)
        return ids

    def _was_committed_steps(
        self, app_id: str, doubt: CommitOutcomeUnknownError, count: int
    ) -> Steps[bool]:
        """Whether the append ``doubt`` reports was committed (its window dropped again if
        so); see ``append``'s ``retry_of``."""
        probe = retry_probe(app_id, doubt, count)
        if probe is None:
            return False
        try:
            written = bool((yield lambda: self._sql.was_committed(app_id, probe)))
        except StorageError as error:
            raise still_unknown(doubt) from error
        if written:
            yield self.memory(app_id).invalidate
        return written

    def _auto_compact_steps(self, app_id: str) -> Steps[None]:
        """Compact the app when its window is over ``compact_at_tokens``; a failure is logged
        (no message text) and never reaches the append, which is already stored."""
        summarize = self._summarizer
        threshold = self.settings.compact_at_tokens
        try:
            if summarize is None or threshold is None:
                return
            window = yield from self._cached_window_steps(app_id)
            if self._auto_compaction_due(window):
                yield lambda: self.compact(app_id, summarize, keep_last_tokens=threshold // 2)
        except Exception as error:
            self._auto_compaction_failed(app_id, error)

    def _write_steps(
        self,
        app_id: str,
        user_id: str | None,
        batch: list[Message],
        drafts: list[DisplayDraft],
        fence: Collection[str] = (),
    ) -> Steps[list[int]]:
        """Both histories in one transaction (one multi-row INSERT per table), then the cache.
        ``fence``: call ids whose requests must still be stored (else nothing is written:
        :class:`~memstore.errors.UnknownToolCallError`), checked under the app's lock."""
        if not batch and not drafts:
            return []
        plan = self._plan(app_id, user_id, batch, drafts)
        plan.unresolved_call_ids.update(fence)
        entries = self._counted(plan.cache_entries)
        written = self._commit_then_cache(app_id, plan, entries)
        ids: list[int] = yield lambda: self._through(written, app_id)
        return ids

    def _commit_then_cache(
        self, app_id: str, plan: WritePlan, entries: list[WindowEntry]
    ) -> Steps[list[int]]:
        ids, step = yield from self._insert_retrying_steps(app_id, plan)
        yield from self._cache_append_steps(app_id, entries, step)
        return ids

    def _insert_retrying_steps(
        self, app_id: str, plan: WritePlan, chain: ChainCheck | None = None
    ) -> Steps[tuple[list[int], GenerationStep | None]]:
        """Write ``plan`` in one transaction (appends and compactions alike), retrying with
        fresh ids after a snowflake id collision and after the lease lapsed inside the
        transaction (renewed first); see :meth:`StoreBase._retry_write`."""
        attempt = 0
        while True:
            attempt += 1
            yield self._ensure_lease  # before the transaction: a renewal never waits on its locks
            reads_first = attempt > 1  # after a collision the ids go above the app's newest
            try:
                insert = partial(self._sql.insert, app_id, plan, self._issue_ids, chain)
                written: tuple[list[int], GenerationStep | None] = yield partial(
                    insert, reads_first=reads_first
                )
                return written
            except (IdCollisionError, WorkerLeaseLostError) as error:
                self._retry_write(attempt, error)
            except CommitOutcomeUnknownError as error:
                error.app_id = app_id
                yield self.memory(app_id).invalidate  # no window may miss a write that went through
                raise

    def _cache_append_steps(
        self, app_id: str, entries: list[WindowEntry], step: GenerationStep | None
    ) -> Steps[None]:
        """Hand a committed write's window entries to the cache, with its generation step
        (see :meth:`_append_action`; adapters writing in their own transaction call it too)."""
        action = self._append_action(step is not None, bool(entries), self._local is not None)
        if action == "local":
            assert self._local is not None and step is not None
            local, before, after = self._local, step.before, step.after
            yield lambda: local.append(app_id, entries, before=before, after=after)
        elif action == "guarded":
            assert step is not None
            before, after = step.before, step.after
            yield lambda: self._cache_update(
                lambda: self.cache.append(app_id, entries, before=before, after=after)
            )
        elif action == "invalidate":
            yield self._invalidation(app_id)
        elif action == "plain":
            yield lambda: self._cache_update(lambda: self.cache.append(app_id, entries))

    # -- compaction --------------------------------------------------------------------------

    def _compact_steps(
        self,
        app_id: str | int,
        summarize: Summarizer,
        keep_last_tokens: int | None,
        keep_last_messages: int | None,
        display: bool,
    ) -> Steps[CompactionReport]:
        app = normalize_app_id(app_id)
        keep_tokens, keep_messages = self._keep_bounds(keep_last_tokens, keep_last_messages)
        window = yield from self._fetched(self._compaction_window(), app)
        plan = plan_compaction(window, self._count, keep_tokens, keep_messages)
        if plan is None:
            return self._compaction_report(app, None)
        inputs = list(plan.inputs)
        try:
            value: object = yield lambda: summarize(inputs)  # an async store awaits it
        except Exception as error:
            raise self._summarizer_failed(error) from error
        text = self._summary_text(value)
        rows = self._summary_plan(app, text, plan, display)
        committed = self._commit_summary(app, rows, ChainCheck(app, plan.previous_id))
        summary_id: int = yield lambda: self._through(committed, app)
        return self._compaction_report(app, plan, summary_id, text)

    def _commit_summary(self, app_id: str, rows: WritePlan, chain: ChainCheck) -> Steps[int]:
        ids, _ = yield from self._insert_retrying_steps(app_id, rows, chain)
        yield self._invalidation(app_id)  # committed: a skipped drop is stamped stale
        return ids[0]

    # -- removals ----------------------------------------------------------------------------

    def _purge_steps(self, app_id: str) -> Steps[PurgeReport]:
        try:
            counts = yield lambda: self._sql.purge(app_id)
        except StorageError:
            # the commit may have gone through with its reply lost: never keep serving the
            # purged text from the window (a purge that did fail only costs a rebuild)
            yield lambda: self._cache_update(lambda: self.cache.purge(app_id))
            raise
        self.row_memo.forget_app(app_id)
        dropped = yield lambda: self._cache_update(lambda: self.cache.purge(app_id))
        return purge_report(app_id, counts, dropped)

    def _prune_steps(self, app_id: str, rule: RetentionRule, dry_run: bool) -> Steps[PruneReport]:
        now = datetime.now(timezone.utc)
        snapshot = yield lambda: self._retention.snapshot(app_id)
        decision = decide_prune(app_id, snapshot, rule, now)
        if dry_run:
            counts = yield lambda: self._retention.count(app_id, decision)
            return prune_report(app_id, decision, counts, dropped=False, dry_run=True)
        applied = self._apply_prune(app_id, decision)
        report: PruneReport = yield lambda: self._through(applied, app_id)
        return report

    def _apply_prune(self, app_id: str, decision: PruneDecision) -> Steps[PruneReport]:
        counts = yield lambda: self._retention.apply(app_id, decision)
        if decision.plan.drop:
            yield self._invalidation(app_id)
        return prune_report(app_id, decision, counts, dropped=decision.plan.drop > 0)

    def _import_steps(self, batch: list[ImportRow], counts: dict[str, AppCounts]) -> Steps[None]:
        if not batch:
            return
        imported = self._import_then_drop(batch, counts)
        yield lambda: self._through(imported, *sorted({row.app_id for row in batch}))

    def _import_then_drop(
        self, batch: list[ImportRow], counts: dict[str, AppCounts]
    ) -> Steps[None]:
        for app in (yield lambda: self._export.import_batch(batch, counts)):
            yield self._invalidation(app)
