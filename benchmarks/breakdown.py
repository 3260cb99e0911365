"""Where the time of ``load_window``, a 20-message ``append`` and a hot ``messages()`` goes.

Every piece is timed round-robin with the whole call and the raw driver, so the pieces of one
row of the output were measured at the same moments. "before" rows replay the read path as it was
before the DBAPI read (SQLAlchemy Core execution, every fetched row decoded) and the write path
before issue 14 (``pool_pre_ping``, the generation read back with a second ``SELECT``), on the
same tables.

    python -m benchmarks.breakdown [--quick] [--databases sqlite,postgres]
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from benchmarks.common import (
    Options,
    Report,
    Sample,
    analyze,
    log_to_stderr,
    markdown_table,
    parse_options,
    private_redis,
    ratio,
    scratch_database,
    time_interleaved,
    us,
)
from benchmarks.compare import (
    RAW_READ,
    psycopg_conninfo,
    raw_writer,
    twenty_message_turn,
)
from benchmarks.dataset import AppPlan, TextSource, bulk_load
from memstore import MemoryStore, Settings
from memstore.aio import AsyncMemoryStore
from memstore.cache import keys
from memstore.core.display import display_drafts
from memstore.core.loader import LOOKAHEAD_ROWS, RowRequest, run_steps, window_steps
from memstore.core.rows import FetchedRows, decode_payload
from memstore.core.window import StoredMessage, answer_open_group, select_window
from memstore.messages import parse_message
from memstore.sql import generation
from memstore.sql.engine import ENGINE_OPTIONS, make_engine, read_options
from memstore.sql.fastread import read_rows, splits_summary, window_read
from memstore.sql.queries import rows_to_messages, window_rows_statement
from memstore.sql.repository import SqlHistory

WINDOW = 50


def run(options: Options, log: Callable[[str], None] = print, rounds: int | None = None) -> Report:
    """The breakdown tables; ``rounds`` (default 150 with ``--quick``, else 600) per read."""
    if rounds is None:
        rounds = 150 if options.quick else 600
    report = Report("breakdown: where the time goes (µs, medians, round-robin)")
    run_id = uuid.uuid4().hex[:6]
    app = f"bd-{run_id}"
    with ExitStack() as stack:
        for name in options.databases:
            url = stack.enter_context(scratch_database(name, options, "bd"))
            store = stack.enter_context(MemoryStore(Settings(database_url=url)))
            bulk_load(
                [store.engine],
                [AppPlan(app, 2_000, "bd1"), AppPlan(f"{app}-o", 20_000, "bd2")],
                options.seed,
            )
            analyze(store.engine)
            log(f"breakdown[{name}]: load_window ...")
            report.blocks.append(read_breakdown(name, url, store, app, rounds))
            log(f"breakdown[{name}]: append ...")
            report.blocks.append(write_breakdown(name, url, store, run_id, rounds // 2))
        redis_url = stack.enter_context(private_redis())
        if redis_url is not None:
            log("breakdown: hot messages() ...")
            sqlite_url = stack.enter_context(scratch_database("sqlite", options, "bdh"))
            report.blocks.append(hot_breakdown(sqlite_url, redis_url, app, rounds * 4))
    return report


def _table(title: str, samples: dict[str, Sample], whole: str) -> str:
    rows = [
        [label, us(sample.median), us(sample.p95), f"{sample.median / samples[whole].median:.0%}"]
        for label, sample in samples.items()
    ]
    return f"**{title}**\n\n" + markdown_table(
        ["piece", "median µs", "p95 µs", "share of the call"], rows, align="lrrr"
    )


def read_breakdown(name: str, url: str, store: MemoryStore, app: str, rounds: int) -> str:
    limit = WINDOW + LOOKAHEAD_ROWS
    request = RowRequest(limit, summary=True)
    sql_history = store._sql
    cipher = sql_history.cipher
    core_engine = make_engine(url)
    sa.event.listen(core_engine, "before_cursor_execute", _no_op)  # reads take the Core path
    core_history = SqlHistory(core_engine, cipher)
    statement, params = window_rows_statement(app, request)
    with core_engine.connect() as conn:
        core_rows = conn.execute(statement, params).all()
    fetched = FetchedRows.from_rows(core_rows, cipher, app)
    newest = fetched.tail(WINDOW)
    reads = window_read(
        store.engine.dialect, app, request, split_summary=splits_summary(store.engine)
    )
    options = read_options(core_engine)

    def core_fetch_all_decoded(request: RowRequest) -> list[StoredMessage]:
        statement, params = window_rows_statement(app, request)
        with core_engine.connect().execution_options(**options) as conn:
            return rows_to_messages(conn.execute(statement, params).all(), app, cipher)

    def before() -> object:
        return run_steps(
            window_steps(WINDOW, start_at_user=False, summaries="system"), core_fetch_all_decoded
        )

    statement_sql = RAW_READ.replace("LIMIT 50", f"LIMIT {limit}")
    if name == "sqlite":
        import sqlite3

        raw = sqlite3.connect(str(make_url(url).database))
        raw_sql = statement_sql.format(p="?", f="0")

        def raw_read() -> object:
            return raw.execute(raw_sql, (app,)).fetchall()
    else:
        import psycopg

        praw = psycopg.connect(psycopg_conninfo(url), autocommit=True)
        psql = statement_sql.format(p="%s", f="false")

        def raw_read() -> object:
            return praw.execute(psql, (app,), prepare=True).fetchall()

    payloads = fetched.payloads
    ids = fetched.ids
    unmemoized = MemoryStore(Settings(database_url=url, decoded_rows_cache_mb=0))
    calls: dict[str, Callable[[], object]] = {
        "load_window(app, 50), now": lambda: store.load_window(app, WINDOW),
        "load_window, no decoded-row memo (every row decoded per read)": lambda: (
            unmemoized.load_window(app, WINDOW)
        ),
        "load_window, before (Core read, every row decoded)": before,
        f"raw driver, {limit} rows": raw_read,
        f"DBAPI read of {limit} rows + summary (pool, SQL), now": lambda: read_rows(
            store.engine, reads
        ),
        f"Core read of {limit} rows + summary (pool, SQL), before": lambda: (
            core_history.fetch(app, request).ids
        ),
        f"decode {WINDOW} payloads (the window's rows), now": lambda: [
            decode_payload(p, i) for i, p in zip(ids[-WINDOW:], payloads[-WINDOW:], strict=True)
        ],
        f"decode {len(ids)} payloads (every fetched row), before": lambda: [
            decode_payload(p, i) for i, p in zip(ids, payloads, strict=True)
        ],
        f"edge check (select_window over {WINDOW} rows)": lambda: select_window(
            newest, WINDOW, history_complete=False
        ),
    }
    loop = asyncio.new_event_loop()
    async_stores: list[AsyncMemoryStore] = []
    if name == "sqlite":
        inline = AsyncMemoryStore(Settings(database_url=url))
        hop = AsyncMemoryStore(Settings(database_url=url, async_sqlite_inline_reads=False))
        async_stores = [inline, hop]
        calls["async load_window, now (the read on the calling thread)"] = lambda: (
            loop.run_until_complete(inline.load_window(app, WINDOW))
        )
        calls["async load_window, before (every read through aiosqlite's thread)"] = lambda: (
            loop.run_until_complete(hop.load_window(app, WINDOW))
        )
    samples = dict(
        zip(calls, time_interleaved(list(calls.values()), warmup=20, rounds=rounds), strict=True)
    )
    for async_store in async_stores:
        loop.run_until_complete(async_store.close())
    loop.close()
    core_engine.dispose()
    unmemoized.close()
    if name != "sqlite":
        praw.close()
    else:
        raw.close()
    return _table(f"{name}: load_window(app, 50)", samples, "load_window(app, 50), now")


def _no_op(*_args: Any) -> None:
    """A statement listener: an engine with one runs the loader's reads through Core."""


