"""Does ``store.load_window(app, 50)`` stay flat as an app's history grows?

It also times the token-bounded read, ``load_window(app, max_tokens=TOKEN_BUDGET)``, at the
same sizes (flatness: t(largest) / t(smallest) <= 1.5x); with summaries on (the default) each
read starts with the app's newest-summary lookup, one index probe.

For target apps whose history holds 100, 10,000 and 100,000 messages (each sharing the tables
with three other apps of the same size, all turns interleaved by id), it times
``load_window(app, 50)`` against the naive rebuild many apps do: select every row of the app
ordered by id, decode every payload, keep the last 50. All target apps end with the same
turns, so their windows hold identical messages and only the history depth differs.

    python -m benchmarks.load_window [--quick] [--databases sqlite,postgres]
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks.common import (
    Check,
    Options,
    Report,
    Sample,
    analyze,
    checks_table,
    markdown_table,
    ms,
    ratio,
    run_main,
    scratch_database,
    time_calls,
    time_interleaved,
)
from benchmarks.dataset import AppPlan, TextSource, TurnMaker, bulk_load, fixed_tail
from memstore import MemoryStore, Settings
from memstore.core.loader import RowRequest
from memstore.core.rows import decode_payload
from memstore.messages import Message
from memstore.sql.queries import newest_rows_query
from memstore.sql.schema import original

WINDOW = 50
TOKEN_BUDGET = 4000
"""The token-bounded read's budget (default counter): about as many messages as ``WINDOW``."""
OTHER_APPS = 3
FLATNESS_TARGET = 1.5
"""latency at the largest history / latency at the smallest must be at most this."""
SPEEDUP_TARGET = 50.0
"""naive full load / windowed load at the largest history must be at least this."""


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    windowed_rounds: int
    naive_min_runs: int
    naive_budget_seconds: float


FULL = Plan(
    sizes=(100, 10_000, 100_000), windowed_rounds=1000, naive_min_runs=10, naive_budget_seconds=8.0
)
QUICK = Plan(
    sizes=(100, 1_000, 10_000), windowed_rounds=150, naive_min_runs=5, naive_budget_seconds=1.5
)


