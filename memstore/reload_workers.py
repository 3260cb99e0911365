"""``memstore reload --workers N``: window rebuilds spread over worker processes.

A rebuild is mostly Python work (decoding rows, the edge check, encoding entries), so one
process is bound by one core however fast the database and Redis answer. Worker processes
(started with ``spawn``: nothing of the parent's engines, pools or threads is inherited) each
open their own store from the same settings and reload the chunks of app ids the parent hands
them, with the same batched round trips as :func:`memstore.operations.reload_apps`. Every app
id goes to exactly one worker; the windows each worker stores are checked against the Redis
version counter as in a single process, so a rebuild racing a write is refused either way.

The parent keeps a bounded number of chunks in flight (memory stays flat however many apps
there are) and yields the reports in the order of the app ids it was given.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sized
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice

from memstore.cache.memory_cache import NoWindowCache
from memstore.config import Settings
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id
from memstore.core.plans import positive
from memstore.errors import ConfigurationError, MemstoreError
from memstore.operations import bulk_collection, reload_apps
from memstore.reports import ReloadReport
from memstore.sql.engine import is_memory_sqlite
from memstore.store import RELOAD_BATCH, MemoryStore

CHUNK_APPS = 5 * RELOAD_BATCH
"""App ids per task handed to a worker process: several batches, because a worker overlaps
each batch's reads with the previous batch's windows only within a task (measured: chunks of
two or three batches ran at 65-80% of the rate of five). A sized collection of app ids is
split into smaller chunks when it has too few apps to give every worker one."""

MAX_WORKERS = 64

_settings: Settings | None = None
_store: MemoryStore | None = None
"""In a worker process: its settings and its own store (opened by the first chunk)."""


def reload_in_workers(
    settings: Settings,
    app_ids: Iterable[str | int],
    max_messages: int | None = None,
    *,
    workers: int,
    chunk_apps: int = CHUNK_APPS,
) -> Iterator[ReloadReport]:
    """Reload the windows of ``app_ids`` in ``workers`` processes, each with its own store
    opened from ``settings`` (without ``redis_url``: windows are rebuilt and checked, stored
    nowhere, as ``memstore reload`` does without Redis). Reports come in the order of
    ``app_ids``. Ids are normalized as they are handed out (an int becomes its decimal
    string); a bad one raises :class:`InvalidAppIdError` when the hand-out reaches it, and no
    app after it is reloaded.

    Raises, before any process starts, :class:`ConfigurationError` for ``workers`` outside
    1-64, a ``chunk_apps`` below 1 or an in-memory SQLite database (each process would open
    an empty one of its own), and :class:`InvalidInputError` for a bad ``max_messages``.
    An error a worker raises is raised here (memstore's errors keep their type and fields);
    a worker process that dies raises :class:`MemstoreError`. Windows already stored stay
    stored; the windows of the apps not reported are kept or dropped (then rebuilt on their
    next read).

    A worker ends itself within about a second once this process is gone (killed, crashed),
    so none is left holding connections and pipes.

    The workers are started with ``spawn``, which imports the calling program's main module
    again in each of them: in a script, call this under ``if __name__ == "__main__":``.
    """
    if not 1 <= workers <= MAX_WORKERS:
        raise ConfigurationError(f"workers must be between 1 and {MAX_WORKERS}")
    if chunk_apps < 1:
        raise ConfigurationError("chunk_apps must be 1 or more")
    if max_messages is not None:
        max_messages = positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES)
    if is_memory_sqlite(settings.database_url):
        raise ConfigurationError(
            "an in-memory SQLite database cannot be shared with worker processes"
        )
    if isinstance(app_ids, Sized):
        chunk_apps = max(1, min(chunk_apps, -(-len(app_ids) // workers)))
    apps = (normalize_app_id(app_id) for app_id in app_ids)
    return _reports(settings, apps, max_messages, workers, chunk_apps)


def _reports(
    settings: Settings,
    apps: Iterator[str],
    max_messages: int | None,
    workers: int,
    chunk_apps: int,
) -> Iterator[ReloadReport]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(settings, os.getpid())
    ) as pool:
        pending: deque[Future[list[ReloadReport]]] = deque()
        try:
            while True:
                while len(pending) < 2 * workers:
                    chunk = list(islice(apps, chunk_apps))
                    if not chunk:
                        break
                    pending.append(pool.submit(_reload_chunk, chunk, max_messages))
                if not pending:
                    return
                yield from pending.popleft().result()
        except BrokenProcessPool as error:
            raise MemstoreError(
                "a reload worker process ended unexpectedly; the apps not yet reported may "
                "not have been reloaded"
            ) from error
        finally:
            for future in pending:
                future.cancel()


PARENT_POLL_SECONDS = 0.5
"""How often a worker checks that the process that started it is still there."""


def _start_worker(settings: Settings, parent: int) -> None:
    """In each worker process: Ctrl-C is the parent's to handle (it stops handing out chunks
    and lets the running ones finish) and the collector is set for a bulk run. The store is
    opened by the first chunk, so an error opening it reaches the parent with its type. A
    watchdog ends the worker when its parent is gone (SIGKILL, a crash), so no worker is left
    holding connections and pipes after it."""
    global _settings
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bulk_collection().__enter__()  # for the process's whole life: it does nothing else
    _settings = settings
    # ``parent`` comes from the parent itself: it may have ended before this ran
    threading.Thread(
        target=_exit_with_parent, args=(parent,), name="memstore-parent-watch", daemon=True
    ).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:  # reparented once the parent process ended
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def _worker_store() -> MemoryStore:
    global _store
    if _store is None:
        assert _settings is not None, "the worker was not started by reload_in_workers"
        if _settings.redis_url:
            _store = MemoryStore(_settings)
        else:
            _store = MemoryStore(_settings, cache=NoWindowCache())
        multiprocessing.util.Finalize(None, _store.close, exitpriority=10)
    return _store


def _reload_chunk(app_ids: list[str], max_messages: int | None) -> list[ReloadReport]:
    return list(reload_apps(_worker_store(), app_ids, max_messages))
