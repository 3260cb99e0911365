"""Peak memory of ``memstore reload --all`` and ``memstore check --all`` as the app count grows.

Builds two SQLite databases in a temporary directory: the target one with N apps of M
messages each (default 10,000 x 100 = 1,000,000 rows; ``--quick``: 1,000 x 100) and the
baseline one with the first N/10 of the same apps (identical rows and ids). Histories are the
realistic turns of :mod:`benchmarks.dataset` (tool rounds with 1-3 parallel calls, log-normal
text sizes), turns of 500 apps at a time interleaved by id. Every 100th app is corrupted (an
unanswered tool request, an orphan tool result, two user messages in a row), so ``check`` has
findings and ``reload``'s edge check has something to answer and skip.

Then the real console commands run as subprocesses, each once per database::

    python -m memstore reload --all --database-url sqlite:///...
    python -m memstore check --all --database-url sqlite:///...

and ``python -c "import memstore.cli"`` gives the import floor. "Flat memory" means: peak RSS
with N apps is at most 1.25x the peak RSS with N/10 apps, per command.

    python -m benchmarks.cli_all [--quick] [--apps N] [--messages M] [--redis-url URL]

Without ``--redis-url`` the commands use the in-process window cache (no ``MEMSTORE_*``
variable of this shell reaches them). With it they use that Redis, forced to db 14; the keys
of the benchmark's apps (a unique id prefix per run) are deleted afterwards, nothing is
flushed.

How peak RSS is measured: every command runs under a fresh, small intermediate Python process
that starts it and reaps it with ``os.wait4(pid)``, which returns the ``ru_maxrss`` of that
one child (Linux: KiB). ``getrusage(RUSAGE_CHILDREN)`` in this process would be a maximum over
*all* children so far, hence useless after the first, large one. Linux also carries the
parent's high-water RSS into a child across ``fork``/``vfork`` + ``exec`` (``exec_mmap``
records the old mm's peak in ``signal->maxrss``), so a child started directly from this
process (~110 MiB after loading the rows) would report at least this process's peak; the
intermediate's is ~14 MiB, far below any measured command, and is printed as the "floor" of
the method. As a cross-check the intermediate also polls
``VmHWM`` in ``/proc/<pid>/status`` every 50 ms (a lower bound: the last ~50 ms are missed).

Progress goes to stderr, the Markdown report to stdout; exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy.engine import make_url

import memstore
from benchmarks.common import (
    Check,
    Options,
    Report,
    analyze,
    checks_table,
    machine_notes,
    markdown_table,
    ratio,
    scratch_database,
)
from benchmarks.dataset import BENCH_WORKER_ID, AppPlan, TextSource, TurnMaker
from memstore.core.rows import original_row
from memstore.ids import EPOCH_MS, SnowflakeGenerator, id_timestamp_ms
from memstore.messages import Message, ToolResult, UserMessage
from memstore.sql.engine import make_engine
from memstore.sql.schema import original

FULL_APPS = 10_000
QUICK_APPS = 1_000
MESSAGES_PER_APP = 100
BASELINE_DIVISOR = 10
FLAT_TARGET = 1.25
"""peak RSS with N apps / peak RSS with N/10 apps must be at most this, per command."""
BLOCK_APPS = 500
"""Apps whose turns are interleaved by id (the rest of the table is written block by block)."""
CORRUPT_EVERY = 100
CORRUPT_OFFSET = 42
INSERT_BATCH_ROWS = 20_000
REDIS_DB = 14
COMMAND_TIMEOUT_SECONDS = 3_600
POLL_SECONDS = 0.05

# The intermediate process: start the command, reap exactly it with wait4, report its rusage.
_MEASURE = r"""
import json, os, resource, subprocess, sys, time

def vmhwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0

