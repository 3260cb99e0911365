"""Shared pieces of the benchmarks: options, scratch databases, a private Redis, timing,
Markdown tables and the ``main()`` of a benchmark module (:func:`run_main`)."""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from memstore.sql import migrate
from memstore.sql.engine import make_engine

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/memstore_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
DATABASES = ("sqlite", "postgres")

Log = Callable[[str], None]
"""Where a benchmark writes its progress lines."""


@dataclass(frozen=True)
class Options:
    quick: bool
    databases: tuple[str, ...]
    postgres_url: str
    redis_url: str
    seed: int
    profile: bool


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer repetitions")
    parser.add_argument(
        "--databases",
        default=",".join(DATABASES),
        help="comma-separated subset of: sqlite,postgres (default: both)",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("MEMSTORE_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="scratch PostgreSQL database (created if missing); each run uses its own schema",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("MEMSTORE_BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis for the hot-read benchmark (only its own unique keys are touched)",
    )
    parser.add_argument("--seed", type=int, default=20240101, help="data generator seed")
    parser.add_argument(
        "--profile", action="store_true", help="also print a cProfile of the hot read path"
    )


def options_from(args: argparse.Namespace) -> Options:
    databases = tuple(name.strip() for name in args.databases.split(",") if name.strip())
    unknown = sorted(set(databases) - set(DATABASES))
    if unknown or not databases:
        raise SystemExit(f"--databases: unknown {unknown}; choose from {','.join(DATABASES)}")
    return Options(
        quick=args.quick,
        databases=databases,
        postgres_url=args.postgres_url,
        redis_url=args.redis_url,
        seed=args.seed,
        profile=args.profile,
    )


def parse_options(argv: Sequence[str] | None, description: str) -> Options:
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser)
    return options_from(parser.parse_args(argv))


# -- scratch databases --------------------------------------------------------------------------


