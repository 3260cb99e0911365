"""Prune under traffic: append latency of a live app while another app's history is pruned,
against the same appends with no prune running (same run, same database).

    python benchmarks/prune_traffic.py [--rows 20000] [--seconds 3] [--database-url URL]

A writer thread appends one message at a time to a live app and times each append. Phase
``baseline``: nothing else runs. Phase ``during prune``: the main thread prunes an app of
``--rows`` rows down to its newest 10 (batched deletes). The table shows the writer's append
latency per phase (p50, p99, max) and the prune's throughput; the ratio of the p99s is the
cost a prune puts on traffic. Default database: a fresh SQLite file (WAL); pass a PostgreSQL
or MariaDB URL to measure there (only the two unique app ids of this run are written and
purged afterwards).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage


def seed(store: MemoryStore, app_id: str, rows: int) -> None:
    batch: list[object] = []
    turn = 0
    while rows > 0:
        call = f"c{turn}"
        batch.extend(
            [
                UserMessage(text=f"question {turn}"),
                AiMessage(tool_requests=[ToolRequest(id=call, name="t", arguments="{}")]),
                ToolResult(id=call, tool_name="t", text="result " * 20),
                AiMessage(text=f"answer {turn}"),
            ]
        )
        rows -= 4
        turn += 1
        if len(batch) >= 400:
            store.append(app_id, batch)  # type: ignore[arg-type]
            batch = []
    if batch:
        store.append(app_id, batch)  # type: ignore[arg-type]


def timed_appends(store: MemoryStore, app_id: str, stop: threading.Event) -> list[float]:
    out: list[float] = []
    while not stop.is_set():
        started = time.perf_counter()
        store.append(app_id, [UserMessage(text="live message")])
        out.append(time.perf_counter() - started)
    return out


def percentile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite:///{Path(scratch) / 'prune.db'}"
        store = MemoryStore(Settings(database_url=url))
        store.migrate()
        big, live = f"bench-big-{uuid.uuid4().hex[:8]}", f"bench-live-{uuid.uuid4().hex[:8]}"
        try:
            seed(store, big, args.rows)
            store.append(live, [UserMessage(text="start")])

            stop = threading.Event()
            result: dict[str, list[float]] = {}
            writer = threading.Thread(
                target=lambda: result.setdefault("x", timed_appends(store, live, stop))
            )
            writer.start()
            time.sleep(args.seconds)
            stop.set()
            writer.join()
            baseline = result.pop("x")

            stop = threading.Event()
            writer = threading.Thread(
                target=lambda: result.setdefault("x", timed_appends(store, live, stop))
            )
            writer.start()
            started = time.perf_counter()
            [report] = store.prune(keep_last=10, app_ids=[big])
            prune_seconds = time.perf_counter() - started
            stop.set()
            writer.join()
            during = result.pop("x")
        finally:
            store.purge(big)
            store.purge(live)
            store.close()

    print(f"## Prune under traffic ({store.engine.dialect.name}, {args.rows} rows pruned)\n")
    print("| phase | appends | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for name, values in (("baseline", baseline), ("during prune", during)):
        print(
            f"| {name} | {len(values)} | {statistics.median(values) * 1000:.2f} | "
            f"{percentile(values, 99) * 1000:.2f} | {max(values) * 1000:.2f} |"
        )
    ratio = percentile(during, 99) / percentile(baseline, 99)
    print(
        f"\nprune: {report.original_rows} original + {report.display_rows} display rows in "
        f"{prune_seconds:.2f} s ({report.original_rows / prune_seconds:.0f} rows/s); "
        f"append p99 during prune / baseline: {ratio:.2f}x"
    )


if __name__ == "__main__":
    main()