poll, out_path, err_path, *command = sys.argv[1:]
with open(out_path, "wb") as out, open(err_path, "wb") as err:
    started = time.perf_counter()
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    polled_kib = 0
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        polled_kib = max(polled_kib, vmhwm_kib(child.pid))
        time.sleep(float(poll))
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps({
    "exit": child.returncode,
    "wall_seconds": wall,
    "maxrss_kib": usage.ru_maxrss,
    "polled_hwm_kib": polled_kib,
    "floor_kib": vmhwm_kib("self"),
    "inherited_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "user_seconds": usage.ru_utime,
    "system_seconds": usage.ru_stime,
}))
"""


@dataclass(frozen=True)
class Config:
    apps: int
    messages: int
    redis_url: str | None
    seed: int
    quick: bool

    @property
    def baseline_apps(self) -> int:
        return max(1, self.apps // BASELINE_DIVISOR)


@dataclass(frozen=True)
class Measurement:
    label: str
    apps: int
    rows: int
    command: str
    exit: int
    wall_seconds: float
    cpu_seconds: float
    peak_kib: int
    polled_kib: int
    floor_kib: int
    inherited_kib: int
    stdout: str
    stderr: str

    @property
    def peak_mib(self) -> float:
        return self.peak_kib / 1024


@dataclass
class Loaded:
    """What went into the two databases."""

    rows: dict[str, int] = field(default_factory=dict)
    corrupted: dict[str, list[str]] = field(default_factory=dict)
    bytes_on_disk: dict[str, int] = field(default_factory=dict)


# -- data -----------------------------------------------------------------------------------


def app_name(run_id: str, index: int) -> str:
    return f"bench-cli-{run_id}-{index:06d}"


def is_corrupted(index: int) -> bool:
    return index % CORRUPT_EVERY == CORRUPT_OFFSET


def corrupt(messages: list[Message], index: int) -> list[Message]:
    """The app's history with three provider-invalid spots (what ``check`` must report).

    The newest tool result is dropped (an unanswered request, answered by ``reload``'s edge
    check), an orphan result goes just before the newest user message (skipped by ``reload``),
    and the first user message is doubled (two user messages in a row).
    """
    out = list(messages)
    results = [i for i, message in enumerate(out) if isinstance(message, ToolResult)]
    if results:
        del out[results[-1]]
    users = [i for i, message in enumerate(out) if isinstance(message, UserMessage)]
    orphan = ToolResult(id=f"call_orphan_{index}", tool_name="read_file", text="stale output")
    out.insert(users[-1] if users else len(out), orphan)
    if users:
        out.insert(users[0], out[users[0]])
    return out


def app_turns(
    index: int, run_id: str, config: Config, maker: TurnMaker, texts: TextSource
) -> Iterator[list[Message]]:
    plan = AppPlan(
        app_name(run_id, index),
        config.messages,
        f"{config.seed}-cli-{index}",
        user_id=f"user-{index % 997}",
    )
    if not is_corrupted(index):
        yield from plan.turns(maker, texts)
        return
    yield corrupt([m for turn in plan.turns(maker, texts) for m in turn], index)


def generate_rows(config: Config, run_id: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(app index, original row)`` of every app, ids increasing; within each block of
    ``BLOCK_APPS`` apps the turns are interleaved in a random order, round by round."""
    texts = TextSource(config.seed)
    maker = TurnMaker(texts)
    order = random.Random(f"{config.seed}-cli-order")
    clock_rng = random.Random(f"{config.seed}-cli-clock")
    now_ms = EPOCH_MS + 86_400_000

    def clock() -> int:
        nonlocal now_ms
        now_ms += clock_rng.randint(1, 500)
        return now_ms

    ids = SnowflakeGenerator(BENCH_WORKER_ID, clock=clock)
    for first in range(0, config.apps, BLOCK_APPS):
        block = range(first, min(first + BLOCK_APPS, config.apps))
        streams = {index: app_turns(index, run_id, config, maker, texts) for index in block}
        active = list(block)
        while active:
            order.shuffle(active)
            still: list[int] = []
            for index in active:
                turn = next(streams[index], None)
                if turn is None:
                    continue
                still.append(index)
                app = app_name(run_id, index)
                user = f"user-{index % 997}"
                for row_id, message in zip(ids.next_ids(len(turn)), turn, strict=True):
                    created = datetime.fromtimestamp(
                        id_timestamp_ms(row_id) / 1000, tz=timezone.utc
                    )
                    yield index, original_row(row_id, app, user, message, created)
            active = still


