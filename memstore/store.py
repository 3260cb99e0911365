"""``MemoryStore``: the durable history in SQL plus each app's memory window in a cache.

>>> from memstore import MemoryStore, Settings, UserMessage, AiMessage
>>> store = MemoryStore(Settings(database_url="sqlite:///:memory:"))
>>> store.migrate()
>>> ids = store.append("app-1", [UserMessage(text="hi"), AiMessage(text="hello")])
>>> [m.type for m in store.memory("app-1").messages()]
['user', 'ai']
>>> store.close()

SQL is the source of truth and is written first; the cache is a projection rebuilt from it
with the edge check whenever it is missing (expired, flushed, restarted) or uncertain.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy.engine import Engine

from memstore.cache.base import WindowCache, WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache, NoWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.config import Settings
from memstore.core import health
from memstore.core.display import DisplayDraft
from memstore.core.export import (
    AppCounts,
    ImportRow,
    check_header,
    display_record,
    execution_record,
    export_scope,
    header_record,
    message_call_ids,
    original_record,
    parse_record,
)
from memstore.core.health import DEFAULT_HEALTH_TIMEOUT_SECONDS
from memstore.core.inputs import (
    normalize_app_id,
    normalize_app_ids,
    normalize_user_id,
)
from memstore.core.loader import RowRequest, Rows, run_steps
from memstore.core.plans import (
    history_page,
    reload_report,
)
from memstore.core.retention import RetentionRule
from memstore.core.rows import FetchedRows, decode_row
from memstore.core.staleness import marks_to_clear
from memstore.core.steps import drive
from memstore.core.tokens import TokenCounter
from memstore.core.window import Window, WindowEntry
from memstore.errors import (
    CommitOutcomeUnknownError,
    StorageError,
)
from memstore.ids import SnowflakeGenerator
from memstore.messages import Message
from memstore.reports import (
    CompactionReport,
    DisplayEntry,
    HealthCheck,
    HealthReport,
    ImportReport,
    PruneReport,
    PurgeReport,
    RekeyReport,
    ReloadReport,
)
from memstore.sql import leases as sql_leases
from memstore.sql import reload as sql_reload
from memstore.sql import staleness as sql_staleness
from memstore.sql.admin import iter_app_ids
from memstore.sql.engine import make_engine
from memstore.sql.export import (
    IMPORT_BATCH,
    SqlExport,
    import_report,
)
from memstore.sql.generation import GenerationStep
from memstore.sql.lifecycle import SqlRetention, prune_is_empty
from memstore.sql.repository import SqlHistory
from memstore.sql.schema import display, original
from memstore.store_base import (
    Summarizer,
    collecting_skips,
)
from memstore.store_reads import Steps
from memstore.store_writes import StoreWrites, call

if TYPE_CHECKING:
    from memstore.collector import TurnCollector

logger = logging.getLogger("memstore")

T = TypeVar("T")

RELOAD_BATCH = 100
"""Apps per batch of ``memstore reload`` (see :meth:`MemoryStore._reload_batch`)."""


@dataclass(slots=True)
class _ReloadReads:
    """What the first half of a batch reload read (see :meth:`MemoryStore._reload_reads`)."""

    app_ids: list[str]
    size: int
    versions: dict[str, str] = field(default_factory=dict)
    first: RowRequest | None = None
    prefetched: dict[str, FetchedRows] = field(default_factory=dict)
    done: list[ReloadReport] | None = None
    """The reports, when the cache reloads one app at a time (nothing left to do)."""


class MemoryStore(StoreWrites):
    """Chat memory for one database and one cache. Thread-safe; share one per process.

    Args:
        settings: configuration; ``Settings()`` (SQLite file, in-process cache) when omitted.
        engine: a SQLAlchemy engine to use instead of one built from ``settings.database_url``
            (the store then leaves disposing it to you).
        cache: a window cache to use instead of one built from ``settings.redis_url``.
        id_generator: the snowflake id generator to use instead of the process-wide one for
            ``settings.worker_id`` (for tests, e.g. a clock that is behind); no lease is taken.
        id_clock: the wall clock (Unix milliseconds) of the generator a leased worker id gets
            (for tests: a clock set back across a restart).
        token_counter: counts a message's tokens for token budgets, ``(Message) -> int``;
            default :func:`memstore.core.tokens.approximate_tokens` (no tokenizer needed), or
            e.g. ``encoding_counter(tiktoken_encoding)``.
        summarizer: ``summarize(messages) -> str`` for automatic compaction (the
            ``compact_at_tokens`` setting); see :meth:`set_summarizer`.

    With ``worker_id="auto"`` (the default) the store leases a free worker id from the
    ``worker_leases`` table on its first write and renews it from a daemon thread;
    :meth:`close` releases it.
    """

    _sql: SqlHistory
    _retention: SqlRetention
    _export: SqlExport

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        cache: WindowCache | None = None,
        id_generator: SnowflakeGenerator | None = None,
        id_clock: Callable[[], int] | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        super().__init__(settings, id_generator, id_clock, token_counter, summarizer)
        self._heartbeat: threading.Thread | None = None
        self._stop_heartbeat = threading.Event()
        self._owns_engine = engine is None
        self.engine = engine if engine is not None else make_engine(self.settings.database_url)
        self._sql = SqlHistory(self.engine, self.cipher, self.row_memo)
        self._retention = SqlRetention(self.engine, self.cipher)
        self._export = SqlExport(self.engine, self.cipher)
        self._owns_cache = cache is None
        self.cache: WindowCache = cache if cache is not None else self._default_cache()
        # An in-process window cannot see other processes' writes: check it against the
        # app's SQL generation on every read, unless nobody else can write.
        self._local: InProcessWindowCache | None = (
            self.cache
            if isinstance(self.cache, InProcessWindowCache)
            and not self._private_database(str(self.engine.url), self._owns_engine)
            else None
        )
        self._encodes_entries = isinstance(self.cache, RedisWindowCache)
        self._stale_lock = threading.Lock()
        self._track_skips(self.cache)
        self._guarded = bool(getattr(self.cache, "guards_generations", False))

    def _default_cache(self) -> WindowCache:
        policy = WindowPolicy.from_settings(self.settings)
        if self.settings.redis_url:
            return RedisWindowCache.from_url(
                self.settings.redis_url,
                policy,
                self.settings.redis_timeout_seconds,
                metrics=self._metrics,
            )
        return InProcessWindowCache(policy)

    # -- schema ------------------------------------------------------------------------------

    def migrate(self, revision: str = "head") -> None:
        """Upgrade the database schema (``alembic upgrade head`` with memstore's migrations)."""
        from memstore.sql import migrate as migrations  # Alembic loads only when needed

        migrations.upgrade(self.engine, revision)

    # -- health ------------------------------------------------------------------------------

    def health(self, timeout: float = DEFAULT_HEALTH_TIMEOUT_SECONDS) -> HealthReport:
        """Check the database (a connection answers), its schema (at this memstore's head
        revision), the cache (Redis answers ``PING``) and the worker-id lease (held and renewed
        in time; with none held yet, an id is free to claim), and report each.

        Never raises for a failed dependency: the report says which check failed and why, in
        a short reason without URLs or message text. The database and the cache are probed
        at once, each for at most ``timeout`` seconds (a probe that does not answer in time
        fails as timed out; a hung connection attempt is left to finish in the background).
        Writes nothing, claims no lease, and counts nothing.
        """
        from memstore.sql import health as sql_health

        seconds = self._health_timeout(timeout)
        started = time.monotonic()
        with_leases = self._lease_rows_needed()
        database = _Bounded(lambda: sql_health.probe(self.engine, with_leases=with_leases))
        cache = _Bounded(self._ping_cache)
        deadline = started + seconds
        return self._health_report(
            started, seconds, database.outcome(deadline), cache.outcome(deadline)
        )

    def _ping_cache(self) -> HealthCheck:
        cache = self.cache
        ping = getattr(cache, "ping", None)
        if callable(ping):
            return health.failed("PING failed") if ping() is False else health.passed("PING")
        if isinstance(cache, RedisWindowCache):
            cache.client.ping()
            return health.passed("Redis answers PING")
        if isinstance(cache, InProcessWindowCache):
            return health.passed("in-process")
        if isinstance(cache, NoWindowCache):
            return health.skipped("no cache: windows are read from SQL")
        return health.skipped(f"no probe for {type(cache).__name__}")

    # -- worker-id lease ---------------------------------------------------------------------

    def _ensure_lease(self) -> SnowflakeGenerator:
        """The generator, after renewing (or claiming) the lease when it may have lapsed.

        Raises :class:`~memstore.errors.WorkerLeaseLostError` when a held lease can be neither
        renewed nor replaced, :class:`~memstore.errors.WorkerIdsExhaustedError` when no id is
        free, :class:`~memstore.errors.StorageError` when the first claim fails.
        """
        generator = self._usable_generator()
        if generator is not None:
            return generator
        with self._lease_lock:
            generator = self._usable_generator()
            if generator is not None:
                return generator
            lease = self._own_lease()
            ttl = self.settings.worker_lease_seconds
            if lease is not None:
                sent_at = time.monotonic()
                try:
                    kept = sql_leases.renew(
                        self.engine, lease.worker_id, lease.epoch, ttl, self._last_issued_ms()
                    )
                except StorageError as error:
                    raise self._lease_lost(lease, error) from error
                generator = self._renewed_before_issuing(lease, kept, sent_at)
                if generator is not None:
                    return generator
            sent_at = time.monotonic()
            claimed = sql_leases.claim(self.engine, ttl)
            self._take_lease(claimed.worker_id, claimed.epoch, claimed.last_ms, sent_at)
            self._start_heartbeat()
            assert self._ids is not None
            return self._ids

    def _start_heartbeat(self) -> None:
        if self._heartbeat is not None and self._heartbeat.is_alive():
            return
        ref = weakref.ref(self)
        stop = self._stop_heartbeat
        interval = self.settings.worker_lease_seconds / 3
        self._heartbeat = threading.Thread(
            target=_heartbeat, args=(ref, stop, interval), name="memstore-lease", daemon=True
        )
        self._heartbeat.start()

    def _renew_in_background(self) -> None:
        """One heartbeat: renew the held lease; forget it if another process claimed it."""
        lease = self._own_lease()
        if lease is None:
            return
        sent_at = time.monotonic()
        try:
            kept = sql_leases.renew(
                self.engine,
                lease.worker_id,
                lease.epoch,
                self.settings.worker_lease_seconds,
                self._last_issued_ms(),
            )
        except StorageError as error:
            logger.warning("memstore: worker lease renewal failed (%s)", error.kind)
            return
        self._apply_background_renewal(lease, kept, sent_at)

    def _release_lease(self) -> None:
        self._stop_heartbeat.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        with self._lease_lock:
            lease = self._own_lease()
            self._lease = None
        if lease is None:
            return
        try:
            sql_leases.release(self.engine, lease.worker_id, lease.epoch, self._last_issued_ms())
        except StorageError as error:
            logger.warning("memstore: worker lease release failed (%s)", error.kind)

    # -- stale windows across instances ------------------------------------------------------

    def _cache_update(self, update: Callable[[], T]) -> T:
        """Run a cache update that follows a committed change; when the cache skipped it
        (Redis unreachable), stamp the app in SQL so that every instance drops its window
        (see :mod:`memstore.core.staleness`). Never raises for the stamp."""
        if not self._stale_tracking:
            return update()
        with collecting_skips() as skipped:
            result = update()
        if skipped:
            try:
                sql_staleness.stamp(self.engine, skipped)
            except StorageError as error:
                self._stamp_failed(skipped, error)
        return result

    def _drop_stale_windows(self) -> None:
        """Before serving a cached window: when a poll is due, drop the windows of the apps
        stamped stale and clear the stamps of the windows dropped."""
        if not self._stale_check_due():
            return
        with self._stale_lock:
            now = time.monotonic()
            if not self._stale_polls.due(now):
                return
            self._stale_polls.started(now)
            try:
                marks = sql_staleness.pending(self.engine)
            except StorageError as error:
                self._stale_poll_failed("reading", error)
                return
            if not marks:
                return
            with collecting_skips() as skipped:
                for mark in marks:
                    self.cache.invalidate(mark.app_id)
            try:
                sql_staleness.clear(self.engine, marks_to_clear(marks, skipped))
            except StorageError as error:
                self._stale_poll_failed("clearing", error)

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        app_id: str | int,
        messages: Iterable[Message | dict[str, Any]],
        user_id: str | None = None,
        *,
        retry_of: CommitOutcomeUnknownError | None = None,
    ) -> list[int]:
        """Write ``messages`` to both histories in one transaction, then to the cached window.

        Returns the snowflake ids of the original-history rows, one per message, in order.
        Raises a :class:`~memstore.errors.InvalidInputError` subclass for bad input (nothing
        written) and :class:`~memstore.errors.StorageError` when the database fails (nothing
        written; the cache is untouched), except its subclass
        :class:`~memstore.errors.CommitOutcomeUnknownError`: the connection was lost during
        the commit, which may have gone through (the cached window is dropped first).

        ``retry_of``: that error, to append the same messages again safely: when the first
        write was committed, its ids are returned and nothing is written twice; otherwise
        the messages are written now. Raises ``CommitOutcomeUnknownError`` again while the
        outcome cannot be told (the database still unreachable).
        """
        return drive(self._append_steps(app_id, messages, user_id, retry_of), call)

    def _was_committed(self, app_id: str, doubt: CommitOutcomeUnknownError, count: int) -> bool:
        """Whether the append ``doubt`` reports was committed (its window dropped again if
        so); see :meth:`append`'s ``retry_of``."""
        return bool(drive(self._was_committed_steps(app_id, doubt, count), call))

    def compact(
        self,
        app_id: str | int,
        summarize: Callable[[list[Message]], Any],
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        """Replace the older part of the app's window with a summary; see
        :meth:`ChatMemory.compact`."""
        steps = self._compact_steps(
            app_id, summarize, keep_last_tokens, keep_last_messages, display
        )
        return drive(steps, call)

    def _cached_window(self, app_id: str) -> list[Message]:
        """The app's window as reads serve it before any token budget: the cached one (stale
        windows dropped first, an in-process one checked against the app's generation), or
        on a miss the window rebuilt from SQL (``reload_max`` messages) and cached."""
        return drive(self._cached_window_steps(app_id), call)

    def _write(
        self,
        app_id: str,
        user_id: str | None,
        batch: list[Message],
        drafts: list[DisplayDraft],
        fence: Collection[str] = (),
    ) -> list[int]:
        """Both histories in one transaction (one multi-row INSERT per table), then the cache.
        ``fence``: call ids whose requests must still be stored (else nothing is written:
        :class:`~memstore.errors.UnknownToolCallError`), checked under the app's lock."""
        return drive(self._write_steps(app_id, user_id, batch, drafts, fence), call)

    def _cache_append(
        self, app_id: str, entries: list[WindowEntry], step: GenerationStep | None
    ) -> None:
        """Hand a committed write's window entries to the cache, with its generation step
        (see :meth:`_append_action`; adapters writing in their own transaction call it too)."""
        drive(self._cache_append_steps(app_id, entries, step), call)

    def _through(self, steps: Steps[T], *app_ids: str, purge: bool = False) -> T:
        return drive(steps, call)

    def collector(self, app_id: str | int, user_id: str | None = None) -> TurnCollector:
        """A :class:`~memstore.collector.TurnCollector` for one streamed agent turn of the app.

        Use it as a context manager; see the README section "Stream collector".
        """
        from memstore.collector import TurnCollector

        return TurnCollector(self, normalize_app_id(app_id), normalize_user_id(user_id))

    # -- reads -------------------------------------------------------------------------------

    def load_window(
        self,
        app_id: str | int,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        *,
        start_at_user: bool | None = None,
        oversize: str = "keep",
        summaries: bool = True,
    ) -> list[Message]:
        """The newest messages of the original history, edge-checked, straight from SQL.

        At most ``max_messages``, except that a tool group at the edge is kept whole. With
        ``max_tokens``, only the newest whole units (messages, whole tool groups) whose token
        counts (by ``token_counter``) sum to at most ``max_tokens``; when both are given both
        hold. With neither, ``max_messages`` is 50 and ``max_tokens`` the
        ``window_max_tokens`` setting; with only ``max_tokens``, there is no message bound;
        with only ``max_messages``, there is no token bound.
        When the newest unit alone exceeds ``max_tokens`` the window is that unit alone (a
        warning is logged); ``oversize="truncate-results"`` then cuts its largest tool
        results, with a marker, until it fits. With ``start_at_user`` (default: the
        ``window_start_at_user`` setting) the window starts at a user message.

        After a compaction the window is the app's newest summary (in the ``summary_role``
        setting's role) followed by the newest whole units after the range it covers; the
        summary counts toward both bounds and ``start_at_user`` applies after it.
        ``summaries=False`` gives the raw window, as if no compaction had happened.
        """
        steps = self._load_window_steps(
            app_id, max_messages, max_tokens, start_at_user, oversize, summaries
        )
        return drive(steps, call)

    def memory(self, app_id: str | int) -> ChatMemory:
        """The memory window of one app (cached, rebuilt from SQL on a miss)."""
        return ChatMemory(self, normalize_app_id(app_id))

    def reload(self, app_id: str | int, max_messages: int | None = None) -> ReloadReport:
        """Rebuild the app's cached window from SQL now, and report what the edge check did."""
        return drive(self._reload_steps(app_id, max_messages), call)

    def _reload_batch(self, app_ids: list[str], limit: int | None = None) -> list[ReloadReport]:
        """:meth:`reload` of several apps (normalized), in order, with the round trips shared:
        with a Redis cache (one server or Sentinel), one pipelined call drops the windows
        and reads their versions, one statement reads every app's rows (the loader's first
        read; a tool group at an edge still gets its own bounded read), one statement their
        generations (after all the rows), and one pipelined call stores the windows. Other
        caches reload the apps one by one. (``memstore reload`` runs batches of
        :data:`RELOAD_BATCH` apps: memory stays flat however many apps there are, and the
        next batch's reads overlap this one's windows: see
        :func:`memstore.operations.reload_apps`.)"""
        return self._reload_stores(self._reload_reads(app_ids, limit))

    def _reload_reads(self, app_ids: list[str], limit: int | None = None) -> _ReloadReads:
        """The first half of :meth:`_reload_batch`: the windows dropped, their versions and
        the apps' rows read (without a batching cache: the whole reload, one app at a
        time)."""
        size = self.settings.reload_max if limit is None else limit
        cache = self.cache
        if not (self._guarded and isinstance(cache, RedisWindowCache)) or cache.is_cluster:
            return _ReloadReads(app_ids, size, done=[self.reload(app, size) for app in app_ids])
        apps = list(dict.fromkeys(app_ids))
        versions = dict(zip(apps, cache.begin_reloads(apps), strict=True))
        first = next(self._window_steps(size))
        prefetched = sql_reload.first_reads(self.engine, apps, first, self.cipher)
        return _ReloadReads(app_ids, size, versions, first, prefetched)

    def _reload_stores(self, reads: _ReloadReads) -> list[ReloadReport]:
        """The second half of :meth:`_reload_batch`: the windows built, checked against the
        generations (read now, after every app's rows) and stored; the reports."""
        if reads.done is not None:
            return reads.done
        cache = self.cache
        assert isinstance(cache, RedisWindowCache) and reads.first is not None
        size, first, prefetched = reads.size, reads.first, reads.prefetched
        apps = list(reads.versions)
        windows = {app: self._prefetched_window(app, size, first, prefetched[app]) for app in apps}
        generations = sql_reload.generations(self.engine, apps)  # after every app's rows
        parts = {app: self._rebuilt_part(window) for app, window in windows.items()}
        batch = []
        for app in apps:
            window, budgeted = windows[app], parts[app]
            kept = window.messages if budgeted is None else budgeted.messages
            entries = self._entries(kept, [prefetched[app]])
            reflected = generations[app] if entries else None
            batch.append((app, entries, window.synthetic_call_ids, reads.versions[app], reflected))
        stored = dict(zip(apps, cache.store_batch(batch), strict=True))
        reports = {}
        for app in apps:
            self._rebuilt(stored[app])
            reports[app] = reload_report(app, windows[app], stored[app], parts[app])
        return [reports[app] for app in reads.app_ids]

    def _prefetched_window(self, app_id: str, limit: int, first: RowRequest, rows: Rows) -> Window:
        """The rebuilt window of ``app_id`` whose first read (``first``) returned ``rows``."""
        pending = [rows]

        def fetch(request: RowRequest) -> Rows:
            if pending and request == first:
                return pending.pop()
            return self._sql.fetch(app_id, request)

        return self._built(run_steps(self._window_steps(limit), fetch))

    def history(
        self, app_id: str | int, limit: int = 20, before_id: int | None = None
    ) -> list[DisplayEntry]:
        """One page of the display history, newest first; pass the last id as ``before_id``."""
        app = normalize_app_id(app_id)
        return self._sql.history(app, history_page(limit, before_id), before_id)

    # -- operator actions ----------------------------------------------------------------------

    def purge(self, app_id: str | int) -> PurgeReport:
        """Hard-delete the app's rows (both histories and its loop-guard records) and its cache
        keys, in one transaction and one cache call. Exact match only."""
        return drive(self._purge_steps(normalize_app_id(app_id)), call)

    def prune(
        self,
        older_than: timedelta | None = None,
        keep_last: int | None = None,
        app_ids: Iterable[str | int] | None = None,
        *,
        dry_run: bool = False,
    ) -> list[PruneReport]:
        """Hard-delete the oldest messages of apps: those created more than ``older_than`` ago
        and/or all but the newest ``keep_last`` (both limits apply when both are given).

        A tool exchange is removed whole or kept whole, so what remains never starts with a
        tool result and never holds a request without its results. Display rows go by the
        same age (and those older than the first kept message go too); with ``older_than``
        the loop guard's records last updated before the cutoff go as well. Deletes run in
        short batches; rows written while the prune runs are never touched; the window of an
        app that lost messages is dropped. ``app_ids=None`` prunes every app and reports only
        the apps that lost rows. Raises :class:`~memstore.errors.InvalidRetentionError` for
        a missing or out-of-range rule.
        """
        rule = RetentionRule(older_than, keep_last)
        if app_ids is not None:
            return [self._prune_app(app, rule, dry_run) for app in normalize_app_ids(app_ids)]
        reports = (self._prune_app(app, rule, dry_run) for app in iter_app_ids(self.engine))
        return [report for report in reports if not prune_is_empty(report)]

    def _prune_app(self, app_id: str, rule: RetentionRule, dry_run: bool) -> PruneReport:
        return drive(self._prune_steps(app_id, rule, dry_run), call)

    def export(
        self, app_ids: Iterable[str | int] | None = None, user_id: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every row of the apps (all apps when both arguments are ``None``) or of one user, as
        records of the ``memstore-export`` format (see :mod:`memstore.core.export`): a header,
        then per app its original history, display history and loop-guard records.

        Streamed page by page: memory stays flat whatever the size of an app. For a user, the
        loop-guard records are those carrying the user's id, and those with no user id whose
        call id only the user's rows name (see :mod:`memstore.sql.user_data`).
        """
        from memstore._version import __version__

        apps = None if app_ids is None else normalize_app_ids(app_ids)
        user = normalize_user_id(user_id)
        export_scope(apps, user)
        yield header_record(datetime.now(timezone.utc), __version__)
        if user is not None:
            yield from self._export_user(user)
            return
        for app in apps if apps is not None else iter_app_ids(self.engine):
            for row in self._export.app_rows(original, app):
                yield original_record(
                    row, decode_row(self.cipher, row["app_id"], row["id"], row["payload"])
                )
            for row in self._export.app_rows(display, app):
                yield display_record(row, self.cipher)
            for row in self._export.app_executions(app):
                yield execution_record(row, self.cipher)

    def _export_user(self, user: str) -> Iterator[dict[str, Any]]:
        calls: dict[str, list[str]] = {}
        for row in self._export.user_rows(original, user):
            message = decode_row(self.cipher, row["app_id"], row["id"], row["payload"])
            calls.setdefault(row["app_id"], []).extend(message_call_ids(message))
            yield original_record(row, message)
        for row in self._export.user_rows(display, user):
            yield display_record(row, self.cipher)
        for row in self._export.user_executions(user):
            yield execution_record(row, self.cipher)
        for app, call_ids in sorted(calls.items()):
            for row in self._export.unowned_executions(app, user, sorted(set(call_ids))):
                yield execution_record(row, self.cipher)

    def rekey(
        self,
        batch_size: int = 500,
        *,
        dry_run: bool = False,
        app_ids: Iterable[str | int] | None = None,
        progress: Callable[[str, int], None] | None = None,
    ) -> RekeyReport:
        """Seal every stored text (message payloads, display texts, loop-guard results) that
        is plaintext or under an older key with the first of ``encryption_keys``.

        Runs in batches of ``batch_size`` rows, one short transaction each, with a
        compare-and-set per row so concurrent writes are never lost; safe to rerun (it
        resumes). ``app_ids`` limits it to those apps. ``progress(table, rows)`` is called
        after each batch. See
        :mod:`memstore.sql.rekey`.
        """
        from memstore.sql.rekey import rekey

        apps = None if app_ids is None else normalize_app_ids(app_ids)
        return rekey(
            self.engine,
            self.cipher,
            batch_size=batch_size,
            dry_run=dry_run,
            app_ids=apps,
            progress=progress,
        )

    def import_records(self, records: Iterable[Mapping[str, Any]]) -> ImportReport:
        """Write records of the ``memstore-export`` format (the first one its header).

        Idempotent: a row whose id (a loop-guard record: app id and idempotency key) is
        already stored is skipped, so importing the same records twice changes nothing and
        an interrupted import can simply be run again. Rows are written as they are (ids,
        timestamps, soft-deleted flags kept; no write-time checks on tool groups). Each batch
        of records is validated first and commits whole or not at all; a bad record raises
        :class:`~memstore.errors.ImportRecordError` with its position (batches before it
        stay written). Windows of the apps that got rows are dropped.
        """
        counts: dict[str, AppCounts] = {}
        batch: list[ImportRow] = []
        seen = 0
        headed = False
        for line, data in enumerate(records, start=1):
            if not headed:
                check_header(data, line)
                headed = True
                continue
            seen += 1
            row = parse_record(data, line, self.settings.max_text_bytes)
            if row is not None:
                batch.append(row)
            if len(batch) >= IMPORT_BATCH:
                self._import_batch(batch, counts)
                batch = []
        if not headed:
            check_header(None, 1)
        self._import_batch(batch, counts)
        return import_report(seen, counts)

    def _import_batch(self, batch: list[ImportRow], counts: dict[str, AppCounts]) -> None:
        drive(self._import_steps(batch, counts), call)

    def close(self) -> None:
        """Release the worker-id lease it holds and the connections this store created (an
        engine or cache passed in stays open)."""
        if self._closed:
            return
        self._closed = True
        self._release_lease()
        self._release_connections()

    def _abandon(self) -> None:
        """What a finalizer may do for a store nobody closed: stop the heartbeat, forget the
        lease without releasing it (it expires ``worker_lease_seconds`` after its last renewal)
        and close this store's connections from a short-lived daemon thread. Runs no SQL and
        never blocks the calling thread (a garbage collection may run on an event loop's)."""
        if self._closed:
            return
        self._closed = True
        self._stop_heartbeat.set()
        with self._lease_lock:
            self._lease = None
        heartbeat = self._heartbeat

        def release() -> None:
            if heartbeat is not None:  # a renewal in flight returns its connection first
                heartbeat.join(timeout=60)
            self._release_connections()

        threading.Thread(target=release, name="memstore-abandon", daemon=True).start()

    def _release_connections(self) -> None:
        if self._owns_cache:
            self.cache.close()
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Bounded(Generic[T]):
    """Runs ``probe`` in a daemon thread so a caller can stop waiting for it: a connection
    attempt to an unreachable host must not hold a readiness probe past its timeout."""

    def __init__(self, probe: Callable[[], T]) -> None:
        self._value: T | Exception | None = None
        self._done = threading.Event()
        threading.Thread(
            target=self._run, args=(probe,), name="memstore-health", daemon=True
        ).start()

    def _run(self, probe: Callable[[], T]) -> None:
        try:
            self._value = probe()
        except Exception as error:
            self._value = error
        finally:
            self._done.set()

    def outcome(self, deadline: float) -> T | Exception | None:
        """The probe's result or error; ``None`` when it did not finish by ``deadline``."""
        if not self._done.wait(max(0.0, deadline - time.monotonic())):
            return None
        return self._value


def _heartbeat(ref: weakref.ref[MemoryStore], stop: threading.Event, interval: float) -> None:
    """Renew the store's lease every ``interval`` seconds until it closes or is collected."""
    while not stop.wait(interval):
        store = ref()
        if store is None:
            return
        store._renew_in_background()
        del store


class ChatMemory:
    """One app's memory window: what the model gets each call."""

    def __init__(self, store: MemoryStore, app_id: str) -> None:
        self._store = store
        self.app_id = app_id

    def messages(self, max_tokens: int | None = None, *, oversize: str = "keep") -> list[Message]:
        """The cached window; on a miss it is rebuilt from SQL (``reload_max`` messages).

        With ``max_tokens`` (default: the ``window_max_tokens`` setting), only the newest
        whole units of the cached window that fit the budget, by the rules of
        :meth:`MemoryStore.load_window` (``oversize`` as there). An in-process window is
        served only while the app's generation in SQL is the one it was built at (one
        primary-key lookup), so another process's write is never missed. With Redis, the
        windows of apps stamped stale by a writer that could not reach Redis are dropped first
        (looked up at most every half of ``stale_window_max_seconds``).
        """
        budget, policy = self._store._token_budget(max_tokens, oversize)
        messages = self._store._cached_window(self.app_id)
        budgeted = self._store._budget_cached(self.app_id, messages, budget, policy)
        return messages if budgeted is None else budgeted.messages

    def add(self, message: Message | dict[str, Any], user_id: str | None = None) -> int:
        """Write ``message`` durably, then append it to the cached window; return its id."""
        return self._store.append(self.app_id, [message], user_id=user_id)[0]

    def add_all(
        self, messages: Iterable[Message | dict[str, Any]], user_id: str | None = None
    ) -> list[int]:
        """Write several messages in one transaction (see :meth:`MemoryStore.append`)."""
        return self._store.append(self.app_id, messages, user_id=user_id)

    def compact(
        self,
        summarize: Callable[[list[Message]], Any],
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        """Replace the older part of the window with a summary written by ``summarize``.

        The window (``reload_max`` messages, opened by the previous summary) is cut at a unit
        boundary: the newest whole units within ``keep_last_tokens`` tokens and
        ``keep_last_messages`` messages stay (both bounds hold when both are given; the
        newest unit always stays). ``summarize(messages) -> str`` gets the rest, the previous
        summary first, so summaries chain; it runs outside any transaction. Its text is
        stored as a ``summary`` row of the original history recording the id range it
        covers; from then on windows are ``[summary] + the newest units after that range``.
        Nothing is deleted or changed: ``history``, ``export`` and ``memstore show
        --original`` still see every message. ``display=True`` also writes the summary to
        the display history (role ``"summary"``).

        Messages appended while ``summarize`` runs are neither lost nor covered. Raises
        :class:`~memstore.errors.SummarizerError` when ``summarize`` raises or returns no
        text, and :class:`~memstore.errors.CompactionConflictError` when another compaction
        stored a summary meanwhile; either way nothing is written. Returns a
        :class:`~memstore.reports.CompactionReport` (``compacted=False`` when nothing was
        older than the kept part: ``summarize`` was not called).
        """
        return self._store.compact(
            self.app_id, summarize, keep_last_tokens, keep_last_messages, display=display
        )

    def invalidate(self) -> None:
        """Drop the cached window; the next read rebuilds it from SQL."""
        self._store._cache_update(lambda: self._store.cache.invalidate(self.app_id))
