"""What does bounded staleness across instances cost, and how stale does a window get?

Two stores on one database and one real Redis, one with ``stale_window_max_seconds`` at its
default (5) and one with it off (0), timed call for call in alternating order:

* a hot window read (``memory(app).messages()``): the mean includes the polls for stamps the
  store makes every 2.5 s (one indexed query that finds nothing);
* a healthy append (its Redis update succeeds: the only extra work is collecting skips);
* the poll itself (forced due) and the stamp a writer adds after a skipped Redis update.

Then the observed staleness at the default bound: a writer whose Redis URL points at a closed
port (every update fails at once) appends while a reader that reaches Redis keeps reading;
the time from the append's start to the first read that serves it, over several trials.

    python -m benchmarks.staleness [--quick] [--database-url URL] [--redis-url URL]

The database defaults to a temporary SQLite file; Redis to 127.0.0.1:6379 db 14 (only keys of
this run's app ids are written, and deleted afterwards; nothing is flushed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import redis

from benchmarks.common import free_port, markdown_table, time_interleaved, us
from memstore import MemoryStore, Settings, UserMessage
from memstore.cache import keys
from memstore.sql import staleness as sql_staleness
from memstore.sql.schema import app_generation


def _settings(database_url: str, redis_url: str, bound: float, worker: int) -> Settings:
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        stale_window_max_seconds=bound,
        redis_timeout_seconds=0.3,
        worker_id=worker,
    )


def run(database_url: str, redis_url: str, quick: bool) -> str:
    rounds = 300 if quick else 3000
    trials = 3 if quick else 12
    apps: list[str] = []

    def new_app() -> str:
        apps.append(f"bench-stale-{uuid.uuid4().hex[:12]}")
        return apps[-1]

    on = MemoryStore(_settings(database_url, redis_url, 5, 901))
    off = MemoryStore(_settings(database_url, redis_url, 0, 902))
    on.migrate()
    blocks: list[str] = []
    try:
        app = new_app()
        on.append(app, [UserMessage(text=f"message {i}") for i in range(60)])
        read_on, read_off = time_interleaved(
            [lambda: on.memory(app).messages(), lambda: off.memory(app).messages()],
            warmup=50,
            rounds=rounds,
        )
        app_on, app_off, app_marked = new_app(), new_app(), new_app()

        def marked_append() -> None:
            """The alternative design's healthy write: the append, then one more transaction
            clearing a marker (its in-transaction marker statement is not even counted)."""
            off.append(app_marked, [UserMessage(text="hi")])
            with off.engine.begin() as conn:
                conn.execute(
                    app_generation.update()
                    .where(app_generation.c.app_id == app_marked)
                    .values(stale_at_ms=None)
                )

        write_on, write_off, write_marked = time_interleaved(
            [
                lambda: on.append(app_on, [UserMessage(text="hi")]),
                lambda: off.append(app_off, [UserMessage(text="hi")]),
                marked_append,
            ],
            warmup=10,
            rounds=max(50, rounds // 10),
        )

        def poll() -> None:
            on._stale_polls._next = float("-inf")  # due now
            on._drop_stale_windows()

        (poll_sample,) = time_interleaved([poll], warmup=5, rounds=max(50, rounds // 10))
        stamp_app = new_app()
        (stamp_sample,) = time_interleaved(
            [lambda: sql_staleness.stamp(on.engine, [stamp_app])],
            warmup=5,
            rounds=max(50, rounds // 10),
        )
        with on.engine.begin() as conn:  # leave no stamp for the staleness trials
            conn.execute(app_generation.update().values(stale_at_ms=None))

        def mean(sample: object) -> float:
            return statistics.fmean(sample.seconds)  # type: ignore[attr-defined]

        rows = [
            [
                "hot read (60 messages)",
                us(read_off.median),
                us(read_on.median),
                us(mean(read_off)),
                us(mean(read_on)),
                f"{mean(read_on) / mean(read_off):.2f}",
            ],
            [
                "healthy append (1 message)",
                us(write_off.median),
                us(write_on.median),
                us(mean(write_off)),
                us(mean(write_on)),
                f"{mean(write_on) / mean(write_off):.2f}",
            ],
        ]
        blocks.append(
            markdown_table(
                ["call", "median off", "median on", "mean off", "mean on", "ratio of means"],
                rows,
                "lrrrrr",
            )
        )
        blocks.append(
            "alternative (marker cleared after every Redis update): append + clear "
            f"transaction mean {us(mean(write_marked))} µs, "
            f"{mean(write_marked) / mean(write_off):.2f}x the plain append"
        )
        blocks.append(
            markdown_table(
                ["extra statement", "median", "p95", "when"],
                [
                    [
                        "poll for stamps (none set)",
                        us(poll_sample.median),
                        us(poll_sample.p95),
                        "once per 2.5 s per instance, before a read",
                    ],
                    [
                        "stamp one app",
                        us(stamp_sample.median),
                        us(stamp_sample.p95),
                        "after a skipped Redis update only",
                    ],
                ],
                "lrrl",
            )
        )
        blocks.append(_observed(database_url, redis_url, trials, new_app))
    finally:
        client = redis.Redis.from_url(redis_url)
        for app in apps:
            client.delete(*keys.app_keys(app))
        client.close()
        on.close()
        off.close()
    return "\n\n".join(blocks)


def free_port_url() -> str:
    """A Redis URL on a loopback port nothing listens on."""
    return f"redis://127.0.0.1:{free_port()}/0"


def _observed(database_url: str, redis_url: str, trials: int, new_app: object) -> str:
    cut_url = free_port_url()  # nothing listens there: every Redis call fails
    writer = MemoryStore(_settings(database_url, cut_url, 5, 903))
    reader = MemoryStore(_settings(database_url, redis_url, 5, 904))
    seen: list[float] = []
    try:
        for trial in range(trials):
            app = new_app()  # type: ignore[operator]
            writer.append(app, [UserMessage(text="m0")])
            reader.memory(app).messages()  # cached in Redis
            time.sleep((trial * 0.37) % 2.5)  # a different phase of the reader's polls
            started = time.perf_counter()
            writer.append(app, [UserMessage(text="m1")])
            while len(reader.memory(app).messages()) < 2:
                time.sleep(0.005)
            seen.append(time.perf_counter() - started)
    finally:
        writer.close()
        reader.close()
    return markdown_table(
        ["bound", "trials", "median staleness", "max staleness"],
        [["5 s (default)", str(trials), f"{statistics.median(seen):.2f} s", f"{max(seen):.2f} s"]],
        "lrrr",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--database-url")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        url = args.database_url or f"sqlite:///{Path(scratch) / 'memstore.db'}"
        print(run(url, args.redis_url, args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