def build(urls: dict[str, str], config: Config, run_id: str, log: Callable[[str], None]) -> Loaded:
    """Fill the ``target`` database with every app and ``baseline`` with the first N/10."""
    engines = {label: make_engine(url) for label, url in urls.items()}
    limits = {"target": config.apps, "baseline": config.baseline_apps}
    batches: dict[str, list[dict[str, Any]]] = {label: [] for label in engines}
    loaded = Loaded(rows={label: 0 for label in engines})
    loaded.corrupted = {
        label: [app_name(run_id, i) for i in range(limits[label]) if is_corrupted(i)]
        for label in engines
    }

    def flush(label: str) -> None:
        with engines[label].begin() as conn:
            conn.execute(original.insert(), batches[label])
        loaded.rows[label] += len(batches[label])
        batches[label].clear()

    started = time.perf_counter()
    try:
        for index, row in generate_rows(config, run_id):
            for label, batch in batches.items():
                if index < limits[label]:
                    batch.append(row)
                    if len(batch) >= INSERT_BATCH_ROWS:
                        flush(label)
            done = loaded.rows["target"]
            if done and done % 200_000 == 0 and not batches["target"]:
                log(f"cli_all: {done:,} rows in {time.perf_counter() - started:.0f} s ...")
        for label, batch in batches.items():
            if batch:
                flush(label)
        for label, engine in engines.items():
            analyze(engine)
            with engine.begin() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            database = engine.url.database or ""
            loaded.bytes_on_disk[label] = os.path.getsize(database) if database else 0
    finally:
        for engine in engines.values():
            engine.dispose()
    return loaded


# -- measuring ------------------------------------------------------------------------------


def child_environment() -> dict[str, str]:
    """This environment without ``MEMSTORE_*`` (so the defaults hold) and with this checkout's
    ``memstore`` first on the path (not whatever copy happens to be installed)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEMSTORE_")}
    root = str(Path(memstore.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(part for part in (root, env.get("PYTHONPATH", "")) if part)
    return env


def measure(
    label: str,
    apps: int,
    rows: int,
    command: str,
    argv: Sequence[str],
    scratch: Path,
    env: dict[str, str],
) -> Measurement:
    """Run ``argv`` under a fresh intermediate process; its exact peak RSS and wall time."""
    gc.collect()
    stem = f"{label}-{command.split()[0]}-{uuid.uuid4().hex[:6]}"
    out_path, err_path = scratch / f"{stem}.out", scratch / f"{stem}.err"
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(POLL_SECONDS), str(out_path), str(err_path), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring {command!r} failed: {done.stderr.strip()}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(
        label=label,
        apps=apps,
        rows=rows,
        command=command,
        exit=int(data["exit"]),
        wall_seconds=float(data["wall_seconds"]),
        cpu_seconds=float(data["user_seconds"]) + float(data["system_seconds"]),
        peak_kib=int(data["maxrss_kib"]),
        polled_kib=int(data["polled_hwm_kib"]),
        floor_kib=int(data["floor_kib"]),
        inherited_kib=int(data["inherited_kib"]),
        stdout=out_path.read_text(encoding="utf-8", errors="replace"),
        stderr=err_path.read_text(encoding="utf-8", errors="replace"),
    )


def redis_db14(url: str) -> str:
    """``url`` pointing at db 14 (added when the URL names no database; others refused)."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if path and path != str(REDIS_DB):
        raise SystemExit(f"--redis-url: this benchmark only writes to Redis db {REDIS_DB}: {url}")
    return urlunsplit(parts._replace(path=f"/{REDIS_DB}"))


def delete_redis_keys(url: str, run_id: str) -> int:
    """Delete the window, version and interrupted keys of this run's apps (never a flush)."""
    import redis

    client = redis.Redis.from_url(url)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"memstore:{{bench-cli-{run_id}-*}}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += int(client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += int(client.unlink(*batch))
    finally:
        client.close()
    return deleted


# -- checking the commands' output ------------------------------------------------------------

_SUMMARY_APPS = re.compile(r"^apps: (\d+), messages: (\d+)", re.MULTILINE)
_FINDING = re.compile(r"^(\S+): row \d+: (\w+): ", re.MULTILINE)


