"""memstore side by side with the frameworks' own memory backends and the raw drivers.

One run seeds the same data set (many apps of 100 messages plus one conversation each of the
history sizes, turns interleaved by id) into memstore and into every peer backend that is
installed: OpenAI Agents ``SQLAlchemySession`` (PostgreSQL via asyncpg, else psycopg; SQLite
via aiosqlite), ``SQLiteSession`` and ``RedisSession``; LangChain ``SQLChatMessageHistory``
and ``RedisChatMessageHistory`` (langchain-community). Each measure times memstore, the peers
and the raw driver doing the least the measure needs, round-robin (call by call in rotating
order), so background load on a shared machine hits them all alike:

* newest 50 from SQL (cold: no window cache), per history size;
* the cached window from Redis (hot);
* a durable 20-message turn (user, four rounds of parallel tool calls and results, reply);
* the same with 8 concurrent writers on distinct apps;
* ``memstore reload --all``-style rebuild rate (PostgreSQL or SQLite + Redis);
* a cold-start storm: Redis flushed, 8 clients first-read the same apps (rebuilds per app);
* the async store against the sync store on each of the above.

Redis is a private ``redis-server`` started on a free loopback port (skipped when missing);
PostgreSQL is a fresh schema in ``--postgres-url`` (dropped afterwards). Full size seeds
>= 1M rows; ``--quick`` runs in under a minute; ``--tiny`` is for the smoke test.

    python -m benchmarks.compare [--quick|--tiny] [--databases sqlite,postgres]
                                 [--measures cold,append,concurrent,hot,rebuild,storm]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
import tracemalloc
import uuid
import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from benchmarks.common import (
    Check,
    Options,
    Report,
    Sample,
    add_arguments,
    analyze,
    checks_table,
    exit_status,
    log_to_stderr,
    machine_notes,
    markdown_table,
    ms,
    options_from,
    private_redis,
    ratio,
    scratch_database,
    time_calls,
    time_interleaved,
)
from benchmarks.dataset import AppPlan, TextSource, interleaved_rows
from memstore import MemoryStore, Settings, operations
from memstore.aio import AsyncMemoryStore
from memstore.cache import keys
from memstore.core.rows import decode_payload, encode_payload, message_type
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from memstore.reload_workers import reload_in_workers
from memstore.sql.admin import iter_app_ids
from memstore.sql.schema import original

WINDOW = 50
WRITERS = 8
TURN_SIZE = 20
NOOP_EVALSHA = "floor: no-op EVALSHA"
SQLITE_SESSION = "Agents SQLiteSession"


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    filler_apps: int
    filler_size: int
    rounds: int
    write_rounds: int
    concurrent_ops: int
    storm_apps: int
    memory_apps: int
    """Peak memory of the rebuild is compared at this many apps and at all filler apps."""


FULL = Plan((100, 10_000, 100_000), 10_000, 100, 300, 120, 25, 1_000, 1_000)
QUICK = Plan((100, 1_000, 10_000), 400, 100, 80, 30, 6, 200, 100)
TINY = Plan((100, 300), 12, 60, 4, 3, 2, 8, 4)

# -- targets (reads: issue 14; writes: issue 29, as ratios to floors timed in the same run) --
PG_RAW_MAX = 4.0
PG_PEER_SPEEDUP = 2.0
PG_FLAT_MAX = 1.2
SQLITE_RAW_MAX = 5.0
HOT_RAW_MAX = 1.5
APPEND_RAW_MAX = {"postgres": 1.5, "sqlite": 2.0}
"""A durable turn against the raw driver's 20-row transaction."""
APPEND_PEER_MAX = {"postgres": 0.5, "sqlite": 1.0}
"""A durable turn against the named peer storing the same turn (``APPEND_PEER``)."""
APPEND_PEER = {"postgres": "Agents SQLAlchemySession", "sqlite": SQLITE_SESSION}
REDIS_UPDATE_FLOOR_MAX = 2.0
"""The window update a durable turn adds, against a no-op ``EVALSHA`` round trip."""
CONCURRENT_RAW_MAX = 2.0
CONCURRENT_PEER_MAX = 1.0
"""SQLite, 8 writers on distinct apps: memstore against ``SQLiteSession`` at the same
concurrency."""
REBUILD_RAW_MIN = 0.8
"""``reload --all`` in one process against the raw floor (indexed read + ``DEL/RPUSH/EXPIRE``
per app) of the same run."""
REBUILD_SCALING_PER_WORKER = 0.8
"""``--workers N`` (N = the cores) against one process: at least 0.8 x N."""
REBUILD_MEMORY_GROWTH = 1.5
STORM_REBUILDS_PER_APP = 1.1
ASYNC_MAX = 1.25


# -- data ---------------------------------------------------------------------------------------


def make_plans(plan: Plan, seed: int, run_id: str) -> tuple[dict[int, str], list[AppPlan]]:
    targets = {size: f"cmp-{run_id}-h{size}" for size in plan.sizes}
    apps = [AppPlan(app, size, f"{seed}-{size}", user_id="u-t") for size, app in targets.items()]
    apps += [
        AppPlan(f"cmp-{run_id}-f{i:05d}", plan.filler_size, f"{seed}-f{i}", user_id=f"u{i % 97}")
        for i in range(plan.filler_apps)
    ]
    return targets, apps


