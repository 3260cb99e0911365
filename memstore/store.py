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
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy.engine import Engine

from memstore.cache.base import WindowCache
from memstore.cache.memory_cache import InProcessWindowCache, NoWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.config import Settings
from memstore.core import health
from memstore.core.health import DEFAULT_HEALTH_TIMEOUT_SECONDS
from memstore.core.inputs import normalize_app_id, normalize_app_ids, normalize_user_id
from memstore.core.plans import history_page
from memstore.core.retention import RetentionRule
from memstore.core.steps import drive
from memstore.core.tokens import TokenCounter
from memstore.core.window import WindowEntry
from memstore.errors import CommitOutcomeUnknownError
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
from memstore.sql import staleness as sql_staleness
from memstore.sql.admin import iter_app_ids
from memstore.sql.engine import make_engine
from memstore.sql.export import SqlExport
from memstore.sql.generation import GenerationStep
from memstore.sql.lifecycle import SqlRetention, prune_is_empty
from memstore.sql.repository import SqlHistory
from memstore.store_base import Summarizer
from memstore.store_memory import ChatMemory as ChatMemory
from memstore.store_reads import Steps
from memstore.store_reload import RELOAD_BATCH as RELOAD_BATCH
from memstore.store_reload import BatchReloads
from memstore.store_steps import Scoped, bound_calls
from memstore.store_writes import call

if TYPE_CHECKING:
    from memstore.collector import TurnCollector

logger = logging.getLogger("memstore")

T = TypeVar("T")


class MemoryStore(BatchReloads, Scoped):
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
    cache: WindowCache
    _local: InProcessWindowCache | None

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
        self._calls = bound_calls(
            self.engine,
            sql_leases.claim,
            sql_leases.renew,
            sql_leases.release,
            sql_staleness.stamp,
            sql_staleness.pending,
            sql_staleness.clear,
        )
        self._sql = SqlHistory(self.engine, self.cipher, self.row_memo)
        self._retention = SqlRetention(self.engine, self.cipher)
        self._export = SqlExport(self.engine, self.cipher)
        self._stale_lock = threading.Lock()
        url, owns = str(self.engine.url), self._owns_engine
        self._attach_cache(cache, RedisWindowCache, InProcessWindowCache, url, owns)

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
            return drive(self._claim_steps(), call)

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
        drive(self._renewal_steps(), call)

    def _end_heartbeat(self) -> None:
        """Stop the heartbeat thread, waiting (a while) for a renewal in flight."""
        self._stop_heartbeat.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)

    def _release_lease(self) -> None:
        drive(self._release_steps(), call)

    # -- stale windows across instances ------------------------------------------------------

    def _cache_update(self, update: Callable[[], T]) -> T:
        """Run a cache update that follows a committed change; when the cache skipped it
        (Redis unreachable), stamp the app in SQL so that every instance drops its window
        (see :mod:`memstore.core.staleness`). Never raises for the stamp."""
        if not self._stale_tracking:
            return update()
        result: T = drive(self._stamped_steps(update), call)
        return result

    def _drop_stale_windows(self) -> None:
        """Before serving a cached window: when a poll is due, drop the windows of the apps
        stamped stale and clear the stamps of the windows dropped."""
        if not self._stale_check_due():
            return
        with self._stale_lock:
            drive(self._stale_poll_steps(), call)

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
        apps, user, header = self._export_start(app_ids, user_id)
        yield header
        if user is not None:
            for rows, record in self._user_sources(user):
                yield from map(record, rows)
            return
        for app in apps if apps is not None else iter_app_ids(self.engine):
            for rows, record in self._app_sources(app):
                yield from map(record, rows)

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
        return drive(self._import_records_steps(records), call)

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

    def _leave(self, exc: BaseException | None) -> None:
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
