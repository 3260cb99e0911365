"""One service instance of the multi-instance cluster test: a store (no worker id: it leases
one) used by several threads that append to and read their apps until told to stop."""

from __future__ import annotations

import threading
import time
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from memstore import MemoryStore, Settings, UserMessage


def run(
    database_url: str,
    redis_url: str,
    apps: list[str],
    threads: int,
    name: str,
    ready: Barrier,
    stop: Event,
    quiet: Barrier,
    results: Any,
) -> None:
    """Put ``{"written": [(app, text, id)], "errors": [...], "reads": [(t, app, hit)],
    "final": {app: bool}}`` on ``results`` when ``stop`` is set."""
    settings = Settings(database_url=database_url, redis_url=redis_url, redis_timeout_seconds=0.25)
    written: list[tuple[str, str, int]] = []
    errors: list[str] = []
    reads: list[tuple[float, str, bool]] = []
    lock = threading.Lock()
    with MemoryStore(settings) as store:

        def work(thread: int) -> None:
            step = 0
            while not stop.is_set():
                step += 1
                app_id = apps[(thread + step) % len(apps)]
                text = f"{name}-{thread}-{step}"
                try:
                    [row_id] = store.append(app_id, [UserMessage(text=text)])
                    hit = store.cache.read(app_id).messages is not None
                    store.memory(app_id).messages()  # rebuilds on a miss
                except Exception as error:  # the test fails with it
                    with lock:
                        errors.append(f"{type(error).__name__}: {error}")
                    continue
                with lock:
                    written.append((app_id, text, row_id))
                    reads.append((time.time(), app_id, hit))

        for app_id in apps:  # warm up: a lease, every window cached
            store.append(app_id, [UserMessage(text=f"{name}-warm")])
            store.memory(app_id).messages()
        ready.wait(120)
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        quiet.wait(60)  # every instance has stopped writing
        final: dict[str, bool] = {}
        for app_id in apps:  # the cached window of this instance equals a rebuild from SQL
            for _ in range(50):
                store.memory(app_id).messages()
                cached = store.cache.read(app_id).messages
                if cached is not None:
                    break
                time.sleep(0.1)
            final[app_id] = cached == store.load_window(app_id, settings.window_size)
    results.put({"written": written, "errors": errors, "reads": reads, "final": final})
