"""The soak's controller: sets up the run, starts the workers, injects the faults on a seeded
schedule, then hands the logs and the database's rows to the checker and cleans up.

Set-up: a private ``redis-server`` on a free loopback port (restarted by the faults), a
:class:`~tests.integration.tcp_proxy.CommitCutter` in front of the shared PostgreSQL or
MariaDB server (every worker connects through it), and app ids unique to the run (purged at
the end). Faults, each a fixed number of times at seeded offsets, never two at once:

* ``kill``: every database connection of the soak is killed (PostgreSQL:
  ``pg_terminate_backend`` of the backends whose ``application_name`` is the run's; MariaDB:
  ``KILL`` of the connections the proxy opened, found by their client port);
* ``reply_lost`` / ``before_commit``: the next ``COMMIT`` of any worker is cut after the
  server got it (it commits, the reply is lost) or before (it rolls back);
* ``redis_restart``: the private Redis is restarted empty; ``redis_snapshot_restart``: from a
  snapshot taken early in the run (older windows come back);
* ``reload_sigterm`` / ``reload_sigkill``: ``memstore reload APPS --workers 2`` gets SIGTERM,
  or one of its worker processes SIGKILL, while its workers run; the command and everything
  it started must be gone within seconds;
* one worker's id clock runs ``skew_ms`` behind the wall clock for the whole run.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from memstore import MemoryStore, Settings
from memstore.core.rows import encode_payload
from memstore.messages import AiMessage, UserMessage, parse_message
from memstore.sql import migrate
from memstore.sql.engine import make_engine
from memstore.sql.schema import display, original
from tests.integration.conftest import RedisServer
from tests.integration.tcp_proxy import CommitCutter
from tests.soak.checker import Findings, check
from tests.soak.keys import message_key

REPO = Path(__file__).resolve().parents[2]
RUN_ENV = "MEMSTORE_TEST_SOAK_RUN"


@dataclass(frozen=True)
class SoakParams:
    workers: int = 4
    duration: float = 30.0
    """Seconds the workers run (after ``startup``)."""
    startup: float = 6.0
    main_apps: int = 6
    prune_apps: int = 2
    purge_apps: int = 2
    pause: float = 0.01
    kills: int = 3
    kill_rounds: int = 5
    """A kill fault kills the soak's connections this many times, 0.1 s apart."""
    reply_lost: int = 3
    before_commit: int = 2
    redis_restarts: int = 1
    redis_snapshot_restarts: int = 1
    reload_sigterms: int = 1
    reload_sigkills: int = 1
    gap: float = 1.0
    """Seconds between the end of one fault and the start of the next, at least."""
    skew_ms: int = 3000
    keep_last: int = 6
    stale_window_max_seconds: float = 2.0
    redis_timeout_seconds: float = 0.5
    reload_max: int = 50
    slack: float = 2.0
    """Seconds added to the staleness bound for scheduling on a loaded machine."""
    cli_reload_at: float | None = 0.4
    """When (a fraction of ``duration``) worker 0 runs ``memstore reload`` once."""
    seed: int = 32
    blind_retry: bool = False
    """A self-check of the soak: workers retry an append in doubt without ``retry_of``, as
    a caller that trusts "nothing was written" would (the checker must find it stored
    twice)."""
    prefill_rows: int = 0
    """Rows written before the start into filler apps of the run (both histories, 100 per
    app), so the soak runs on tables of that size; removed at the end."""

    @property
    def cached_bound(self) -> float:
        return self.redis_timeout_seconds + self.stale_window_max_seconds + self.slack

    @classmethod
    def short(cls) -> SoakParams:
        return cls()

    @classmethod
    def long(cls) -> SoakParams:
        return cls(
            workers=8,
            duration=1800.0,
            startup=15.0,
            main_apps=200,
            prune_apps=20,
            purge_apps=20,
            pause=0.0,
            kills=60,
            reply_lost=60,
            before_commit=30,
            redis_restarts=15,
            redis_snapshot_restarts=15,
            reload_sigterms=10,
            reload_sigkills=10,
            keep_last=200,
            prefill_rows=1_000_000,
        )

    @classmethod
    def from_env(cls) -> SoakParams:
        """Short by default; ``MEMSTORE_TEST_SOAK_LONG=1`` the long form;
        ``MEMSTORE_TEST_SOAK_SECONDS`` scales the chosen form's duration and fault counts to
        that many seconds."""
        params = cls.long() if os.environ.get("MEMSTORE_TEST_SOAK_LONG") == "1" else cls.short()
        seconds = os.environ.get("MEMSTORE_TEST_SOAK_SECONDS")
        return params.scaled(float(seconds)) if seconds else params

    def scaled(self, seconds: float) -> SoakParams:
        """The same mix over ``seconds``: fault counts scale with the duration (at least one
        of each)."""
        factor = seconds / self.duration

        def count(n: int) -> int:
            return max(1, round(n * factor))

        return replace(
            self,
            duration=seconds,
            kills=count(self.kills),
            reply_lost=count(self.reply_lost),
            before_commit=count(self.before_commit),
            redis_restarts=count(self.redis_restarts),
            redis_snapshot_restarts=count(self.redis_snapshot_restarts),
            reload_sigterms=count(self.reload_sigterms),
            reload_sigkills=count(self.reload_sigkills),
        )


