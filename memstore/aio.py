"""``AsyncMemoryStore``: the asyncio form of :class:`memstore.MemoryStore`.

>>> import asyncio
>>> from memstore import Settings, UserMessage
>>> from memstore.aio import AsyncMemoryStore
>>> async def main() -> list[str]:
...     async with AsyncMemoryStore(Settings(database_url="sqlite:///:memory:")) as store:
...         await store.migrate()
...         await store.memory("app-1").add(UserMessage(text="hi"))
...         return [m.type for m in await store.memory("app-1").messages()]
>>> asyncio.run(main())
['user']

Same methods and guarantees as the sync store, as coroutines, on SQLAlchemy's async engine
and ``redis.asyncio``. Every decision (window selection, edge check, eviction, stream
assembly, row layout) is the same pure code the sync store runs; only the I/O is awaited.
Needs the ``async`` extra (``pip install 'memstore[async]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from memstore.cache.aio import AsyncInProcessWindowCache, AsyncRedisWindowCache, AsyncWindowCache
from memstore.collector import TurnInput
from memstore.config import Settings
from memstore.core import health
from memstore.core.display import DisplayDraft
from memstore.core.health import DEFAULT_HEALTH_TIMEOUT_SECONDS
from memstore.core.inputs import normalize_app_id, normalize_app_ids, normalize_user_id
from memstore.core.plans import history_page
from memstore.core.retention import RetentionRule
from memstore.core.steps import adrive
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
    ReloadReport,
)
from memstore.shielding import finish
from memstore.sql import leases as sql_leases
from memstore.sql import staleness as sql_staleness
from memstore.sql.aio import AsyncSqlHistory, LentConnections, make_async_engine
from memstore.sql.aio_lifecycle import AsyncSqlExport, AsyncSqlRetention, iter_app_ids
from memstore.sql.engine import translated_errors
from memstore.sql.generation import GenerationStep
from memstore.sql.inline_read import InlineSqliteReads
from memstore.sql.lifecycle import prune_is_empty
from memstore.store_base import Summarizer
from memstore.store_lifecycle import StoreLifecycle
from memstore.store_memory import AsyncChatMemory as AsyncChatMemory
from memstore.store_reads import Steps
from memstore.store_steps import AsyncScoped, bound_calls
from memstore.store_writes import acall

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger("memstore")

T = TypeVar("T")


async def _bounded(probe: Awaitable[T], seconds: float) -> T | Exception | None:
    """``probe``'s result or error; ``None`` (the probe cancelled) past ``seconds``."""
    try:
        return await asyncio.wait_for(probe, seconds)
    except asyncio.TimeoutError:
        return None
    except Exception as error:
        return error


async def _apps_to_export(engine: AsyncEngine, apps: list[str] | None) -> AsyncIterator[str]:
    if apps is not None:
        for app in apps:
            yield app
        return
    async for app in iter_app_ids(engine):
        yield app


