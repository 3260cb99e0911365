"""One service instance of the multi-instance cluster test: a store (no worker id: it leases
one) used by several threads that append to and read apps until told to stop."""

from __future__ import annotations

import logging
import threading
import time
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from memstore import MemoryStore, Settings, UserMessage


def window_mismatch(cached: list[str] | None, newest: list[str], reload_max: int) -> str | None:
    """What is wrong with a cached window (texts, oldest first) given SQL's ``newest`` texts
    (``load_window(app, window_size)``), or ``None``. A rebuild caches the newest
    ``reload_max`` messages and appends grow the window up to ``window_size``, so a correct
    window is the newest ``len(cached)`` messages of SQL, at least ``reload_max`` of them (or
    all when SQL holds fewer): a window of 53 after a rebuild and 3 appends is right, though
    ``newest`` holds 60. Only plain user messages here: no tool group widens a window."""
    if cached is None:
        return "no window cached"
    tail = newest[len(newest) - len(cached) :] if cached else []
    if len(cached) > len(newest) or cached != tail:
        held = set(cached)
        newer = [text for text in newest if text not in held][-10:]
        return (
            f"{len(cached)} cached vs SQL's newest {len(newest)}, not SQL's newest "
            f"{len(cached)}: missing {newer}"
        )
    if len(cached) < min(reload_max, len(newest)):
        return f"{len(cached)} cached, fewer than a rebuild's {min(reload_max, len(newest))}"
    return None


def run(
    database_url: str,
    redis_url: str,
    apps: list[str],
    instances: int,
    threads: int,
    index: int,
    ready: Barrier,
    stop: Event,
    quiet: Barrier,
    results: Any,
) -> None:
    """Thread ``t`` of instance ``index`` writes the apps ``apps[i]`` with
    ``i % (instances * threads) == index * threads + t`` (one writer per app, as a
    conversation has) and reads any app. When ``stop`` is set, put ``{"written": [(app, text,
    id)], "errors": [...], "reads": [(time, app, hit)], "final": {app: equal}}`` on
    ``results``."""
    name = f"p{index}"
    total = instances * threads
    settings = Settings(database_url=database_url, redis_url=redis_url, redis_timeout_seconds=0.25)
    written: list[tuple[str, str, int]] = []
    errors: list[str] = []
    reads: list[tuple[float, str, bool]] = []
    lock = threading.Lock()
    failed_apps: set[str] = set()

    class CacheErrors(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("memstore: Redis") and record.args:
                failed_apps.add(str(record.args[1]))  # type: ignore[index]

    logging.getLogger("memstore").addHandler(CacheErrors())
    with MemoryStore(settings) as store:

        def work(thread: int) -> None:
            me = index * threads + thread
            mine = [app for i, app in enumerate(apps) if i % total == me]
            step = 0
            while not stop.is_set():
                step += 1
                text = f"{name}-{thread}-{step}"
                read_id = apps[(me * 7 + step) % len(apps)]
                try:
                    row: tuple[str, str, int] | None = None
                    if mine:
                        app_id = mine[step % len(mine)]
                        [row_id] = store.append(app_id, [UserMessage(text=text)])
                        row = (app_id, text, row_id)
                    hit = store.cache.read(read_id).messages is not None
                    store.memory(read_id).messages()  # rebuilds on a miss
                except Exception as error:  # the test fails with it
                    with lock:
                        errors.append(f"{type(error).__name__}: {error}")
                    continue
                with lock:
                    if row is not None:
                        written.append(row)
                    reads.append((time.time(), read_id, hit))

        store.append(apps[index], [UserMessage(text=f"{name}-warm")])  # leases a worker id
        for app_id in apps:  # every window cached
            store.memory(app_id).messages()
        ready.wait(120)
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        quiet.wait(60)  # every instance has stopped writing
        # A window rebuilt while a writer's update of it was skipped (its route resting) can
        # miss that write until the next look for stale-window stamps, which every instance
        # takes at least every half of stale_window_max_seconds: wait for one to be due.
        time.sleep(settings.stale_window_max_seconds / 2 + 0.5)
        for app_id in apps:  # drop what this instance knows to be stale (dirty or stamped)
            store.memory(app_id).messages()
        quiet.wait(60)
        final: dict[str, bool] = {}
        for app_id in apps:  # the cached window of this instance is SQL's newest messages
            cached = None
            for _ in range(50):
                store.memory(app_id).messages()
                cached = store.cache.read(app_id).messages
                if cached is not None:
                    break
                time.sleep(0.1)
            newest = store.load_window(app_id, settings.window_size)
            problem = window_mismatch(
                None if cached is None else [str(m.text) for m in cached],
                [str(m.text) for m in newest],
                settings.reload_max,
            )
            final[app_id] = problem is None
            if problem is not None:
                dirty = store.cache.state.is_dirty(app_id)  # type: ignore[attr-defined]
                errors.append(f"stale window: {name} {app_id}: {problem}, dirty here {dirty}")
    results.put(
        {
            "written": written,
            "errors": errors,
            "reads": reads,
            "final": final,
            "failed_apps": sorted(failed_apps),
        }
    )