def twenty_message_turn(rng: random.Random, texts: TextSource) -> list[Message]:
    """User, four AI messages with 3 parallel calls (each followed by its 3 results), an AI
    message with one call and its result, the reply: 20 messages."""
    out: list[Message] = [UserMessage(text=texts.text(rng, 160, 2_000))]
    for width in (3, 3, 3, 3, 1):
        calls = [
            ToolRequest(
                id=f"call_{rng.getrandbits(96):024x}",
                name="read_file",
                arguments=json.dumps({"path": f"src/{rng.randrange(999)}.py"}),
            )
            for _ in range(width)
        ]
        out.append(AiMessage(text=None, tool_requests=calls))
        out.extend(
            ToolResult(id=c.id, tool_name=c.name, text=texts.text(rng, 500, 4_000)) for c in calls
        )
    out.append(AiMessage(text=texts.text(rng, 420, 3_000)))
    assert len(out) == TURN_SIZE
    return out


def with_fresh_call_ids(turn: list[Message], tag: int) -> list[Message]:
    """``turn`` with every call id made its own (suffixed with ``tag``)."""
    out: list[Message] = []
    for message in turn:
        if isinstance(message, AiMessage) and message.tool_requests:
            requests = [r.model_copy(update={"id": f"{r.id}-{tag}"}) for r in message.tool_requests]
            message = message.model_copy(update={"tool_requests": requests})
        elif isinstance(message, ToolResult):
            message = message.model_copy(update={"id": f"{message.id}-{tag}"})
        out.append(message)
    return out


def agents_items(message: Message) -> list[dict[str, Any]]:
    from memstore.adapters.openai_agents import message_to_items

    return [dict(item) for item in message_to_items(message)]  # type: ignore[call-overload]


def langchain_record(message: Message) -> str | None:
    from langchain_core.messages import message_to_dict

    from memstore.adapters.langchain import from_canonical

    converted = from_canonical(message)
    return None if converted is None else json.dumps(message_to_dict(converted))


# -- peers ------------------------------------------------------------------------------------


