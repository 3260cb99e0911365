"""``MemoryStore``'s batch reload (``memstore reload``): with a Redis cache, the windows of a
batch of apps rebuilt with their round trips shared. Synchronous only (the command's path);
the one-app reload is :meth:`~memstore.store_reads.StoreReads._reload_steps`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memstore.cache.redis_window import RedisWindowCache
from memstore.core.loader import RowRequest, Rows, run_steps
from memstore.core.plans import reload_report
from memstore.core.rows import FetchedRows
from memstore.core.window import Window
from memstore.reports import ReloadReport
from memstore.sql import reload as sql_reload
from memstore.store_lifecycle import StoreLifecycle

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from memstore.cache.base import WindowCache
    from memstore.sql.repository import SqlHistory

RELOAD_BATCH = 100
"""Apps per batch of ``memstore reload`` (see :meth:`BatchReloads._reload_batch`)."""


@dataclass(slots=True)
class _ReloadReads:
    """What the first half of a batch reload read (see :meth:`BatchReloads._reload_reads`)."""

    app_ids: list[str]
    size: int
    versions: dict[str, str] = field(default_factory=dict)
    first: RowRequest | None = None
    prefetched: dict[str, FetchedRows] = field(default_factory=dict)
    done: list[ReloadReport] | None = None
    """The reports, when the cache reloads one app at a time (nothing left to do)."""


class BatchReloads(StoreLifecycle):
    """The batch reload of the synchronous store."""

    if TYPE_CHECKING:  # what MemoryStore provides
        engine: Engine
        cache: WindowCache
        _sql: SqlHistory

        def reload(self, app_id: str | int, max_messages: int | None = None) -> ReloadReport:
            """Rebuild one app's window."""

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
