"""The store's window reads, decided once for :class:`~memstore.MemoryStore` and
:class:`~memstore.aio.AsyncMemoryStore`: loading a window from SQL, serving the cached one,
rebuilding and reloading it. Generators of I/O steps, as :mod:`memstore.store_writes`
explains; the stores drive them."""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id
from memstore.core.loader import Rows, WindowSteps, window_steps
from memstore.core.plans import positive, reload_report
from memstore.core.window import Window
from memstore.messages import Message
from memstore.reports import ReloadReport
from memstore.store_base import StoreBase

T = TypeVar("T")

IO = Callable[[], Any]
"""One step: an I/O call on the store's backends (its result, or an awaitable of it)."""

Steps = Generator[IO, Any, T]
"""An operation's decisions: yields steps, gets their results, returns the result."""


class StoreReads(StoreBase):
    """The read generators both stores drive."""

    if TYPE_CHECKING:  # what the stores provide (their own types; sync or async)
        _sql: Any
        _local: Any
        cache: Any

        def _drop_stale_windows(self) -> Any: ...

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
