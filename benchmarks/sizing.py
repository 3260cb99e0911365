"""What does a window read cost as the tables grow, and what drives it?

On PostgreSQL, the original-history table is filled with apps of 100 messages each (copies of
one generated conversation with tool groups, each app with its own ids), first to about 1M
rows, then to about 10M. At each size ``load_window(app, 50)`` is timed, round-robin, for
three traffic patterns: the same 10 apps again and again, 1,000 apps in turn, and every app
of the table in turn (a random order). The table and index sizes are reported beside them.

The claim this checks: a window read is an index range scan of the app's newest rows, so its
cost follows how many apps are active (whether their index and heap pages are in memory),
not how many rows the tables hold.

    python -m benchmarks.sizing [--quick]

Full: 1M then 10M rows (about 6 GB in a scratch schema, several minutes to load);
``--quick``: 100k then 1M.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import cycle

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks.common import (
    Check,
    Options,
    Report,
    checks_table,
    markdown_table,
    ms,
    ratio,
    run_main,
    scratch_database,
    time_interleaved,
)
from benchmarks.dataset import AppPlan, bulk_load
from memstore import MemoryStore, Settings
from memstore.sql.schema import ORIGINAL_TABLE

WINDOW = 50
APP_MESSAGES = 100
ID_STRIDE = 1_000
"""Ids of copy ``k`` are ``k * ID_STRIDE + position``: unique, ordered within each app."""
HOT_APPS = 10
WARM_APPS = 1_000
FLAT_TARGET = 1.5
"""t(largest table) / t(smallest table) for the same active set must be at most this."""


@dataclass(frozen=True)
class Plan:
    apps_per_stage: tuple[int, ...]
    rounds: int


FULL = Plan(apps_per_stage=(10_000, 100_000), rounds=600)
QUICK = Plan(apps_per_stage=(1_000, 10_000), rounds=200)


def _copy_template(engine: Engine, template_app: str, first: int, last: int) -> None:
    """Apps ``a<first>`` .. ``a<last>``: copies of the template app's rows, fresh ids."""
    table = ORIGINAL_TABLE
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"""
                INSERT INTO {table} (id, app_id, user_id, message_type, tool_call_id, payload,
                                     created_at, updated_at, is_deleted)
                SELECT k * {ID_STRIDE} + t.pos, 'a' || k, t.user_id, t.message_type,
                       t.tool_call_id, t.payload, t.created_at, t.updated_at, t.is_deleted
                FROM (SELECT *, row_number() OVER (ORDER BY id) - 1 AS pos
                      FROM {table} WHERE app_id = :template) t
                CROSS JOIN generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS k
                ORDER BY k, t.pos
                """
            ),
            {"template": template_app, "first": first, "last": last},
        )


def _sizes(engine: Engine) -> tuple[int, str, str]:
    """Rows, table size and index size (pretty-printed by PostgreSQL)."""
    table = ORIGINAL_TABLE
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
        heap, indexes = conn.execute(
            sa.text(
                f"SELECT pg_size_pretty(pg_table_size('{table}')), "
                f"pg_size_pretty(pg_indexes_size('{table}'))"
            )
        ).one()
    return int(rows), str(heap), str(indexes)


def _reader(store: MemoryStore, apps: Sequence[str]) -> Callable[[], object]:
    order = cycle(apps)

    def read() -> object:
        return store.load_window(next(order), WINDOW)

    return read


def run(options: Options, log: Callable[[str], None] = print) -> Report:
    plan = QUICK if options.quick else FULL
    report = Report("sizing: window reads at growing table sizes (PostgreSQL)")
    if "postgres" not in options.databases:
        report.blocks.append("Skipped: PostgreSQL is not among --databases.")
        return report
    rng = random.Random(options.seed)
    rows_out: list[list[str]] = []
    medians: dict[tuple[int, str], float] = {}
    with ExitStack() as stack:
        url = stack.enter_context(scratch_database("postgres", options, "size"))
        store = stack.enter_context(MemoryStore(Settings(database_url=url, worker_id=1)))
        template = f"template-{uuid.uuid4().hex[:6]}"
        seed_app = AppPlan(template, APP_MESSAGES, f"{options.seed}")
        bulk_load([store.engine], [seed_app], options.seed)
        with store.engine.begin() as conn:  # faster loading; reads are unaffected
            conn.execute(sa.text(f"ALTER TABLE {ORIGINAL_TABLE} SET UNLOGGED"))
        loaded = 0
        for apps in plan.apps_per_stage:
            started = time.perf_counter()
            log(f"sizing: copying apps {loaded + 1:,}..{apps:,} ...")
            for first in range(loaded + 1, apps + 1, 10_000):
                _copy_template(store.engine, template, first, min(apps, first + 9_999))
            loaded = apps
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text(f"VACUUM ANALYZE {ORIGINAL_TABLE}"))
            rows, heap, indexes = _sizes(store.engine)
            log(f"sizing: {rows:,} rows loaded in {time.perf_counter() - started:.0f} s")
            everyone = [f"a{k}" for k in range(1, apps + 1)]
            rng.shuffle(everyone)
            patterns = {
                f"{HOT_APPS} apps": everyone[:HOT_APPS],
                f"{WARM_APPS:,} apps": everyone[:WARM_APPS],
                f"all {apps:,} apps": everyone,
            }
            samples = time_interleaved(
                [_reader(store, group) for group in patterns.values()],
                warmup=HOT_APPS,
                rounds=plan.rounds,
            )
            for (label, group), sample in zip(patterns.items(), samples, strict=True):
                if group is not everyone:  # every app: a larger active set at each size
                    medians[(rows, label)] = sample.median
                rows_out.append(
                    [f"{rows:,}", heap, indexes, label, ms(sample.median), ms(sample.p95)]
                )
    report.blocks.append(
        markdown_table(["rows", "table", "indexes", "active apps", "median ms", "p95 ms"], rows_out)
    )
    sizes = sorted({rows for rows, _ in medians})
    small, large = sizes[0], sizes[-1]
    for key in (f"{HOT_APPS} apps", f"{WARM_APPS:,} apps"):
        growth = medians[(large, key)] / medians[(small, key)]
        report.checks.append(
            Check(
                f"load_window, {key} active",
                f"t({large:,} rows) / t({small:,} rows)",
                f"<= {FLAT_TARGET}x",
                ratio(growth),
                growth <= FLAT_TARGET,
            )
        )
    report.blocks.append(checks_table(report.checks))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, argv, (__doc__ or "").splitlines()[0])


if __name__ == "__main__":
    raise SystemExit(main())