def naive_window(engine: Engine, app_id: str, keep: int) -> list[Message]:
    """The baseline: load and decode the app's whole history, keep the newest ``keep``."""
    query = (
        sa.select(original.c.id, original.c.payload)
        .where(original.c.app_id == app_id, original.c.is_deleted == sa.false())
        .order_by(original.c.id)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    messages = [decode_payload(row.payload, row.id) for row in rows]
    return messages[-keep:]


def query_plan(engine: Engine, app_id: str) -> str:
    """The database's plan for the loader's first query, on one line (app id as ``:app``)."""
    query = newest_rows_query(app_id, RowRequest(WINDOW + 32))
    statement = str(query.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    prefix = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(prefix + statement).all()
    parts = [" ".join(str(row[-1]).replace("->", "").split()) for row in rows]
    text = "; ".join(part.split(" (cost")[0] for part in parts if part)
    return text.replace(f"'{app_id}'", ":app")


def count_queries(store: MemoryStore, app_id: str) -> int:
    """How many SQL statements one ``load_window`` call sends."""
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(str(args[2]))

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        store.load_window(app_id, WINDOW)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)
    return len(statements)


def make_plans(sizes: Sequence[int], seed: int, run_id: str) -> dict[int, list[AppPlan]]:
    maker = TurnMaker(TextSource(seed))
    tail = fixed_tail(maker, seed, min(sizes))
    plans: dict[int, list[AppPlan]] = {}
    for size in sizes:
        target = AppPlan(
            f"bench-{run_id}-h{size}-target",
            size,
            f"{seed}-{size}-target",
            tail,
            user_id="u-target",
        )
        others = [
            AppPlan(
                f"bench-{run_id}-h{size}-other{i}",
                size,
                f"{seed}-{size}-other{i}",
                user_id=f"u-{i}",
            )
            for i in range(1, OTHER_APPS + 1)
        ]
        plans[size] = [target, *others]
    return plans


def run(options: Options, log: Callable[[str], None] = print) -> Report:
    plan = QUICK if options.quick else FULL
    sizes = plan.sizes
    run_id = uuid.uuid4().hex[:8]
    plans = make_plans(sizes, options.seed, run_id)
    all_plans = [app for size in sizes for app in plans[size]]
    largest, smallest = max(sizes), min(sizes)
    report = Report("load_window: windowed SQL read vs naive full-history load")

    with ExitStack() as stack:
        urls = {
            name: stack.enter_context(scratch_database(name, options, "lw"))
            for name in options.databases
        }
        stores = {
            name: stack.enter_context(MemoryStore(Settings(database_url=url)))
            for name, url in urls.items()
        }
        engines = [store.engine for store in stores.values()]
        log(
            f"load_window: bulk-loading {sum(a.size for a in all_plans):,} rows into "
            f"{', '.join(stores)} ..."
        )
        loaded = bulk_load(engines, all_plans, options.seed)
        for engine in engines:
            analyze(engine)

        summary_rows: list[list[str]] = []
        notes: list[str] = []
        for name, store in stores.items():
            targets = {size: plans[size][0].app_id for size in sizes}
            windows = {size: store.load_window(targets[size], WINDOW) for size in sizes}
            identical = all(windows[size] == windows[smallest] for size in sizes)
            naive_tail = naive_window(store.engine, targets[largest], WINDOW)
            log(f"load_window[{name}]: timing windowed reads ({plan.windowed_rounds} rounds) ...")
            windowed = dict(
                zip(
                    sizes,
                    time_interleaved(
                        [_bind_window(store, targets[size]) for size in sizes],
                        warmup=30,
                        rounds=plan.windowed_rounds,
                    ),
                    strict=True,
                )
            )
            log(f"load_window[{name}]: timing token-bounded reads ...")
            by_tokens = dict(
                zip(
                    sizes,
                    time_interleaved(
                        [_bind_tokens(store, targets[size]) for size in sizes],
                        warmup=30,
                        rounds=plan.windowed_rounds,
                    ),
                    strict=True,
                )
            )
            naive: dict[int, Sample] = {}
            for size in sizes:
                log(f"load_window[{name}]: timing naive full load @ {_label(size)} ...")
                naive[size] = time_calls(
                    _bind_naive(store.engine, targets[size]),
                    warmup=1 if size == largest else 3,
                    min_runs=plan.naive_min_runs,
                    max_runs=300,
                    budget_seconds=plan.naive_budget_seconds,
                )
            for size in sizes:
                w, n = windowed[size], naive[size]
                summary_rows.append(
                    [
                        name,
                        _label(loaded.per_app[targets[size]]),
                        ms(w.median),
                        ms(w.p95),
                        str(w.runs),
                        ms(n.median),
                        ms(n.p95),
                        str(n.runs),
                        ratio(n.median / w.median),
                    ]
                )
            token_flat = by_tokens[largest].median / by_tokens[smallest].median
            token_messages = len(store.load_window(targets[largest], max_tokens=TOKEN_BUDGET))
            notes.append(
                f"* {name}: `load_window(max_tokens={TOKEN_BUDGET})` ({token_messages} messages) "
                + ", ".join(
                    f"@{_label(size)} median {ms(by_tokens[size].median)} ms" for size in sizes
                )
            )
            report.checks.append(
                Check(
                    name,
                    f"tokens@{_label(largest)} / tokens@{_label(smallest)}",
                    f"<= {FLATNESS_TARGET}x",
                    ratio(token_flat),
                    token_flat <= FLATNESS_TARGET,
                )
            )
            flat = windowed[largest].median / windowed[smallest].median
            speedup = naive[largest].median / windowed[largest].median
            report.checks.append(
                Check(
                    name,
                    f"windowed@{_label(largest)} / windowed@{_label(smallest)}",
                    f"<= {FLATNESS_TARGET}x",
                    ratio(flat),
                    flat <= FLATNESS_TARGET,
                )
            )
            report.checks.append(
                Check(
                    name,
                    f"naive@{_label(largest)} / windowed@{_label(largest)}",
                    f">= {SPEEDUP_TARGET:.0f}x",
                    ratio(speedup),
                    speedup >= SPEEDUP_TARGET,
                )
            )
            queries = {size: count_queries(store, targets[size]) for size in sizes}
            plans_text = "; ".join(
                f"@{_label(size)}: `{query_plan(store.engine, targets[size])}`" for size in sizes
            )
            notes.append(
                f"* {name}: `load_window` returns {len(windows[largest])} messages at every "
                f"history size (the same messages: {'yes' if identical else 'NO'}) with "
                f"{'/'.join(str(queries[size]) for size in sizes)} SQL queries per call; the "
                f"naive baseline's last {WINDOW} are the same messages: "
                f"{'yes' if naive_tail == windows[largest] else 'no (edge check widened)'}. "
                f"Plan of the window query {plans_text}"
            )

    mix = ", ".join(
        f"{count / loaded.rows:.0%} {kind}" for kind, count in loaded.kinds.most_common()
    )
    report.blocks.append(
        f"Rows in `chat_history_original`: {loaded.rows:,} ({len(all_plans)} apps: per history "
        f"size one target app and {OTHER_APPS} others of the same size, turns interleaved by "
        f"id; {mix}; payload {loaded.payload_bytes / loaded.rows:,.0f} bytes on average). "
        "Times in ms; the windowed calls of the three sizes alternate round by round."
    )
    report.blocks.append(
        markdown_table(
            [
                "database",
                "app history (msgs)",
                "load_window median",
                "p95",
                "runs",
                "naive median",
                "p95",
                "runs",
                "naive / windowed",
            ],
            summary_rows,
            align="lrrrrrrrr",
        )
    )
    report.blocks.append(checks_table(report.checks))
    report.blocks.append("\n".join(notes))
    return report


def _label(size: int) -> str:
    return f"{size:,}"


def _bind_window(store: MemoryStore, app_id: str) -> Callable[[], object]:
    return lambda: store.load_window(app_id, WINDOW)


def _bind_tokens(store: MemoryStore, app_id: str) -> Callable[[], object]:
    return lambda: store.load_window(app_id, max_tokens=TOKEN_BUDGET)


def _bind_naive(engine: Engine, app_id: str) -> Callable[[], object]:
    return lambda: naive_window(engine, app_id, WINDOW)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
