"""The store's window reads, decided once for :class:`~memstore.MemoryStore` and
:class:`~memstore.aio.AsyncMemoryStore`: loading a window from SQL, serving the cached one,
rebuilding and reloading it. Generators of I/O steps, as :mod:`memstore.store_writes`
explains; the stores drive them."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from memstore.cache.base import WindowPolicy
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id
from memstore.core.loader import Rows, WindowSteps, window_steps
from memstore.core.plans import positive, reload_report
from memstore.core.staleness import marks_to_clear
from memstore.core.window import Window
from memstore.errors import StorageError
from memstore.messages import Message
from memstore.reports import ReloadReport
from memstore.store_base import collecting_skips
from memstore.store_leases import StoreLeases
from memstore.store_steps import IO as IO
from memstore.store_steps import Steps as Steps

T = TypeVar("T")


class StoreReads(StoreLeases):
    """The read generators both stores drive, and the stale-window steps."""

    if TYPE_CHECKING:  # what the stores provide (their own types; sync or async)
        _sql: Any
        _local: Any
        cache: Any

        def _drop_stale_windows(self) -> Any: ...

    def _cache_for(self, redis_cache: Any, local_cache: Callable[[WindowPolicy], T]) -> T:
        """The default window cache: ``redis_cache`` (a class with ``from_url``) on the
        ``redis_url`` setting, else ``local_cache``, both with the settings' window policy."""
        policy = WindowPolicy.from_settings(self.settings)
        if self.settings.redis_url:
            cache: T = redis_cache.from_url(
                self.settings.redis_url,
                policy,
                self.settings.redis_timeout_seconds,
                metrics=self._metrics,
            )
            return cache
        return local_cache(policy)

    def _attach_cache(
        self,
        cache: object | None,
        redis_cache: type,
        local_cache: type,
        url: str,
        owns_engine: bool,
    ) -> None:
        """Use ``cache``, or the default one (:meth:`_cache_for`), and set what follows from
        its kind (``redis_cache``, ``local_cache`` or another)."""
        self._owns_cache = cache is None
        self.cache = cache if cache is not None else self._cache_for(redis_cache, local_cache)
        # An in-process window cannot see other processes' writes: check it against the
        # app's SQL generation on every read, unless nobody else can write.
        private = self._private_database(url, owns_engine)
        self._local = self.cache if isinstance(self.cache, local_cache) and not private else None
        self._encodes_entries = isinstance(self.cache, redis_cache)
        self._track_skips(self.cache)
        self._guarded = bool(getattr(self.cache, "guards_generations", False))

    # -- stale windows across instances ------------------------------------------------------

    def _stamped_steps(self, update: Callable[[], Any]) -> Steps[Any]:
        """A cache update that follows a committed change, with stale-window tracking on:
        when the cache skipped it (Redis unreachable), the app is stamped in SQL so that every
        instance drops its window (see :mod:`memstore.core.staleness`). Never raises for the
        stamp."""
        with collecting_skips() as skipped:
            result = yield update
        if skipped:
            try:
                yield lambda: self._calls.stamp(skipped)
            except StorageError as error:
                self._stamp_failed(skipped, error)
        return result

    def _stale_poll_steps(self) -> Steps[None]:
        """When a poll is due (checked again under the store's poll lock), drop the windows
        of the apps stamped stale and clear the stamps of the windows dropped."""
        now = time.monotonic()
        if not self._stale_polls.due(now):
            return
        self._stale_polls.started(now)
        try:
            marks = yield self._calls.pending
        except StorageError as error:
            self._stale_poll_failed("reading", error)
            return
        if not marks:
            return
        with collecting_skips() as skipped:
            for mark in marks:
                yield partial(self.cache.invalidate, mark.app_id)
        try:
            yield lambda: self._calls.clear(marks_to_clear(marks, skipped))
        except StorageError as error:
            self._stale_poll_failed("clearing", error)

    # -- windows -----------------------------------------------------------------------------

    def _fetched(
        self, steps: WindowSteps, app_id: str, reads: list[Rows] | None = None
    ) -> Steps[Window]:
        """The loader's row requests of ``steps`` as I/O steps on ``self._sql``; ``reads``
        (when given) collects what each read returned."""
        try:
            request = next(steps)
            while True:
                rows = yield partial(self._sql.fetch, app_id, request)
                if reads is not None:
                    reads.append(rows)
                request = steps.send(rows)
        except StopIteration as done:
            window: Window = done.value
            return window

    def _window_steps(self, limit: int) -> WindowSteps:
        """The loader steps of a rebuilt window (``limit`` messages)."""
        return window_steps(
            limit,
            start_at_user=self.settings.window_start_at_user,
            count_tokens=self._count,
            summaries=self._summaries,
            lookahead=self._sql.lookahead,
        )

    def _load_window_steps(
        self,
        app_id: str | int,
        max_messages: int | None,
        max_tokens: int | None,
        start_at_user: bool | None,
        oversize: str,
        summaries: bool,
    ) -> Steps[list[Message]]:
        app = normalize_app_id(app_id)
        messages, tokens, policy = self._bounds(max_messages, max_tokens, oversize)
        first_user = self.settings.window_start_at_user if start_at_user is None else start_at_user
        steps = window_steps(
            messages,
            start_at_user=first_user,
            max_tokens=tokens,
            count_tokens=self._count,
            summaries=self._summaries if summaries else None,
            lookahead=self._sql.lookahead,
        )
        window = self._built((yield from self._fetched(steps, app)))
        return self._fitted(app, window, tokens, policy).messages

    def _cached_window_steps(self, app_id: str) -> Steps[list[Message]]:
        """The app's window as reads serve it before any token budget: the cached one (stale
        windows dropped first, an in-process one checked against the app's generation), or
        on a miss the window rebuilt from SQL (``reload_max`` messages) and cached."""
        yield self._drop_stale_windows
        generation = yield from self._generation_steps(app_id)
        cached = yield lambda: self.cache.read(app_id)
        served = self._served(cached, generation)
        if served is not None:
            return served
        limit = self.settings.reload_max
        messages, _ = yield from self._rebuild_steps(app_id, limit, cached.version, generation)
        return messages

    def _reload_steps(self, app_id: str | int, max_messages: int | None) -> Steps[ReloadReport]:
        app = normalize_app_id(app_id)
        limit = (
            self.settings.reload_max
            if max_messages is None
            else positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES)
        )
        yield lambda: self.cache.invalidate(app)
        version = (yield lambda: self.cache.read(app)).version
        generation = yield from self._generation_steps(app)
        _, report = yield from self._rebuild_steps(app, limit, version, generation)
        return report

    def _generation_steps(self, app_id: str) -> Steps[int | None]:
        """The app's SQL generation when the cache needs it (read before any window row)."""
        if self._local is None:
            return None
        generation: int = yield lambda: self._sql.generation(app_id)
        return generation

    def _rebuild_steps(
        self, app_id: str, limit: int, version: str, generation: int | None
    ) -> Steps[tuple[list[Message], ReloadReport]]:
        reads: list[Rows] = []
        window = self._built((yield from self._fetched(self._window_steps(limit), app_id, reads)))
        budgeted = self._rebuilt_part(window)
        kept = window.messages if budgeted is None else budgeted.messages
        entries = self._entries(kept, reads)
        synthetic = window.synthetic_call_ids
        if self._local is not None:
            local = self._local
            cached = yield lambda: local.store(app_id, entries, synthetic, version, generation)
        elif self._guarded:
            # read after the rows: every write they hold is at or below it, so its late
            # APPEND (continuing from a lower generation) drops the window, never repeats it
            reflected = (yield lambda: self._sql.generation(app_id)) if entries else None
            cached = yield lambda: self.cache.store(app_id, entries, synthetic, version, reflected)
        else:
            cached = yield lambda: self.cache.store(app_id, entries, synthetic, version)
        self._rebuilt(cached)
        return window.messages, reload_report(app_id, window, cached, budgeted)