def write_breakdown(name: str, url: str, store: MemoryStore, run_id: str, rounds: int) -> str:
    texts = TextSource(3)
    turns = [twenty_message_turn(random.Random(i), texts) for i in range(6)]
    counter = iter(range(1 << 40))
    old_engine = (
        sa.create_engine(url, pool_pre_ping=True, **ENGINE_OPTIONS) if name != "sqlite" else None
    )
    old_store = MemoryStore(Settings(database_url=url), engine=old_engine) if old_engine else store

    def turn() -> list[Any]:
        return turns[next(counter) % len(turns)]

    def before() -> object:
        original_flag = generation.returns_generation
        generation.returns_generation = lambda _dialect: False  # type: ignore[assignment]
        try:
            return old_store.append(f"bw-{run_id}-b", turn())
        finally:
            generation.returns_generation = original_flag

    def prepare() -> object:
        batch = [parse_message(m) for m in turn()]
        drafts = display_drafts(batch, store._formatters)
        return store._plan(f"bw-{run_id}-p", None, batch, drafts)

    write, close = raw_writer(name, url)
    calls: dict[str, Callable[[], object]] = {
        "append(20 messages), now": lambda: store.append(f"bw-{run_id}-n", turn()),
        "append, before (pre-ping, SELECT after the upsert)": before,
        "raw 20-row transaction": lambda: write(turn()),
        "validate + display rows + plan (no I/O)": prepare,
    }
    samples = dict(
        zip(calls, time_interleaved(list(calls.values()), warmup=5, rounds=rounds), strict=True)
    )
    close()
    if old_engine is not None:
        old_store.close()
        old_engine.dispose()
    return _table(f"{name}: durable 20-message append", samples, "append(20 messages), now")


def hot_breakdown(url: str, redis_url: str, app: str, rounds: int) -> str:
    import redis

    store = MemoryStore(Settings(database_url=url, redis_url=redis_url))
    texts = TextSource(4)
    for i in range(4):
        store.append(app, twenty_message_turn(random.Random(i), texts))
    store.memory(app).messages()
    client = redis.Redis.from_url(redis_url)
    key = keys.window_key(app)
    cached = store.cache.read(app).messages or []
    calls: dict[str, Callable[[], object]] = {
        "memory(app).messages()": lambda: store.memory(app).messages(),
        "raw LRANGE": lambda: client.lrange(key, 0, -1),
        "cache.read (LRANGE + decode entries)": lambda: store.cache.read(app),
        "answer_open_group": lambda: answer_open_group(cached),
    }
    samples = dict(
        zip(calls, time_interleaved(list(calls.values()), warmup=50, rounds=rounds), strict=True)
    )
    store.close()
    client.close()
    hot_ratio = samples["memory(app).messages()"].median / samples["raw LRANGE"].median
    title = f"Redis: hot window ({len(cached)} messages)"
    return (
        _table(title, samples, "memory(app).messages()")
        + f"\n\nmessages() / LRANGE: {ratio(hot_ratio)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(argv, __doc__ or "")
    started = time.perf_counter()
    report = run(options, log_to_stderr)
    print(report.render())
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