@dataclass
class SoakResult:
    findings: Findings
    faults: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def violations(self) -> list[str]:
        return self.findings.violations


def schedule(params: SoakParams) -> list[tuple[float, str]]:
    """The faults' offsets (seconds after the start) and kinds: seeded, evenly spread over
    5-85 % of the run with some jitter, a snapshot first."""
    kinds = (
        ["kill"] * params.kills
        + ["reply_lost"] * params.reply_lost
        + ["before_commit"] * params.before_commit
        + ["redis_restart"] * params.redis_restarts
        + ["redis_snapshot_restart"] * params.redis_snapshot_restarts
        + ["reload_sigterm"] * params.reload_sigterms
        + ["reload_sigkill"] * params.reload_sigkills
    )
    rng = random.Random(params.seed)
    rng.shuffle(kinds)
    span = params.duration * 0.75
    gap = span / len(kinds)
    events = [(params.duration * 0.05, "snapshot")]
    for n, kind in enumerate(kinds):
        events.append((params.duration * 0.1 + gap * n + rng.uniform(0, gap * 0.3), kind))
    return events


class Faults:
    def __init__(
        self,
        db: str,
        admin: sa.Engine,
        cutter: SoakCutter,
        redis: RedisServer,
        run: str,
        params: SoakParams,
        reload_command: tuple[list[str], dict[str, str]],
    ) -> None:
        self.db = db
        self.params = params
        self.run = run
        self.reload_command = reload_command
        self.reloads = 0
        self.admin = admin
        self.cutter = cutter
        self.redis = redis
        self.app_name = f"memstore-soak-{run}"
        self.snapshot = redis.workdir / "snapshot.rdb"

    def apply(self, kind: str) -> dict[str, Any]:
        if kind == "kill":
            victims = 0
            for _ in range(self.params.kill_rounds):
                victims += self.kill()
                time.sleep(0.1)
            return {"victims": victims}
        if kind in ("reload_sigterm", "reload_sigkill"):
            return self.signal_reload(kind)
        if kind in ("reply_lost", "before_commit"):
            before = self.cutter.cuts
            self.cutter.arm(kind)
            deadline = time.monotonic() + 10
            while self.cutter.cuts == before and time.monotonic() < deadline:
                time.sleep(0.01)
            fired = self.cutter.cuts > before
            if not fired:
                self.cutter._armed = None  # no commit came: disarm (the test reports it)
            return {"fired": fired}
        if kind == "snapshot":
            with self.redis.client() as client:
                client.save()
            shutil.move(self.redis.workdir / "dump.rdb", self.snapshot)
            return {}
        self.redis.stop()
        dump = self.redis.workdir / "dump.rdb"
        dump.unlink(missing_ok=True)
        if kind == "redis_snapshot_restart":
            shutil.copy(self.snapshot, dump)
        self.redis.start()
        return {}

    def signal_reload(self, kind: str) -> dict[str, Any]:
        """``memstore reload APPS --workers 2``, signalled once its worker processes run:
        SIGTERM to the command, or SIGKILL to one of its workers. The command and every
        process it started must be gone within seconds."""
        self.reloads += 1
        marker = f"{self.run}/reload-{self.reloads}"
        argv, env = self.reload_command
        child = subprocess.Popen(
            argv,
            env={**env, RUN_ENV: marker},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        workers: list[int] = []
        while child.poll() is None and not workers and time.monotonic() < deadline:
            workers = [p for p in marked(marker, exact=True) if _is_pool_worker(p)]
            time.sleep(0.02)
        if child.poll() is None:
            if kind == "reload_sigterm":
                child.send_signal(signal.SIGTERM)
            elif workers:
                os.kill(workers[0], signal.SIGKILL)
        try:
            code: int | None = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        ended = time.monotonic()
        while marked(marker, exact=True) and time.monotonic() < ended + 10:
            time.sleep(0.05)
        left = marked(marker, exact=True)
        for pid in left:  # recorded as a violation; never left running
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if code is None:
            child.kill()
            child.wait()
        return {"signalled_mid_run": bool(workers), "exit": code, "left": left}

    def kill(self) -> int:
        with self.admin.connect() as conn:
            if self.db == "postgres":
                killed = conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = :name"
                    ),
                    {"name": self.app_name},
                ).all()
                return len(killed)
            ports = self.cutter.upstream_ports()
            victims = 0
            for conn_id, host in conn.execute(
                sa.text("SELECT ID, HOST FROM information_schema.PROCESSLIST")
            ).all():
                port = str(host).rsplit(":", 1)[-1]
                if port.isdigit() and int(port) in ports:
                    try:
                        conn.exec_driver_sql(f"KILL {int(conn_id)}")
                        victims += 1
                    except sa.exc.DBAPIError:
                        pass  # it ended meanwhile
            return victims