def have(module: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            __import__(module)
    except Exception:
        return False
    return True


def pg_schema(url: str) -> str:
    options = str(make_url(url).query.get("options", ""))
    return options.split("search_path=", 1)[1] if "search_path=" in options else "public"


def agents_pg_engine(url: str) -> Any:
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = make_url(url)
    schema = pg_schema(url)
    base = parsed.set(query={})
    if have("asyncpg"):
        return create_async_engine(
            base.set(drivername="postgresql+asyncpg"),
            connect_args={"server_settings": {"search_path": schema}},
        ), "asyncpg"
    return create_async_engine(
        base.set(drivername="postgresql+psycopg"),
        connect_args={"options": f"-csearch_path={schema}"},
    ), "psycopg async"


def psycopg_conninfo(url: str) -> str:
    parsed = make_url(url)
    conninfo = parsed.set(drivername="postgresql", query={}).render_as_string(hide_password=False)
    schema = pg_schema(url)
    return f"{conninfo}?options=-csearch_path%3D{schema}"


class Sink:
    """Bulk writer of one peer's rows (same conversations as memstore's)."""

    def __init__(self, engine: Engine, sessions_sql: str | None, rows_sql: str) -> None:
        self.engine = engine
        self.sessions_sql = sessions_sql
        self.rows_sql = rows_sql
        self.sessions: list[dict[str, Any]] = []
        self.seen: set[str] = set()
        self.rows: list[dict[str, Any]] = []

    def add(self, session: str, data: str) -> None:
        if session not in self.seen:
            self.seen.add(session)
            self.sessions.append({"s": session})
        self.rows.append({"s": session, "d": data})

    def flush(self) -> None:
        with self.engine.begin() as conn:
            if self.sessions and self.sessions_sql:
                conn.execute(sa.text(self.sessions_sql), self.sessions)
            if self.rows:
                conn.execute(sa.text(self.rows_sql), self.rows)
        self.sessions.clear()
        self.rows.clear()


AGENTS_SESSIONS = "INSERT INTO agent_sessions (session_id) VALUES (:s)"
AGENTS_ROWS = "INSERT INTO agent_messages (session_id, message_data) VALUES (:s, :d)"
LANGCHAIN_ROWS = "INSERT INTO message_store (session_id, message) VALUES (:s, :d)"


def seed(
    memstore_engines: list[Engine],
    agents_sinks: list[Sink],
    langchain_sinks: list[Sink],
    apps: list[AppPlan],
    seed_value: int,
    log: Callable[[str], None],
) -> int:
    batch: list[dict[str, Any]] = []
    total = 0

    def flush() -> None:
        for engine in memstore_engines:
            with engine.begin() as conn:
                conn.execute(original.insert(), batch)
        for sink in (*agents_sinks, *langchain_sinks):
            sink.flush()
        batch.clear()

    for row in interleaved_rows(apps, seed_value):
        batch.append(row)
        total += 1
        if agents_sinks or langchain_sinks:
            message = decode_payload(row["payload"], row["id"])
            if agents_sinks:
                for item in agents_items(message):
                    data = json.dumps(item)
                    for sink in agents_sinks:
                        sink.add(row["app_id"], data)
            if langchain_sinks:
                record = langchain_record(message)
                if record is not None:
                    for sink in langchain_sinks:
                        sink.add(row["app_id"], record)
        if len(batch) >= 5_000:
            flush()
            if total % 100_000 == 0:
                log(f"compare: seeded {total:,} rows")
    if batch:
        flush()
    return total


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Results:
    rows: list[list[str]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(
        self,
        measure: str,
        samples: dict[str, Sample],
        raw: str | None,
        peers: Sequence[str],
        unit: Callable[[float], str] = ms,
    ) -> None:
        present = [p for p in peers if p in samples]
        best = min(present, key=lambda p: samples[p].median) if present else None
        for system, sample in samples.items():
            to_raw = ratio(sample.median / samples[raw].median) if raw in samples else ""
            to_peer = ratio(sample.median / samples[best].median) if best else ""
            self.rows.append(
                [
                    measure,
                    system,
                    unit(sample.median),
                    unit(sample.p95),
                    str(sample.runs),
                    to_raw,
                    to_peer,
                ]
            )

    def check(self, scope: str, what: str, target: str, value: float, passed: bool) -> None:
        self.checks.append(Check(scope, what, target, ratio(value), passed))


class Runner:
    """Owns the event loop the async systems run on (one ``run_until_complete`` per call)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def call(self, factory: Callable[[], Any]) -> Callable[[], object]:
        loop = self.loop
        return lambda: loop.run_until_complete(factory())

    def run(self, awaitable: Any) -> Any:
        return self.loop.run_until_complete(awaitable)


MEASURES = ("cold", "append", "concurrent", "hot", "rebuild", "storm")


def run(
    options: Options,
    log: Callable[[str], None] = print,
    plan: Plan | None = None,
    measures: Sequence[str] = MEASURES,
) -> Report:
    """Seed every system, then time the chosen ``measures`` (default: all of them)."""
    plan = plan or (QUICK if options.quick else FULL)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    run_id = uuid.uuid4().hex[:8]
    targets, apps = make_plans(plan, options.seed, run_id)
    fillers = [a.app_id for a in apps if a.app_id not in targets.values()]
    res = Results()
    runner = Runner()
    with ExitStack() as stack:
        stack.callback(runner.loop.close)
        redis_url = stack.enter_context(private_redis())
        tmp = Path(tempfile.mkdtemp(prefix="memstore-bench-cmp-"))
        stack.callback(shutil.rmtree, tmp, True)
        urls = {
            name: stack.enter_context(scratch_database(name, options, "cmp"))
            for name in options.databases
        }
        stores = {
            name: stack.enter_context(MemoryStore(Settings(database_url=url)))
            for name, url in urls.items()
        }
        astores = {name: AsyncMemoryStore(Settings(database_url=url)) for name, url in urls.items()}
        stack.callback(lambda: [runner.run(s.close()) for s in astores.values()])
        agents_ok = have("agents.extensions.memory.sqlalchemy_session")
        langchain_ok = have("langchain_community.chat_message_histories")
        agents_sinks: list[Sink] = []
        langchain_sinks: list[Sink] = []
        peer_engines: dict[str, Engine] = {}
        agents_engines: dict[str, Any] = {}
        lc_urls: dict[str, str] = {}
        if agents_ok:
            from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
            from agents.memory.sqlite_session import SQLiteSession
            from sqlalchemy.ext.asyncio import create_async_engine

            for name, url in urls.items():
                if name == "sqlite":
                    path = tmp / "agents.db"
                    SQLiteSession("init", path).close()  # creates the tables
                    index = sqlite3.connect(path)  # and the index SQLAlchemySession adds
                    index.execute(
                        "CREATE INDEX IF NOT EXISTS idx_agent_messages_session_time "
                        "ON agent_messages (session_id, created_at)"
                    )
                    index.close()
                    peer_engines["agents-sqlite"] = sa.create_engine(f"sqlite:///{path}")
                    agents_engines["sqlite"] = (
                        create_async_engine(f"sqlite+aiosqlite:///{path}"),
                        "aiosqlite",
                    )
                else:
                    engine, driver = agents_pg_engine(url)
                    agents_engines["postgres"] = (engine, driver)
                    runner.run(
                        SQLAlchemySession("init", engine=engine, create_tables=True).get_items()
                    )
                    peer_engines["agents-postgres"] = sa.create_engine(
                        make_url(url).set(drivername="postgresql+psycopg")
                    )
                key = "agents-sqlite" if name == "sqlite" else "agents-postgres"
                agents_sinks.append(Sink(peer_engines[key], AGENTS_SESSIONS, AGENTS_ROWS))
        if langchain_ok:
            from langchain_community.chat_message_histories import SQLChatMessageHistory

            for name, url in urls.items():
                lc_url = f"sqlite:///{tmp / 'langchain.db'}" if name == "sqlite" else url
                lc_urls[name] = lc_url
                engine = sa.create_engine(lc_url)
                SQLChatMessageHistory("init", connection=engine).clear()  # creates the table
                peer_engines[f"langchain-{name}"] = engine
                langchain_sinks.append(Sink(engine, None, LANGCHAIN_ROWS))
        stack.callback(lambda: [e.dispose() for e in peer_engines.values()])
        stack.callback(lambda: [runner.run(e.dispose()) for e, _driver in agents_engines.values()])
        total_rows = sum(a.size for a in apps)
        log(
            f"compare: seeding {total_rows:,} rows x {len(urls)} memstore + "
            f"{len(agents_sinks)} Agents + {len(langchain_sinks)} LangChain tables ..."
        )
        started = time.perf_counter()
        seed(
            [s.engine for s in stores.values()],
            agents_sinks,
            langchain_sinks,
            apps,
            options.seed,
            log,
        )
        for store in stores.values():
            analyze(store.engine)
        for key, engine in peer_engines.items():
            if key.endswith("postgres"):
                with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(sa.text("VACUUM ANALYZE"))
        log(f"compare: seeded in {time.perf_counter() - started:.0f} s")
        res.notes.append(
            f"Data: {total_rows:,} rows per system ({len(apps):,} apps: {plan.filler_apps:,} of "
            f"{plan.filler_size} messages and one each of "
            f"{', '.join(f'{s:,}' for s in plan.sizes)}; turns interleaved by id)."
        )

        for name in urls if "cold" in measures else ():
            cold_reads(
                name,
                plan,
                targets,
                stores[name],
                astores[name],
                urls[name],
                agents_engines.get(name),
                lc_urls.get(name),
                tmp,
                runner,
                res,
                log,
            )
        for name in urls:
            if "append" in measures:
                appends(
                    name,
                    plan,
                    stores[name],
                    astores[name],
                    urls[name],
                    redis_url,
                    agents_engines.get(name),
                    tmp,
                    runner,
                    res,
                    log,
                )
            if "concurrent" in measures:
                concurrent(name, plan, urls[name], tmp, agents_ok, res, log)
        if redis_url is not None:
            main_db = "postgres" if "postgres" in urls else next(iter(urls))
            if "hot" in measures:
                hot(plan, targets, urls[main_db], redis_url, runner, res, log)
            if "rebuild" in measures:
                rebuilds(main_db, plan, fillers, urls[main_db], redis_url, res, log)
            if "storm" in measures:
                storm(plan, fillers, urls[main_db], redis_url, res, log)
        else:
            res.notes.append("redis-server not installed: hot read, rebuild and storm skipped.")

    report = Report("compare: memstore, framework backends and raw drivers (round-robin)")
    report.blocks.append("\n".join(res.notes))
    report.blocks.append(
        markdown_table(
            ["measure", "system", "median ms", "p95 ms", "runs", "/ raw", "/ best peer"],
            res.rows,
            align="llrrrrr",
        )
    )
    report.blocks.append(checks_table(res.checks))
    report.checks.extend(res.checks)
    return report


# -- cold reads ---------------------------------------------------------------------------------


def cold_reads(
    name: str,
    plan: Plan,
    targets: dict[int, str],
    store: MemoryStore,
    astore: AsyncMemoryStore,
    url: str,
    agents_engine: Any,
    lc_url: str | None,
    tmp: Path,
    runner: Runner,
    res: Results,
    log: Callable[[str], None],
) -> None:
    medians: dict[int, float] = {}
    for size, app in targets.items():
        calls: dict[str, Callable[[], object]] = {
            "memstore load_window": lambda app=app: store.load_window(app, WINDOW),
            "memstore async": runner.call(lambda app=app: astore.load_window(app, WINDOW)),
        }
        peers: list[str] = []
        closers: list[Callable[[], object]] = []
        if agents_engine is not None:
            from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

            engine, driver = agents_engine
            session = SQLAlchemySession(app, engine=engine)
            key = f"Agents SQLAlchemySession ({driver})"
            calls[key] = runner.call(lambda s=session: s.get_items(WINDOW))
            peers.append(key)
            if name == "sqlite":
                from agents.memory.sqlite_session import SQLiteSession

                lite = SQLiteSession(app, tmp / "agents.db")
                closers.append(lite.close)
                calls["Agents SQLiteSession"] = runner.call(lambda s=lite: s.get_items(WINDOW))
                peers.append("Agents SQLiteSession")
        raw_call, raw_close = raw_reader(name, url, app)
        closers.append(raw_close)
        calls["raw " + ("sqlite3" if name == "sqlite" else "psycopg") + " LIMIT 50"] = raw_call
        raw_key = list(calls)[-1]
        log(f"compare[{name}]: newest {WINDOW} @ {size:,} ({len(calls)} systems) ...")
        samples = dict(
            zip(
                calls,
                time_interleaved(list(calls.values()), warmup=5, rounds=plan.rounds),
                strict=True,
            )
        )
        if lc_url is not None:
            from langchain_community.chat_message_histories import SQLChatMessageHistory

            history = SQLChatMessageHistory(app, connection=lc_url)
            samples["LangChain SQLChatMessageHistory (all)"] = time_calls(
                lambda h=history: h.messages[-WINDOW:],
                warmup=1,
                min_runs=3,
                max_runs=plan.rounds,
                budget_seconds=1.0 if size > 1000 else 0.5,
            )
            peers.append("LangChain SQLChatMessageHistory (all)")
        for close in closers:
            close()
        measure = f"{name}: newest {WINDOW} of {size:,}"
        res.table(measure, samples, raw_key, peers)
        ours = samples["memstore load_window"].median
        medians[size] = ours
        agents_peers = [p for p in peers if p.startswith("Agents") and p in samples]
        for system in ("memstore load_window", "memstore async"):
            value = samples[system].median / samples[raw_key].median
            limit = PG_RAW_MAX if name == "postgres" else SQLITE_RAW_MAX
            res.check(measure, f"{system} / raw", f"<= {limit}x", value, value <= limit)
            if agents_peers:
                best = min(samples[p].median for p in agents_peers)
                speedup = best / samples[system].median
                need = PG_PEER_SPEEDUP if name == "postgres" else 1.0
                res.check(
                    measure,
                    f"best Agents / {system}",
                    f">= {need}x" if need > 1 else "> 1x",
                    speedup,
                    speedup >= need if need > 1 else speedup > 1,
                )
        value = samples["memstore async"].median / ours
        res.check(measure, "async / sync", f"<= {ASYNC_MAX}x", value, value <= ASYNC_MAX)
    if name == "postgres" and len(medians) > 1:
        flat = medians[max(medians)] / medians[min(medians)]
        res.check(
            f"{name}: newest {WINDOW}",
            f"t({max(medians):,}) / t({min(medians):,})",
            f"<= {PG_FLAT_MAX}x",
            flat,
            flat <= PG_FLAT_MAX,
        )


RAW_READ = (
    "SELECT id, payload FROM chat_history_original WHERE app_id = {p} AND is_deleted = {f} "
    "ORDER BY app_id DESC, id DESC LIMIT 50"
)


def raw_reader(name: str, url: str, app: str) -> tuple[Callable[[], object], Callable[[], object]]:
    if name == "sqlite":
        import sqlite3

        conn = sqlite3.connect(str(make_url(url).database))
        sql = RAW_READ.format(p="?", f="0")
        return (lambda: conn.execute(sql, (app,)).fetchall()), conn.close
    import psycopg

    pconn = psycopg.connect(psycopg_conninfo(url), autocommit=True)
    psql = RAW_READ.format(p="%s", f="false")
    return (lambda: pconn.execute(psql, (app,), prepare=True).fetchall()), pconn.close


# -- appends ------------------------------------------------------------------------------------


_RAW_IDS = itertools.count(1)
"""Primary keys of the raw baseline's rows, shared by every raw writer (thread-safe)."""


def raw_writer(
    name: str, url: str
) -> tuple[Callable[[list[Message]], object], Callable[[], object]]:
    """20 rows in one transaction into a copy of the original table (same columns, indexes)."""
    counter = _RAW_IDS
    app = f"raw-{uuid.uuid4().hex[:8]}"

    def rows(batch: list[Message]) -> list[tuple[Any, ...]]:
        now = time.time()
        return [
            (next(counter), app, "u", message_type(m), None, encode_payload(m), now, now, False)
            for m in batch
        ]

    if name == "sqlite":
        import sqlite3

        conn = sqlite3.connect(
            str(make_url(url).database), isolation_level=None, check_same_thread=False, timeout=30
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS raw_turns AS SELECT * FROM chat_history_original WHERE 0"
        )
        conn.execute("CREATE INDEX IF NOT EXISTS raw_turns_app ON raw_turns (app_id, id)")
        sql = "INSERT INTO raw_turns VALUES (?,?,?,?,?,?,?,?,?)"

        def write(batch: list[Message]) -> None:
            conn.execute("BEGIN")
            conn.executemany(sql, rows(batch))
            conn.execute("COMMIT")

        return write, conn.close
    import psycopg

    pconn = psycopg.connect(psycopg_conninfo(url))
    with pconn.transaction():
        pconn.execute(
            "CREATE TABLE IF NOT EXISTS raw_turns (LIKE chat_history_original INCLUDING ALL)"
        )
    pconn.commit()
    psql = "INSERT INTO raw_turns VALUES (%s,%s,%s,%s,%s,%s,to_timestamp(%s),to_timestamp(%s),%s)"

    def pwrite(batch: list[Message]) -> None:
        with pconn.cursor() as cur:
            cur.executemany(psql, rows(batch))
        pconn.commit()

    return pwrite, pconn.close


def appends(
    name: str,
    plan: Plan,
    store: MemoryStore,
    astore: AsyncMemoryStore,
    url: str,
    redis_url: str | None,
    agents_engine: Any,
    tmp: Path,
    runner: Runner,
    res: Results,
    log: Callable[[str], None],
) -> None:
    texts = TextSource(7)
    rng = random.Random(11)
    turns = [twenty_message_turn(rng, texts) for _ in range(8)]
    picker = iter(range(1 << 40))

    def turn() -> list[Message]:
        return turns[next(picker) % len(turns)]

    run_id = uuid.uuid4().hex[:6]
    calls: dict[str, Callable[[], object]] = {
        "memstore append": lambda: store.append(f"ap-{run_id}-m", turn()),
        "memstore async": runner.call(lambda: astore.append(f"ap-{run_id}-a", turn())),
    }
    closers: list[Callable[[], object]] = []
    if redis_url is not None:
        rstore = MemoryStore(Settings(database_url=url, redis_url=redis_url))
        closers.append(rstore.close)
        windowed = f"ap-{run_id}-r"
        # the window must be cached for an append to update it, and a cached window holds a
        # call id once (a turn appended again would drop it): fresh call ids on every turn
        rstore.append(windowed, with_fresh_call_ids(turns[0], -1))
        rstore.memory(windowed).messages()
        fresh = iter(
            [with_fresh_call_ids(turns[i % len(turns)], i) for i in range(plan.write_rounds + 3)]
        )
        calls["memstore append + Redis window"] = lambda: rstore.append(windowed, next(fresh))
        floor_client = redis.Redis.from_url(redis_url)
        closers.append(floor_client.close)
        noop = floor_client.script_load("return 0")
        calls[NOOP_EVALSHA] = lambda: floor_client.evalsha(noop, 0)
    peers: list[str] = []
    item_turns = [[item for m in t for item in agents_items(m)] for t in turns]
    if agents_engine is not None:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        engine, driver = agents_engine
        session = SQLAlchemySession(f"ap-{run_id}-s", engine=engine)
        key = f"Agents SQLAlchemySession ({driver})"
        calls[key] = runner.call(lambda: session.add_items(item_turns[next(picker) % 8]))
        peers.append(key)
        if name == "sqlite":
            from agents.memory.sqlite_session import SQLiteSession

            lite = SQLiteSession(f"ap-{run_id}-l", tmp / "agents.db")
            closers.append(lite.close)
            calls["Agents SQLiteSession"] = runner.call(
                lambda: lite.add_items(item_turns[next(picker) % 8])
            )
            peers.append("Agents SQLiteSession")
    write, close = raw_writer(name, url)
    closers.append(close)
    raw_key = "raw 20-row transaction"
    calls[raw_key] = lambda: write(turn())
    log(f"compare[{name}]: durable {TURN_SIZE}-message turn ({len(calls)} systems) ...")
    samples = dict(
        zip(
            calls,
            time_interleaved(list(calls.values()), warmup=3, rounds=plan.write_rounds),
            strict=True,
        )
    )
    if redis_url is not None and rstore.cache.read(windowed).messages is None:
        raise RuntimeError("the Redis window was dropped: the window update was not measured")
    for closer in closers:
        closer()
    measure = f"{name}: durable {TURN_SIZE}-message turn"
    res.table(measure, samples, raw_key, peers)
    if peers:
        note = f"The Agents sessions store the same turn as {len(item_turns[0])} items."
        if note not in res.notes:  # one line for both databases
            res.notes.append(note)
    ours = samples["memstore append"].median
    peer = next((p for p in peers if p.startswith(APPEND_PEER[name])), None)
    for system in ("memstore append", "memstore async"):
        value = samples[system].median / samples[raw_key].median
        limit = APPEND_RAW_MAX[name]
        res.check(measure, f"{system} / raw", f"<= {limit}x", value, value <= limit)
        if peer is not None:
            value = samples[system].median / samples[peer].median
            limit = APPEND_PEER_MAX[name]
            res.check(measure, f"{system} / {peer}", f"<= {limit}x", value, value <= limit)
    value = samples["memstore async"].median / ours
    res.check(measure, "async / sync", f"<= {ASYNC_MAX}x", value, value <= ASYNC_MAX)
    if NOOP_EVALSHA in samples:
        extra = samples["memstore append + Redis window"].median - ours
        floor = samples[NOOP_EVALSHA].median
        value = extra / floor
        res.checks.append(
            Check(
                measure,
                "Redis window update / no-op EVALSHA",
                f"<= {REDIS_UPDATE_FLOOR_MAX}x",
                f"{value:.2f}x ({extra * 1000:.2f} ms / {floor * 1000:.2f} ms)",
                value <= REDIS_UPDATE_FLOOR_MAX,
            )
        )


def concurrent(
    name: str,
    plan: Plan,
    url: str,
    tmp: Path,
    agents_ok: bool,
    res: Results,
    log: Callable[[str], None],
) -> None:
    """8 threads, each on its own app (or session); memstore, raw and (SQLite, when the Agents
    SDK is installed) ``SQLiteSession`` batches alternate three times."""
    texts = TextSource(8)
    rng = random.Random(12)
    turns = [twenty_message_turn(rng, texts) for _ in range(4)]
    store = MemoryStore(Settings(database_url=url))
    writers = [raw_writer(name, url) for _ in range(WRITERS)]
    run_id = uuid.uuid4().hex[:6]
    latencies: dict[str, list[float]] = {"memstore append": [], "raw 20-row transaction": []}
    sessions: list[Any] = []
    if name == "sqlite" and agents_ok:
        from agents.memory.sqlite_session import SQLiteSession

        path = tmp / "agents-concurrent.db"
        sessions = [SQLiteSession(f"cc-{run_id}-{i}", path) for i in range(WRITERS)]
        latencies[SQLITE_SESSION] = []
    item_turns = [[item for m in t for item in agents_items(m)] for t in turns]

    def batch(system: str) -> None:
        barrier = threading.Barrier(WRITERS)
        lock = threading.Lock()

        def worker(index: int) -> None:
            mine: list[float] = []
            loop = asyncio.new_event_loop()  # the session's add_items is a coroutine
            barrier.wait()
            for op in range(plan.concurrent_ops):
                t = turns[op % len(turns)]
                begin = time.perf_counter()
                if system == "memstore append":
                    store.append(f"cc-{run_id}-{index}", t)
                elif system == SQLITE_SESSION:
                    loop.run_until_complete(
                        sessions[index].add_items(item_turns[op % len(item_turns)])
                    )
                else:
                    writers[index][0](t)
                mine.append(time.perf_counter() - begin)
            loop.close()
            with lock:
                latencies[system].extend(mine)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    log(f"compare[{name}]: {WRITERS} concurrent writers ...")
    store.append(f"cc-{run_id}-warm", turns[0])
    for _ in range(3):
        for system in list(latencies):
            batch(system)
    store.close()
    for _, close in writers:
        close()
    for session in sessions:
        session.close()
    samples = {k: Sample(tuple(v)) for k, v in latencies.items()}
    measure = f"{name}: {TURN_SIZE}-message turn, {WRITERS} writers"
    peers = [SQLITE_SESSION] if sessions else []
    res.table(measure, samples, "raw 20-row transaction", peers)
    value = samples["memstore append"].median / samples["raw 20-row transaction"].median
    res.check(
        measure, "memstore / raw", f"<= {CONCURRENT_RAW_MAX}x", value, value <= CONCURRENT_RAW_MAX
    )
    if sessions:
        value = samples["memstore append"].median / samples[SQLITE_SESSION].median
        limit = CONCURRENT_PEER_MAX
        res.check(measure, f"memstore / {SQLITE_SESSION}", f"<= {limit}x", value, value <= limit)


# -- Redis: hot window, rebuilds, storm ---------------------------------------------------------


def hot(
    plan: Plan,
    targets: dict[int, str],
    url: str,
    redis_url: str,
    runner: Runner,
    res: Results,
    log: Callable[[str], None],
) -> None:
    app = targets[min(targets)]
    store = MemoryStore(Settings(database_url=url, redis_url=redis_url))
    astore = AsyncMemoryStore(Settings(database_url=url, redis_url=redis_url))
    client = redis.Redis.from_url(redis_url)
    window = store.memory(app).messages()  # rebuilt and cached
    runner.run(astore.memory(app).messages())
    calls: dict[str, Callable[[], object]] = {
        "memstore messages()": lambda: store.memory(app).messages(),
        "memstore async": runner.call(lambda: astore.memory(app).messages()),
    }
    peers: list[str] = []
    items = [item for m in window for item in agents_items(m)]
    closers: list[Callable[[], object]] = [
        store.close,
        client.close,
        lambda: runner.run(astore.close()),
    ]
    if have("agents.extensions.memory.redis_session"):
        from agents.extensions.memory.redis_session import RedisSession

        session = RedisSession.from_url(f"hot-{app}", url=redis_url)
        runner.run(session.add_items(items))
        calls["Agents RedisSession"] = runner.call(lambda: session.get_items(WINDOW))
        peers.append("Agents RedisSession")
        closers.append(lambda: runner.run(session.close()))
    if have("langchain_community.chat_message_histories"):
        from langchain_community.chat_message_histories import RedisChatMessageHistory

        history = RedisChatMessageHistory(f"hot-{app}", url=redis_url)
        for m in window:
            record = langchain_record(m)
            if record is not None:
                client.lpush(f"message_store:hot-{app}", record)
        calls["LangChain RedisChatMessageHistory"] = lambda: history.messages
        peers.append("LangChain RedisChatMessageHistory")
        closers.append(history.redis_client.close)
    key = keys.window_key(app)
    raw_key = "raw LRANGE"
    calls[raw_key] = lambda: client.lrange(key, 0, -1)
    log(f"compare: hot window ({len(window)} messages, {len(calls)} systems) ...")
    samples = dict(
        zip(
            calls,
            time_interleaved(list(calls.values()), warmup=50, rounds=plan.rounds * 5),
            strict=True,
        )
    )
    for closer in closers:
        closer()
    measure = f"Redis: hot window ({len(window)} msgs)"
    res.table(measure, samples, raw_key, peers)
    ours = samples["memstore messages()"].median
    for system in ("memstore messages()", "memstore async"):
        value = samples[system].median / samples[raw_key].median
        res.check(measure, f"{system} / LRANGE", f"<= {HOT_RAW_MAX}x", value, value <= HOT_RAW_MAX)
        if "Agents RedisSession" in samples:
            speedup = samples["Agents RedisSession"].median / samples[system].median
            res.check(measure, f"RedisSession / {system}", "> 1x", speedup, speedup > 1)
    value = samples["memstore async"].median / ours
    res.check(measure, "async / sync", f"<= {ASYNC_MAX}x", value, value <= ASYNC_MAX)


def reload_all(store: MemoryStore, apps: list[str]) -> None:
    """What ``memstore reload --all`` runs: batches of ``RELOAD_BATCH`` apps under the CLI's
    collector settings."""
    with operations.bulk_collection():
        for _report in operations.reload_apps(store, apps):
            pass


def rebuilds(
    name: str,
    plan: Plan,
    fillers: list[str],
    url: str,
    redis_url: str,
    res: Results,
    log: Callable[[str], None],
) -> None:
    """``memstore reload --all`` (every app, ``reload_max`` messages) against the raw floor:
    one indexed read and ``DEL/RPUSH/EXPIRE`` per app."""
    store = MemoryStore(Settings(database_url=url, redis_url=redis_url))
    prefix = fillers[0].rsplit("-f", 1)[0] + "-f"
    all_apps = [a for a in iter_app_ids(store.engine) if a.startswith(prefix)]
    log(f"compare: rebuilding {len(all_apps):,} apps (memstore, then raw) ...")
    started = time.perf_counter()
    reload_all(store, all_apps)
    ours = len(all_apps) / (time.perf_counter() - started)
    workers = os.cpu_count() or 1
    log(f"compare: rebuilding them again in {workers} worker processes ...")
    started = time.perf_counter()  # the processes' start (imports, connections) included
    for _report in reload_in_workers(store.settings, all_apps, workers=workers):
        pass
    in_workers = len(all_apps) / (time.perf_counter() - started)
    client = redis.Redis.from_url(redis_url)
    if name == "sqlite":
        import sqlite3

        conn = sqlite3.connect(str(make_url(url).database))
        sql = RAW_READ.format(p="?", f="0")

        def fetch(app: str) -> list[Any]:
            return conn.execute(sql, (app,)).fetchall()

        close: Callable[[], object] = conn.close
    else:
        import psycopg

        pconn = psycopg.connect(psycopg_conninfo(url), autocommit=True)
        psql = RAW_READ.format(p="%s", f="false")

        def fetch(app: str) -> list[Any]:
            return pconn.execute(psql, (app,), prepare=True).fetchall()

        close = pconn.close

    started = time.perf_counter()
    for app in all_apps:
        rows = fetch(app)
        pipe = client.pipeline(transaction=True)
        rkey = f"rawbench:{app}"
        pipe.delete(rkey)
        pipe.rpush(rkey, *[r[1] for r in reversed(rows)])
        pipe.expire(rkey, 3600)
        pipe.execute()
    raw = len(all_apps) / (time.perf_counter() - started)
    close()
    # peak memory: traced pass over the first memory_apps, then over all
    tracemalloc.start()
    peaks: list[int] = []
    for count in (min(plan.memory_apps, len(all_apps)), len(all_apps)):
        tracemalloc.reset_peak()
        reload_all(store, all_apps[:count])
        peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    store.close()
    client.close()
    measure = f"{name} + Redis: reload {len(all_apps):,} apps x {plan.filler_size}"
    res.rows.append(
        [
            measure,
            "memstore reload",
            f"{ours:,.0f} apps/s",
            "",
            "1",
            ratio(raw / ours) + " slower",
            "",
        ]
    )
    res.rows.append(
        [
            measure,
            f"memstore reload --workers {workers}",
            f"{in_workers:,.0f} apps/s",
            "",
            "1",
            ratio(raw / in_workers) + " slower"
            if in_workers < raw
            else ratio(in_workers / raw) + " faster",
            "",
        ]
    )
    res.rows.append([measure, "raw read + DEL/RPUSH/EXPIRE", f"{raw:,.0f} apps/s", "", "1", "", ""])
    value = ours / raw
    res.check(
        measure,
        "memstore reload / raw floor",
        f">= {REBUILD_RAW_MIN}x",
        value,
        value >= REBUILD_RAW_MIN,
    )
    need = REBUILD_SCALING_PER_WORKER * workers
    value = in_workers / ours
    res.check(
        measure, f"--workers {workers} / one process", f">= {need:.1f}x", value, value >= need
    )
    growth = peaks[1] / max(1, peaks[0])
    res.checks.append(
        Check(
            measure,
            f"peak memory {len(all_apps):,} / {plan.memory_apps:,} apps",
            f"<= {REBUILD_MEMORY_GROWTH}x",
            f"{growth:.2f}x ({peaks[1] / 1e6:.1f} MB)",
            growth <= REBUILD_MEMORY_GROWTH,
        )
    )


def storm(
    plan: Plan,
    fillers: list[str],
    url: str,
    redis_url: str,
    res: Results,
    log: Callable[[str], None],
) -> None:
    """Redis flushed (the private server), 8 clients first-read the same apps at once."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # the private benchmark server only
    client.close()
    apps = fillers[: plan.storm_apps]
    stores = [MemoryStore(Settings(database_url=url, redis_url=redis_url)) for _ in range(WRITERS)]
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(WRITERS)

    def worker(index: int) -> None:
        order = list(apps)
        random.Random(index).shuffle(order)
        mine = []
        barrier.wait()
        for app in order:
            begin = time.perf_counter()
            stores[index].memory(app).messages()
            mine.append(time.perf_counter() - begin)
        with lock:
            latencies.extend(mine)

    log(f"compare: cold-start storm ({WRITERS} clients x {len(apps):,} apps) ...")
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # a miss is a rebuild from SQL (the store's own counter, not a patched method)
    rebuilt = [store.metrics()["cache_misses"] for store in stores]
    for store in stores:
        store.close()
    per_app = sum(rebuilt) / len(apps)
    ordered = sorted(latencies)
    p99 = ordered[max(0, -(-99 * len(ordered) // 100) - 1)]
    measure = f"storm: {WRITERS} clients, {len(apps):,} apps, Redis flushed"
    res.rows.append(
        [
            measure,
            "memstore first reads",
            ms(Sample(tuple(latencies)).median),
            ms(Sample(tuple(latencies)).p95),
            str(len(latencies)),
            "",
            f"p99 {ms(p99)}",
        ]
    )
    res.check(
        measure,
        "rebuilds per app",
        f"<= {STORM_REBUILDS_PER_APP}",
        per_app,
        per_app <= STORM_REBUILDS_PER_APP,
    )


# -- entry point --------------------------------------------------------------------------------


def versions() -> str:
    out = []
    for dist in (
        "sqlalchemy",
        "psycopg",
        "asyncpg",
        "aiosqlite",
        "redis",
        "hiredis",
        "pydantic",
        "openai-agents",
        "langchain-community",
        "orjson",
    ):
        try:
            from importlib.metadata import version

            out.append(f"{dist} {version(dist)}")
        except Exception:
            continue
    return ", ".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--tiny", action="store_true", help="seconds-long smoke run")
    parser.add_argument(
        "--measures",
        default=",".join(MEASURES),
        help=f"comma-separated subset of: {','.join(MEASURES)} (default: all)",
    )
    args = parser.parse_args(argv)
    options = options_from(args)
    measures = [name.strip() for name in args.measures.split(",") if name.strip()]
    unknown = sorted(set(measures) - set(MEASURES))
    if unknown or not measures:
        parser.error(f"--measures: unknown {unknown}; choose from {','.join(MEASURES)}")
    plan = TINY if args.tiny else (QUICK if options.quick else FULL)
    started = time.perf_counter()
    report = run(options, log=log_to_stderr, plan=plan, measures=measures)
    print(
        f"## compare ({'tiny' if args.tiny else 'quick' if options.quick else 'full'} run, "
        f"{time.perf_counter() - started:.0f} s)\n"
    )
    print(f"Machine: {machine_notes()}; {versions()}.\n")
    print(report.render())
    if args.tiny:  # a smoke run: the targets are sized for full data and judged there only
        print("\n(tiny run: targets are not judged; exit 0 means every measure ran)")
        return 0
    return exit_status(report.checks)


if __name__ == "__main__":
    raise SystemExit(main())