class AsyncMemoryStore(StoreLifecycle, AsyncScoped):
    """Chat memory on an async engine and cache. Share one per event loop (or process).

    Args:
        settings: configuration; ``Settings()`` when omitted.
        engine: an ``AsyncEngine`` to use instead of one built from ``settings.database_url``
            (the sync URL is mapped to an asyncio driver; see :mod:`memstore.sql.aio`).
        cache: an :class:`~memstore.cache.aio.AsyncWindowCache` instead of the default one.
        id_generator: see :class:`memstore.MemoryStore`.
        id_clock: see :class:`memstore.MemoryStore`.
        token_counter: see :class:`memstore.MemoryStore`.
        summarizer: see :class:`memstore.MemoryStore` (a plain or an ``async`` function).

    With ``worker_id="auto"`` (the default) the store leases a free worker id on its first
    write and renews it from an asyncio task; :meth:`close` releases it.
    """

    _sql: AsyncSqlHistory
    _retention: AsyncSqlRetention
    _export: AsyncSqlExport
    cache: AsyncWindowCache
    _local: AsyncInProcessWindowCache | None

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: AsyncEngine | None = None,
        cache: AsyncWindowCache | None = None,
        id_generator: SnowflakeGenerator | None = None,
        id_clock: Callable[[], int] | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        super().__init__(settings, id_generator, id_clock, token_counter, summarizer)
        self._heartbeat: asyncio.Task[None] | None = None
        self._stop_renewing: asyncio.Event | None = None
        """Set to end the heartbeat between renewals, never in the middle of one."""
        self._close_callbacks: list[Callable[[], object]] = []
        self._loop_watchers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, AsyncGenerator[None, None]
        ] = weakref.WeakKeyDictionary()
        self._alease_lock: asyncio.Lock | None = None
        self._owns_engine = engine is None
        self.engine = (
            engine if engine is not None else make_async_engine(self.settings.database_url)
        )
        self._lent = LentConnections(self.engine) if self._owns_engine else None
        self._calls = bound_calls(
            self.engine,
            sql_leases.aclaim,
            sql_leases.arenew,
            sql_leases.arelease,
            sql_staleness.astamp,
            sql_staleness.apending,
            sql_staleness.aclear,
        )
        self.inline_reads = (
            InlineSqliteReads.for_engine(self.engine)
            if self._owns_engine and self.settings.async_sqlite_inline_reads
            else None
        )
        """Window reads run on the calling thread (a SQLite file, ``async_sqlite_inline_reads``,
        an engine the store made); their ``served`` and ``passed_on`` counts. ``None``: every
        read goes to the driver."""
        self._sql = AsyncSqlHistory(self.engine, self.cipher, self.row_memo, self.inline_reads)
        self._retention = AsyncSqlRetention(self.engine, self.cipher)
        self._export = AsyncSqlExport(self.engine, self.cipher)
        self._stale_alock: asyncio.Lock | None = None
        url, owns = str(self.engine.url), self._owns_engine
        self._attach_cache(cache, AsyncRedisWindowCache, AsyncInProcessWindowCache, url, owns)

    async def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema (the same Alembic migrations as the sync store)."""
        self._watch_loop()
        from memstore.sql import migrate as migrations  # Alembic loads only when needed

        with translated_errors("migrating"):
            async with self.engine.begin() as conn:
                await conn.run_sync(migrations.upgrade_connection, revision)

    async def health(self, timeout: float = DEFAULT_HEALTH_TIMEOUT_SECONDS) -> HealthReport:
        """See :meth:`memstore.MemoryStore.health` (a probe past ``timeout`` is cancelled)."""
        self._watch_loop()
        from memstore.sql import health as sql_health

        seconds = self._health_timeout(timeout)
        started = time.monotonic()
        with_leases = self._lease_rows_needed()
        database, cache = await asyncio.gather(
            _bounded(sql_health.aprobe(self.engine, with_leases=with_leases), seconds),
            _bounded(self._ping_cache(), seconds),
        )
        return self._health_report(started, seconds, database, cache)

    async def _ping_cache(self) -> HealthCheck:
        cache = self.cache
        ping = getattr(cache, "ping", None)
        if callable(ping):
            answer = await ping()
            return health.failed("PING failed") if answer is False else health.passed("PING")
        if isinstance(cache, AsyncRedisWindowCache):
            await cache.client.ping()
            return health.passed("Redis answers PING")
        if isinstance(cache, AsyncInProcessWindowCache):
            return health.passed("in-process")
        return health.skipped(f"no probe for {type(cache).__name__}")

    async def _ensure_lease(self) -> SnowflakeGenerator:
        """See :meth:`memstore.MemoryStore._ensure_lease`."""
        self._watch_loop()
        generator = self._usable_generator()
        if generator is not None:
            return generator
        if self._alease_lock is None:
            self._alease_lock = asyncio.Lock()
        async with self._alease_lock:
            generator = self._usable_generator()
            if generator is not None:
                return generator
            return await adrive(self._claim_steps(), acall)

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._stop_renewing = stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            self._heartbeat = loop.create_task(self._renew_forever(stop))

    async def _renew_forever(self, stop: asyncio.Event) -> None:
        """The heartbeat task: renew the held lease every third of its period until ``stop``."""
        interval = self.settings.worker_lease_seconds / 3
        while True:
            try:
                await asyncio.wait_for(stop.wait(), interval)
                return
            except asyncio.TimeoutError:
                pass
            await self._renew_once()

    async def _renew_once(self) -> None:
        """One heartbeat: renew the held lease; forget it if another process claimed it."""
        await adrive(self._renewal_steps(), acall)

    async def _end_heartbeat(self) -> None:
        """End the heartbeat: wait for a renewal in flight to finish (cancelling it would
        split its transaction), or cancel it while it sleeps; a heartbeat of another event
        loop is only asked to stop."""
        task, self._heartbeat = self._heartbeat, None
        stop, self._stop_renewing = self._stop_renewing, None
        if task is None or task.done():
            return
        if task.get_loop() is not asyncio.get_running_loop():
            with contextlib.suppress(RuntimeError):  # that loop is closed: the task is gone
                task.get_loop().call_soon_threadsafe(task.cancel)
            return
        if stop is not None:
            stop.set()
        with contextlib.suppress(Exception):
            await finish(task)

    async def _release_lease(self) -> None:
        await adrive(self._release_steps(), acall)

    async def _cache_update(self, update: Callable[[], Awaitable[T]]) -> T:
        """See :meth:`memstore.MemoryStore._cache_update`."""
        self._watch_loop()
        if not self._stale_tracking:
            return await update()
        result: T = await adrive(self._stamped_steps(update), acall)
        return result

    async def _drop_stale_windows(self) -> None:
        """See :meth:`memstore.MemoryStore._drop_stale_windows`."""
        if not self._stale_check_due():
            return
        if self._stale_alock is None:
            self._stale_alock = asyncio.Lock()
        async with self._stale_alock:
            await adrive(self._stale_poll_steps(), acall)

    async def append(
        self,
        app_id: str | int,
        messages: Iterable[Message | dict[str, Any]],
        user_id: str | None = None,
        *,
        retry_of: CommitOutcomeUnknownError | None = None,
    ) -> list[int]:
        """See :meth:`memstore.MemoryStore.append`."""
        return await adrive(self._append_steps(app_id, messages, user_id, retry_of), acall)

    async def _was_committed(
        self, app_id: str, doubt: CommitOutcomeUnknownError, count: int
    ) -> bool:
        """See :meth:`memstore.MemoryStore._was_committed`."""
        return bool(await adrive(self._was_committed_steps(app_id, doubt, count), acall))

    async def compact(
        self,
        app_id: str | int,
        summarize: Summarizer,
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        """See :meth:`memstore.ChatMemory.compact`; ``summarize`` may be an ``async def``
        (awaited) or a plain function."""
        steps = self._compact_steps(
            app_id, summarize, keep_last_tokens, keep_last_messages, display
        )
        return await adrive(steps, acall)

    async def _cached_window(self, app_id: str) -> list[Message]:
        """See :meth:`memstore.MemoryStore._cached_window`."""
        self._watch_loop()
        return await adrive(self._cached_window_steps(app_id), acall)

    async def _write_through(self, write: Awaitable[T], *app_ids: str, purge: bool = False) -> T:
        """Run ``write`` (SQL, then the windows of ``app_ids``) to its end: a cancelled caller
        waits for it, then is cancelled (a commit without its cache update would leave the
        shared window behind SQL). When the write itself is interrupted (the event loop ends
        under it), whether it committed is unknown: the windows of ``app_ids`` are dropped
        (purged, for a purge) before the cancellation goes on, so none is served without it.
        """

        drop = self.cache.purge if purge else self.cache.invalidate

        async def guarded() -> T:
            try:
                return await write
            except asyncio.CancelledError:
                for app in app_ids:
                    with contextlib.suppress(Exception):
                        await self._cache_update(partial(drop, app))
                raise

        return await finish(guarded())

    async def _cache_append(
        self, app_id: str, entries: list[WindowEntry], step: GenerationStep | None
    ) -> None:
        """See :meth:`memstore.MemoryStore._cache_append`."""
        await adrive(self._cache_append_steps(app_id, entries, step), acall)

    def _through(self, steps: Steps[T], *app_ids: str, purge: bool = False) -> Awaitable[T]:
        return self._write_through(adrive(steps, acall), *app_ids, purge=purge)

    def collector(self, app_id: str | int, user_id: str | None = None) -> AsyncTurnCollector:
        """An :class:`AsyncTurnCollector` for one streamed turn; use it with ``async with``."""
        return AsyncTurnCollector(self, normalize_app_id(app_id), normalize_user_id(user_id))

    async def load_window(
        self,
        app_id: str | int,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        *,
        start_at_user: bool | None = None,
        oversize: str = "keep",
        summaries: bool = True,
    ) -> list[Message]:
        """See :meth:`memstore.MemoryStore.load_window`."""
        self._watch_loop()
        steps = self._load_window_steps(
            app_id, max_messages, max_tokens, start_at_user, oversize, summaries
        )
        return await adrive(steps, acall)

    def memory(self, app_id: str | int) -> AsyncChatMemory:
        """The memory window of one app (cached, rebuilt from SQL on a miss)."""
        return AsyncChatMemory(self, normalize_app_id(app_id))

    async def reload(self, app_id: str | int, max_messages: int | None = None) -> ReloadReport:
        """See :meth:`memstore.MemoryStore.reload`."""
        self._watch_loop()
        return await adrive(self._reload_steps(app_id, max_messages), acall)

    async def history(
        self, app_id: str | int, limit: int = 20, before_id: int | None = None
    ) -> list[DisplayEntry]:
        """See :meth:`memstore.MemoryStore.history`."""
        self._watch_loop()
        app = normalize_app_id(app_id)
        return await self._sql.history(app, history_page(limit, before_id), before_id)

    async def purge(self, app_id: str | int) -> PurgeReport:
        """See :meth:`memstore.MemoryStore.purge`."""
        self._watch_loop()
        app = normalize_app_id(app_id)
        return await self._through(self._purge_steps(app), app, purge=True)

    async def prune(
        self,
        older_than: timedelta | None = None,
        keep_last: int | None = None,
        app_ids: Iterable[str | int] | None = None,
        *,
        dry_run: bool = False,
    ) -> list[PruneReport]:
        """See :meth:`memstore.MemoryStore.prune`."""
        self._watch_loop()
        rule = RetentionRule(older_than, keep_last)
        if app_ids is not None:
            apps = normalize_app_ids(app_ids)
            return [await self._prune_app(app, rule, dry_run) for app in apps]
        reports = []
        async for app in iter_app_ids(self.engine):
            report = await self._prune_app(app, rule, dry_run)
            if not prune_is_empty(report):
                reports.append(report)
        return reports

    async def _prune_app(self, app_id: str, rule: RetentionRule, dry_run: bool) -> PruneReport:
        return await adrive(self._prune_steps(app_id, rule, dry_run), acall)

    async def export(
        self, app_ids: Iterable[str | int] | None = None, user_id: str | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """See :meth:`memstore.MemoryStore.export` (an async iterator here)."""
        self._watch_loop()
        apps, user, header = self._export_start(app_ids, user_id)
        yield header
        if user is not None:
            for rows, record in self._user_sources(user):
                async for row in rows:
                    yield record(row)
            return
        async for app in _apps_to_export(self.engine, apps):
            for rows, record in self._app_sources(app):
                async for row in rows:
                    yield record(row)

    async def import_records(self, records: Iterable[Mapping[str, Any]]) -> ImportReport:
        """See :meth:`memstore.MemoryStore.import_records`."""
        self._watch_loop()
        return await adrive(self._import_records_steps(records), acall)

    async def close(self) -> None:
        """Release the worker-id lease it holds and the connections this store created (an
        engine or cache passed in stays open). A renewal of the lease in flight is waited for,
        never cut; a caller cancelled meanwhile waits for the close to end, then is cancelled.
        After it returns, nothing of this store holds a lock in the database."""
        if self._closed:
            return
        self._closed = True
        await finish(self._close())

    def _on_close(self, callback: Callable[[], object]) -> None:
        """Run the blocking ``callback`` (in a worker thread) when this store closes: the
        adapters close the synchronous twin they built for it this way."""
        self._close_callbacks.append(callback)

    async def _close(self) -> None:
        await self._release_loop_resources()
        for callback in self._close_callbacks:
            await asyncio.to_thread(callback)

    async def _release_loop_resources(self) -> None:
        """Release the lease and close the connections this store made: all of it belongs to
        the running event loop."""
        await self._release_lease()
        if self._owns_cache:
            await self.cache.close()
        if self.inline_reads is not None:
            self.inline_reads.close()
        if self._owns_engine:
            await self.engine.dispose()

    def _watch_loop(self) -> None:
        """Make sure the running loop releases this store's resources if it ends with the
        store still open (``asyncio.run`` returning): an async generator parked on the loop,
        which the loop closes at its shutdown (``shutdown_asyncgens``), before it closes
        itself. The store stays usable from another loop (new connections, a new lease)."""
        loop = asyncio.get_running_loop()
        if self._closed or loop in self._loop_watchers:
            return
        watcher = self._until_loop_ends()
        self._loop_watchers[loop] = watcher
        # the first step registers it with the loop (PEP 525 hooks) and parks it at its
        # ``yield``: no await before that, so it runs right here
        with contextlib.suppress(StopIteration):
            watcher.__anext__().send(None)

    async def _until_loop_ends(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not self._closed:
                if self._lent is not None:  # the loop's tasks are over: nobody uses these
                    stranded = await self._lent.invalidate_stranded()
                    if stranded:
                        logger.debug("memstore: closed %d connections left lent out", stranded)
                await self._release_loop_resources()

    async def _aleave(self, exc: BaseException | None) -> None:
        await self.close()


class AsyncTurnCollector(TurnInput, AsyncScoped):
    """The asyncio form of :class:`memstore.collector.TurnCollector`.

    ``on_text``, ``on_tool_call_delta`` and ``tool_calls`` are plain methods (no I/O);
    ``on_tool_executed`` and ``feed`` are coroutines because they may flush.
    """

    def __init__(self, store: AsyncMemoryStore, app_id: str, user_id: str | None) -> None:
        super().__init__(app_id, user_id, store.settings.max_text_bytes)
        self._store = store

    async def on_tool_executed(
        self, id: str, result: str, is_error: bool = False, *, truncate: bool = False
    ) -> None:
        """Report a tool's result; it is written (with the model call's AI message, when it is
        the first result) before this returns. Rejected results and ``truncate`` as in
        :meth:`memstore.collector.TurnCollector.on_tool_executed`."""
        if self._assembler.on_tool_executed(id, result, is_error, truncate=truncate):
            await self._flush(None)

    async def feed(self, chunk: object) -> None:
        """One chunk of a LangChain4j-style, OpenAI Chat Completions or Responses, or Anthropic
        stream (reasoning included: see :meth:`~memstore.core.stream.StreamAssembler.feed`)."""
        if self._assembler.feed(chunk):
            await self._flush(None)

    async def _flush(self, display: DisplayDraft | None) -> None:
        await adrive(self._flush_steps(display), acall)

    async def _aleave(self, exc: BaseException | None) -> None:
        await adrive(self._finish_steps(exc), acall)  # an exception of the block re-raises
