"""What does checking an in-process window against the database cost?

The in-process cache (no Redis) cannot see other processes' writes, so every read first looks
up the app's generation in SQL (one primary-key lookup on ``chat_app_generation``) and every
write raises it. This times, on each database, in alternating rounds:

* the unchecked hit (the read path before the check: cache dict + ``answer_open_group``) —
  the baseline;
* the checked hit, ``store.memory(app).messages()``;
* a rebuild from SQL (``load_window``), what refusing to cache would cost every read;
* an append of one message (which raises the generation) and the raise alone in its own
  transaction;
* one metrics increment (``Metrics.incr``), which every read pays: it must stay a small share
  of the checked hit.

    python -m benchmarks.local_cache [--quick] [--databases sqlite,postgres]
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence

from benchmarks.common import (
    Check,
    Options,
    Report,
    Sample,
    checks_table,
    markdown_table,
    ratio,
    run_main,
    scratch_database,
    time_interleaved,
    us,
)
from benchmarks.dataset import TextSource, TurnMaker
from memstore import MemoryStore, Settings, UserMessage
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.core.window import answer_open_group
from memstore.metrics import Metrics
from memstore.sql import generation

WINDOW_SIZE = 60
REBUILD_SHARE_TARGET = 0.5
"""A checked hit must cost at most this share of a rebuild from SQL (else: do not cache)."""
METRICS_SHARE_TARGET = 0.1
"""One counter increment must cost at most this share of a checked hit."""


def measure(
    url: str, seed: int, rounds: int, warmup: int
) -> tuple[Sample, Sample, Sample, Sample, Sample, Sample]:
    """Time the six calls (see the module docstring) on one migrated database."""
    settings = Settings(database_url=url, window_size=WINDOW_SIZE, reload_max=WINDOW_SIZE)
    with MemoryStore(settings) as store:
        cache = store.cache
        assert isinstance(cache, InProcessWindowCache)
        app_id = f"bench-local-{uuid.uuid4().hex[:10]}"
        rng = random.Random(seed)
        maker = TurnMaker(TextSource(seed))
        while len(store.memory(app_id).messages()) < WINDOW_SIZE - 10:
            store.append(app_id, maker.turn(rng))
        writes = f"bench-local-w-{uuid.uuid4().hex[:10]}"

        metrics = Metrics()

        def bump() -> None:
            with store.engine.begin() as conn:
                generation.bump(conn, writes)

        calls: list[Callable[[], object]] = [
            lambda: answer_open_group(cache.read(app_id).messages or []),
            lambda: store.memory(app_id).messages(),
            lambda: store.load_window(app_id, WINDOW_SIZE),
            lambda: store.append(writes, [UserMessage(text="hello")]),
            bump,
            lambda: metrics.incr("cache_hits"),
        ]
        a, b, c, d, e, f = time_interleaved(calls, warmup=warmup, rounds=rounds)
        return a, b, c, d, e, f


def run(options: Options, log: Callable[[str], None] = print) -> Report:
    rounds, warmup = (300, 30) if options.quick else (1_500, 100)
    report = Report("local_cache: in-process window checked against SQL")
    rows: list[list[str]] = []
    for database in options.databases:
        log(f"local_cache: {database}, {rounds:,} alternating rounds ...")
        with scratch_database(database, options, "local") as url:
            unchecked, checked, rebuild, append, raise_only, count = measure(
                url, options.seed, rounds, warmup
            )
        base = unchecked.median
        share = checked.median / rebuild.median
        report.checks.append(
            Check(
                database,
                "checked hit / rebuild from SQL",
                f"<= {REBUILD_SHARE_TARGET:.1f}",
                f"{share:.2f}",
                share <= REBUILD_SHARE_TARGET,
            )
        )
        count_share = count.median / checked.median
        report.checks.append(
            Check(
                database,
                "metrics increment / checked hit",
                f"<= {METRICS_SHARE_TARGET:.1f}",
                f"{count_share:.3f}",
                count_share <= METRICS_SHARE_TARGET,
            )
        )
        for text, sample in (
            ("unchecked hit (before; baseline)", unchecked),
            ("checked hit `memory(app).messages()`", checked),
            ("rebuild from SQL `load_window(app, 60)`", rebuild),
            ("append 1 message (raises the generation)", append),
            ("generation raise alone (own transaction)", raise_only),
            ("one metrics increment `Metrics.incr`", count),
        ):
            rows.append(
                [database, text, us(sample.median), us(sample.p95), ratio(sample.median / base)]
            )
    report.blocks.append(
        f"Window of about {WINDOW_SIZE} messages; times in µs per call, alternating rounds."
    )
    report.blocks.append(
        markdown_table(["database", "call", "median µs", "p95 µs", "vs unchecked"], rows)
    )
    if report.checks:
        report.blocks.append(checks_table(report.checks))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