class SoakCutter(CommitCutter):
    def upstream_ports(self) -> set[int]:
        """The client ports of the proxy's connections to the server (what the server's
        process list shows as the client's port)."""
        with self._lock:
            sockets = list(self._open[1::2])
        ports = set()
        for sock in sockets:
            with contextlib.suppress(OSError):  # closed meanwhile
                ports.add(sock.getsockname()[1])
        return ports


def _proxied_url(server_url: str, cutter: CommitCutter, run: str) -> str:
    url = make_url(server_url).set(host="127.0.0.1", port=cutter.port)
    if url.get_backend_name() == "postgresql":  # COMMIT must be visible; backends findable
        url = url.update_query_dict(
            {"sslmode": "disable", "application_name": f"memstore-soak-{run}"}
        )
    return url.render_as_string(hide_password=False)


def marked(run: str, exact: bool = False) -> list[int]:
    """Live processes (other than this one) whose environment carries the run's marker
    (``exact``: that marker, else also the markers of the commands the run started)."""
    marker = f"{RUN_ENV}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            continue  # exited; its parent reaps it
        if any(v == marker or (not exact and v.startswith(marker + b"/")) for v in variables):
            found.append(int(entry.name))
    return found


def _is_pool_worker(pid: int) -> bool:
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def run_soak(db: str, server_url: str, params: SoakParams, workdir: Path) -> SoakResult:
    """One soak against ``server_url`` (``db``: ``postgres`` or ``mysql``)."""
    run = uuid.uuid4().hex[:10]
    apps = {
        "main": [f"soak-{run}-m{n}" for n in range(params.main_apps)],
        "prune": [f"soak-{run}-p{n}" for n in range(params.prune_apps)],
        "purge": [f"soak-{run}-x{n}" for n in range(params.purge_apps)],
    }
    every_app = [app for group in apps.values() for app in group]
    engine = make_engine(server_url)
    migrate.upgrade(engine)
    fillers = prefill(engine, run, params.prefill_rows)
    admin = sa.create_engine(make_url(server_url), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    server = make_url(server_url)
    (workdir / "redis").mkdir(parents=True, exist_ok=True)
    redis = RedisServer(workdir / "redis")
    redis.start()
    cutter = SoakCutter(server.host or "127.0.0.1", server.port or 0)
    url = _proxied_url(server_url, cutter, run)
    start_at = time.time() + params.startup
    env = {
        **os.environ,
        RUN_ENV: run,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    workers: list[tuple[subprocess.Popen[bytes], Path]] = []
    faults: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    violations: list[str] = []
    try:
        for index in range(params.workers):
            cfg = {
                "index": index,
                "run": run,
                "seed": params.seed,
                "database_url": url,
                "redis_url": redis.url,
                "apps": apps,
                "start_at": start_at,
                "duration": params.duration,
                "pause": params.pause,
                "skew_ms": params.skew_ms if index == 1 else 0,
                "keep_last": params.keep_last,
                "stale_window_max_seconds": params.stale_window_max_seconds,
                "redis_timeout_seconds": params.redis_timeout_seconds,
                "reload_max": params.reload_max,
                "cli_reload_at": (
                    params.cli_reload_at * params.duration
                    if index == 0 and params.cli_reload_at is not None
                    else None
                ),
                "log": str(workdir / f"worker-{index}.jsonl"),
                "blind_retry": params.blind_retry,
            }
            config = workdir / f"worker-{index}.json"
            config.write_text(json.dumps(cfg))
            err = workdir / f"worker-{index}.err"
            with err.open("wb") as stderr:
                child = subprocess.Popen(
                    [sys.executable, "-m", "tests.soak.worker", str(config)],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            workers.append((child, err))
        reload_env = {
            **env,
            "MEMSTORE_DATABASE_URL": url,
            "MEMSTORE_REDIS_URL": redis.url,
            "MEMSTORE_STALE_WINDOW_MAX_SECONDS": str(params.stale_window_max_seconds),
        }
        reload_argv = [sys.executable, "-m", "memstore", "reload", *apps["main"], "--workers", "2"]
        injector = Faults(db, admin, cutter, redis, run, params, (reload_argv, reload_env))
        done_at = 0.0
        for offset, kind in schedule(params):
            # one fault at a time, and a pause after each (a late one waits)
            time.sleep(
                max(0.0, start_at + offset - time.time(), done_at + params.gap - time.time())
            )
            at = time.time() - start_at
            outcome = injector.apply(kind)
            done_at = time.time()
            faults.append(
                {
                    "kind": kind,
                    "at": round(at, 2),
                    "took": round(done_at - at - start_at, 2),
                    **outcome,
                }
            )
        for child, err in workers:
            left = start_at + params.duration + 120 - time.time()
            try:
                child.wait(timeout=max(1.0, left))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                violations.append(f"worker {child.pid} did not finish in time")
            if child.returncode != 0:
                tail = err.read_text(errors="replace")[-3000:]
                violations.append(f"worker {child.pid} exited {child.returncode}:\n{tail}")
    finally:
        for child, _ in workers:
            if child.poll() is None:
                child.kill()
                child.wait()
        cutter.close()
        redis.stop()
    for index in range(params.workers):
        log = workdir / f"worker-{index}.jsonl"
        if log.exists():
            records += [json.loads(line) for line in log.read_text().splitlines() if line]
    checker_store = MemoryStore(Settings(database_url=server_url, redis_url=None))
    try:
        stored: dict[str, list[tuple[int, str | None]]] = {app: [] for app in every_app}
        for rec in checker_store.export(app_ids=every_app):
            if rec["record"] == "original":
                stored[rec["app_id"]].append(
                    (rec["id"], message_key(parse_message(rec["message"])))
                )
        findings = check(records, stored, params.cached_bound)
        behind = marked(run)
        if behind:
            violations.append(f"processes left behind: {behind}")
        for pid in behind:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        table_rows = _table_rows(engine)
        for app in every_app:
            checker_store.purge(app)
    finally:
        remove_prefill(engine, fillers)
        checker_store.close()
        admin.dispose()
        engine.dispose()
    findings.violations[:0] = violations
    lingering = [f for f in faults if f.get("left")]
    if lingering:
        findings.violations.append(f"reload processes outlived their command: {lingering}")
    unfired = [f for f in faults if f.get("fired") is False]
    if unfired:
        findings.violations.append(f"faults that never fired: {unfired}")
    figures = {
        "database": db,
        "server_version": _server_version(server_url),
        "redis": _redis_version(),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "params": asdict(params),
        "faults": dict(_count(f["kind"] for f in faults)),
        "connections_killed": sum(f.get("victims", 0) for f in faults),
        "commits_cut": cutter.cuts,
        "prefill_rows": params.prefill_rows,
        "original_rows_at_end": table_rows,
        **findings.stats,
    }
    return SoakResult(findings, faults, figures)


PREFILL_PER_APP = 100
PREFILL_BATCH = 5_000


def prefill(engine: sa.Engine, run: str, rows: int) -> list[str]:
    """Write ``rows`` rows (user and AI messages alternating, ``PREFILL_PER_APP`` per filler
    app) into both histories in batches, with ids far below any snowflake id; the filler
    apps' ids."""
    if rows <= 0:
        return []
    now = datetime.now(timezone.utc)
    base = random.randrange(10**12, 10**13)
    payloads = [
        encode_payload(UserMessage(text="filler question " + "x" * 60)),
        encode_payload(AiMessage(text="filler answer " + "y" * 200)),
    ]
    fillers = [f"soak-{run}-fill{n}" for n in range(-(-rows // PREFILL_PER_APP))]
    batch_original: list[dict[str, Any]] = []
    batch_display: list[dict[str, Any]] = []

    def flush() -> None:
        with engine.begin() as conn:
            conn.execute(original.insert(), batch_original)
            conn.execute(display.insert(), batch_display)
        batch_original.clear()
        batch_display.clear()

    for n in range(rows):
        app = fillers[n // PREFILL_PER_APP]
        kind = n % 2
        common = {
            "id": base + n,
            "app_id": app,
            "user_id": f"soak-{run}-fill-user",
            "created_at": now,
            "updated_at": now,
            "is_deleted": False,
        }
        batch_original.append(
            {
                **common,
                "message_type": ("user", "ai")[kind],
                "tool_call_id": None,
                "payload": payloads[kind],
            }
        )
        batch_display.append(
            {**common, "role": ("user", "ai")[kind], "content": "filler", "status": "ok"}
        )
        if len(batch_original) >= PREFILL_BATCH:
            flush()
    if batch_original:
        flush()
    return fillers


def remove_prefill(engine: sa.Engine, fillers: list[str]) -> None:
    for start in range(0, len(fillers), 500):
        part = fillers[start : start + 500]
        with engine.begin() as conn:
            conn.execute(original.delete().where(original.c.app_id.in_(part)))
            conn.execute(display.delete().where(display.c.app_id.in_(part)))


def _table_rows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(original)).scalar_one())


def _count(kinds: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _server_version(server_url: str) -> str:
    engine = sa.create_engine(make_url(server_url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SELECT version()").scalar())
    finally:
        engine.dispose()


def _redis_version() -> str:
    from tests.integration.conftest import REDIS_SERVER

    done = subprocess.run(
        [str(REDIS_SERVER), "--version"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip().split(" sha=")[0]