def ensure_postgres_database(url: str) -> None:
    """Create the database of ``url`` when it does not exist (via the ``postgres`` database)."""
    import psycopg
    from psycopg import sql

    parsed = make_url(url)
    name = parsed.database
    if not name:
        raise SystemExit(f"--postgres-url needs a database name: {url}")
    conninfo = parsed.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            with suppress(psycopg.errors.DuplicateDatabase):  # created concurrently
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@contextmanager
def scratch_database(name: str, options: Options, label: str) -> Iterator[str]:
    """A migrated, empty memstore database for one benchmark; removed afterwards.

    SQLite: a file in a temporary directory. PostgreSQL: a fresh schema named after the run
    inside the scratch database (selected with ``search_path``), dropped at the end.
    """
    if name == "sqlite":
        directory = Path(tempfile.mkdtemp(prefix=f"memstore-bench-{label}-"))
        url = f"sqlite:///{directory / 'bench.db'}"
        try:
            _migrate(url)
            yield url
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return
    ensure_postgres_database(options.postgres_url)
    schema = f"bench_{label}_{uuid.uuid4().hex[:10]}"
    admin = make_engine(options.postgres_url)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        url = (
            make_url(options.postgres_url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
        _migrate(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def _migrate(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate.upgrade(engine)
    finally:
        engine.dispose()


def analyze(engine: Engine) -> None:
    """Refresh planner statistics after a bulk load (what autovacuum/ANALYZE would do)."""
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(sa.text("ANALYZE"))
        else:
            conn.execute(sa.text("ANALYZE chat_history_original"))
    if engine.dialect.name == "postgresql":
        # Vacuum now (outside a transaction, as VACUUM requires) so autovacuum does not start
        # on the freshly loaded table in the middle of the measurements.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM chat_history_original"))


# -- a private Redis ----------------------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def private_redis() -> Iterator[str | None]:
    """A throw-away ``redis-server`` on a free loopback port (``None`` when not installed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    directory = tempfile.mkdtemp(prefix="memstore-bench-redis-")
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


# -- timing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """Wall-clock durations of repeated calls, in seconds."""

    seconds: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        ordered = sorted(self.seconds)
        # nearest-rank percentile: the smallest value with >= 95 % of samples at or below it
        rank = max(1, -(-95 * len(ordered) // 100))
        return ordered[rank - 1]


def time_calls(
    call: Callable[[], object],
    *,
    warmup: int,
    min_runs: int,
    max_runs: int,
    budget_seconds: float,
) -> Sample:
    """Time ``call`` after ``warmup`` untimed calls: at least ``min_runs`` runs, then more
    until ``max_runs`` or ``budget_seconds`` of measuring is used up."""
    for _ in range(warmup):
        call()
    gc.collect()
    durations: list[float] = []
    started = time.perf_counter()
    while len(durations) < max_runs:
        if len(durations) >= min_runs and time.perf_counter() - started > budget_seconds:
            break
        begin = time.perf_counter()
        call()
        durations.append(time.perf_counter() - begin)
    return Sample(tuple(durations))


def time_interleaved(
    calls: Sequence[Callable[[], object]], *, warmup: int, rounds: int, gc_off: bool = False
) -> list[Sample]:
    """Time several calls in alternating rounds, so background load hits them all alike.

    ``warmup`` untimed rounds first; with ``gc_off`` the garbage collector is disabled while
    timing (for calls of a few microseconds, where one collection is larger than the call)."""
    for _ in range(warmup):
        for call in calls:
            call()
    gc.collect()
    if gc_off:
        gc.disable()
    try:
        durations: list[list[float]] = [[] for _ in calls]
        order = list(range(len(calls)))
        for round_index in range(rounds):
            shift = round_index % len(order)
            for index in order[shift:] + order[:shift]:
                begin = time.perf_counter()
                calls[index]()
                durations[index].append(time.perf_counter() - begin)
    finally:
        if gc_off:
            gc.enable()
    return [Sample(tuple(values)) for values in durations]


# -- output -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One target: ``what`` (e.g. a ratio) measured on ``scope`` against ``target``."""

    scope: str
    what: str
    target: str
    measured: str
    passed: bool


@dataclass
class Report:
    """What one benchmark prints: Markdown blocks (tables and notes) and its checks."""

    title: str
    blocks: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    def render(self) -> str:
        return "\n\n".join([f"### {self.title}", *self.blocks])


def checks_table(checks: Sequence[Check]) -> str:
    return markdown_table(
        ["scope", "ratio", "target", "measured", "result"],
        [[c.scope, c.what, c.target, c.measured, verdict(c.passed)] for c in checks],
        align="llrrl",
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A GitHub Markdown table; ``align`` holds one of ``l``/``r`` per column (default ``r``
    except the first column)."""
    spec = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if side == "r" else "---" for side in spec]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(rule) + " |",
    ]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def ms(seconds: float) -> str:
    value = seconds * 1000
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f}"


def ratio(value: float) -> str:
    return f"{value:,.0f}x" if value >= 100 else f"{value:.2f}x"


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def machine_notes() -> str:
    """One line describing where the numbers come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}"
    )


# -- main ---------------------------------------------------------------------------------------


def log_to_stderr(line: str) -> None:
    """Progress lines go to stderr, so stdout holds only the tables."""
    print(line, file=sys.stderr, flush=True)


def exit_status(checks: Sequence[Check]) -> int:
    """0 when every target is met, else 1."""
    return 0 if all(check.passed for check in checks) else 1


def run_main(
    run: Callable[[Options, Log], Report], argv: Sequence[str] | None, description: str
) -> int:
    """The ``main()`` of a benchmark module: parse the common options, run it (progress on
    stderr), print its report; the exit status says whether every target was met."""
    options = parse_options(argv, description)
    report = run(options, log_to_stderr)
    print(report.render())
    return exit_status(report.checks)