def reload_ok(result: Measurement) -> tuple[bool, str]:
    match = _SUMMARY_APPS.search(result.stdout)
    if result.exit != 0 or match is None:
        return False, f"exit {result.exit}, no summary: {result.stderr.strip()[-300:]}"
    apps = int(match.group(1))
    return apps == result.apps, f"{apps:,} apps, {int(match.group(2)):,} messages reloaded"


def check_ok(result: Measurement, corrupted: list[str]) -> tuple[bool, str]:
    findings = _FINDING.findall(result.stdout)
    apps = sorted({app for app, _ in findings})
    codes = sorted({code for _, code in findings})
    expected_exit = 1 if corrupted else 0
    passed = result.exit == expected_exit and apps == sorted(corrupted)
    return passed, (
        f"exit {result.exit}, {len(findings)} findings in {len(apps)} apps "
        f"({len(corrupted)} corrupted; codes: {', '.join(codes) or 'none'})"
    )


# -- the benchmark --------------------------------------------------------------------------


def run(config: Config, log: Callable[[str], None] = print) -> Report:
    run_id = uuid.uuid4().hex[:8]
    redis_url = redis_db14(config.redis_url) if config.redis_url else None
    cache = f"Redis db {REDIS_DB}" if redis_url else "in-process cache"
    report = Report(f"cli_all: peak RSS of `reload --all` and `check --all` ({cache}, SQLite)")
    options = Options(
        quick=config.quick,
        databases=("sqlite",),
        postgres_url="",
        redis_url=redis_url or "",
        seed=config.seed,
        profile=False,
    )
    env = child_environment()
    apps = {"baseline": config.baseline_apps, "target": config.apps}
    results: list[Measurement] = []
    deleted_keys: int | None = None
    with (
        scratch_database("sqlite", options, "cli-base") as baseline_url,
        scratch_database("sqlite", options, "cli-target") as target_url,
    ):
        urls = {"baseline": baseline_url, "target": target_url}
        scratch = Path(make_url(target_url).database or ".").parent
        log(
            f"cli_all: building {config.apps:,} + {config.baseline_apps:,} apps x "
            f"{config.messages} messages ..."
        )
        started = time.perf_counter()
        loaded = build(urls, config, run_id, log)
        build_seconds = time.perf_counter() - started
        log(f"cli_all: built in {build_seconds:.0f} s; running the commands ...")
        importing = [sys.executable, "-c", "import memstore.cli"]
        imported = measure("import", 0, 0, "import memstore.cli", importing, scratch, env)
        try:
            for label in ("baseline", "target"):
                for command in ("reload --all", "check --all"):
                    argv = [sys.executable, "-m", "memstore", *command.split()]
                    argv += ["--database-url", urls[label]]
                    if redis_url:
                        argv += ["--redis-url", redis_url]
                    log(f"cli_all: {command} on {apps[label]:,} apps ...")
                    result = measure(
                        label, apps[label], loaded.rows[label], command, argv, scratch, env
                    )
                    log(
                        f"cli_all:   {result.wall_seconds:.1f} s, peak RSS "
                        f"{result.peak_mib:.1f} MiB, exit {result.exit}"
                    )
                    results.append(result)
        finally:
            if redis_url:
                deleted_keys = delete_redis_keys(redis_url, run_id)

    by_key = {(r.label, r.command): r for r in results}
    rows = [
        [
            "-",
            "-",
            imported.command,
            str(imported.exit),
            f"{imported.wall_seconds:.2f}",
            "-",
            f"{imported.peak_mib:.1f}",
            "-",
        ]
    ]
    for r in results:
        base = by_key[("baseline", r.command)]
        rows.append(
            [
                f"{r.apps:,}",
                f"{r.rows:,}",
                f"`{r.command}`",
                str(r.exit),
                f"{r.wall_seconds:.1f}",
                f"{r.apps / r.wall_seconds:,.0f}",
                f"{r.peak_mib:.1f}",
                "1.00x" if r is base else ratio(r.peak_kib / base.peak_kib),
            ]
        )
    notes: list[str] = []
    for command in ("reload --all", "check --all"):
        target, base = by_key[("target", command)], by_key[("baseline", command)]
        growth = target.peak_kib / base.peak_kib
        per_app = (target.peak_kib - base.peak_kib) / (target.apps - base.apps)
        notes.append(
            f"* `{command}`: {per_app:+.2f} KiB of peak RSS per extra app; "
            f"{(target.peak_kib - imported.peak_kib) / 1024:+.1f} MiB over the import floor "
            f"at {target.apps:,} apps ({(base.peak_kib - imported.peak_kib) / 1024:+.1f} MiB "
            f"at {base.apps:,})."
        )
        report.checks.append(
            Check(
                f"`{command}`",
                f"peak RSS @{target.apps:,} / @{base.apps:,} apps",
                f"<= {FLAT_TARGET}x",
                f"{ratio(growth)} ({base.peak_mib:.0f} -> {target.peak_mib:.0f} MiB)",
                growth <= FLAT_TARGET,
            )
        )
    for r in results:
        if r.command.startswith("reload"):
            passed, detail = reload_ok(r)
        else:
            passed, detail = check_ok(r, loaded.corrupted[r.label])
        report.checks.append(
            Check(
                f"`{r.command}` @{r.apps:,}", "output", "all apps, right findings", detail, passed
            )
        )
    low = min((r.peak_kib - r.polled_kib for r in results), default=0) / 1024
    high = max((r.peak_kib - r.polled_kib for r in results), default=0) / 1024
    measured = [imported, *results]
    floor_mib = max(r.floor_kib for r in measured) / 1024
    inherited_mib = max(r.inherited_kib for r in measured) / 1024
    report.blocks.append(
        f"Data: SQLite, {loaded.rows['target']:,} rows ({config.apps:,} apps x "
        f"{config.messages} messages; database {loaded.bytes_on_disk['target'] / 2**20:,.0f} "
        f"MiB) and {loaded.rows['baseline']:,} rows (the first {config.baseline_apps:,} of the "
        f"same apps), built in {build_seconds:.0f} s; every {CORRUPT_EVERY}th app corrupted. "
        f"Cache: {cache}. Each command ran once, as `{Path(sys.executable).name} -m memstore "
        "...`, measured by a fresh intermediate process with `os.wait4` (exact peak RSS of the "
        f"command; method floor {floor_mib:.1f} MiB). Machine: {machine_notes()}."
    )
    report.blocks.append(
        markdown_table(
            ["apps", "rows", "command", "exit", "wall s", "apps/s", "peak RSS MiB", "vs N/10"],
            rows,
            align="rrlrrrrr",
        )
    )
    report.blocks.append(checks_table(report.checks))
    notes.append(
        f"* Cross-check: `wait4` peak minus the `VmHWM` polled every {POLL_SECONDS * 1000:.0f} ms "
        f"= {low:+.1f} to {high:+.1f} MiB. The intermediate's own `VmHWM` was at most "
        f"{floor_mib:.1f} MiB, while its `getrusage(RUSAGE_SELF).ru_maxrss` said "
        f"{inherited_mib:.1f} MiB: the high-water RSS of this benchmark process, carried over "
        "`exec`, which a command started directly from here would report too."
    )
    if deleted_keys is not None:
        notes.append(f"* Redis: deleted {deleted_keys:,} keys of this run's apps afterwards.")
    report.blocks.append("\n".join(notes))
    return report


def parse_config(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cli_all", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_APPS:,} apps instead of {FULL_APPS:,}"
    )
    parser.add_argument("--apps", type=int, default=None, help="apps in the target database")
    parser.add_argument(
        "--messages", type=int, default=MESSAGES_PER_APP, help="messages per app (default 100)"
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help=f"use this Redis (db {REDIS_DB}) instead of the in-process cache",
    )
    parser.add_argument("--seed", type=int, default=20240101, help="data generator seed")
    args = parser.parse_args(argv)
    apps = args.apps if args.apps is not None else (QUICK_APPS if args.quick else FULL_APPS)
    if apps < BASELINE_DIVISOR or args.messages < 1:
        parser.error(f"need --apps >= {BASELINE_DIVISOR} and --messages >= 1")
    return Config(apps, args.messages, args.redis_url, args.seed, args.quick)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    report = run(config, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.render())
    return 0 if all(check.passed for check in report.checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
