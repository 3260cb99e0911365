"""The operator CLI, in-process (click's CliRunner) and once as the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import click
import pytest
import redis
import sqlalchemy as sa
from click.testing import CliRunner

from memstore import (
    AiMessage,
    ConfigurationError,
    MemoryStore,
    Settings,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.cache import keys
from memstore.cli import cli
from memstore.core.rows import original_row
from memstore.core.validate import validate
from memstore.ids import MAX_WORKER_ID, shared_generator
from memstore.sql.schema import display, original
from tests.conftest import POSTGRES_URL, REDIS_URL, redis_client, require_redis

TURN = [
    UserMessage(text="make a file"),
    AiMessage(tool_requests=[ToolRequest(id="c1", name="write", arguments='{"p": 1}')]),
    ToolResult(id="c1", tool_name="write", text="ok"),
    AiMessage(text="done"),
]


@pytest.fixture
def real_redis() -> Iterator[redis.Redis]:
    """A client of the real test Redis, closed after the test."""
    with redis_client() as client:
        yield client


@pytest.fixture(params=["sqlite", "sqlite+redis", "postgres+redis"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The database URL; the ``+redis`` variants also point MEMSTORE_REDIS_URL (which the
    CLI's ``--redis-url`` defaults to) at the real Redis."""
    database, _, cache = request.param.partition("+")
    if cache:
        require_redis()  # skips when MEMSTORE_TEST_REDIS_URL is unset, fails when unreachable
        monkeypatch.setenv("MEMSTORE_REDIS_URL", REDIS_URL or "")
    else:
        monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    if database == "sqlite":
        return f"sqlite:///{tmp_path / 'cli.db'}"
    if not POSTGRES_URL:
        pytest.skip("MEMSTORE_TEST_POSTGRES_URL is not set")
    return POSTGRES_URL


@pytest.fixture
def seeded(db_url: str, app_id: str) -> MemoryStore:
    store = MemoryStore(
        Settings(database_url=db_url, redis_url=os.environ.get("MEMSTORE_REDIS_URL"))
    )
    store.migrate()
    store.append(app_id, TURN, user_id=f"user-{app_id}")
    store.append(app_id + "-other", TURN)
    yield store
    store.purge(app_id + "-other")
    store.close()


def run(db_url: str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(cli, [*args, "--database-url", db_url], input=input)
    return result.exit_code, result.stdout, result.stderr


def corrupt(store: MemoryStore, app_id: str) -> None:
    """An unanswered request and an orphan result, written behind memstore's back."""
    store.append(
        app_id, [AiMessage(tool_requests=[ToolRequest(id="lost", name="w", arguments="{}")])]
    )
    with store.engine.begin() as conn:
        conn.execute(
            original.insert(),
            [
                {
                    "id": shared_generator(MAX_WORKER_ID).next_id(),  # no store here leases it
                    "app_id": app_id,
                    "user_id": None,
                    "message_type": "toolExecutionResult",
                    "tool_call_id": "ghost",
                    "is_deleted": False,
                    "payload": ToolResult(id="ghost", tool_name="w", text="?").model_dump_json(),
                    "created_at": datetime.now(timezone.utc),
                    "updated_at": datetime.now(timezone.utc),
                }
            ],
        )


def test_show_window_json_and_table(seeded: MemoryStore, db_url: str, app_id: str) -> None:
    code, out, _ = run(db_url, "show", app_id, "--format", "json")
    assert code == 0
    assert [m["type"] for m in json.loads(out)] == ["user", "ai", "tool_result", "ai"]
    code, out, _ = run(db_url, "show", app_id, "--display")
    assert code == 0 and "make a file" in out and "[tool] write" in out
    code, out, _ = run(db_url, "show", app_id, "--original", "--limit", "2")
    assert code == 0 and "done" in out and "make a file" not in out


def test_check_and_repair(seeded: MemoryStore, db_url: str, app_id: str) -> None:
    corrupt(seeded, app_id)
    code, out, _ = run(db_url, "check", app_id, "--json")
    assert code == 1
    codes = sorted(f["code"] for f in json.loads(out)[0]["findings"])
    assert codes == ["orphan_result", "unanswered_request"]
    code, out, _ = run(db_url, "check", app_id, "--repair")
    assert code == 0 and "answered 'lost'" in out and "soft-deleted orphan" in out
    code, out, _ = run(db_url, "check", app_id)
    assert code == 0 and out == ""
    window = seeded.load_window(app_id)
    assert validate(window, "openai") == [] and validate(window, "anthropic") == []


def test_purge_refuses_without_terminal_and_dry_run_changes_nothing(
    seeded: MemoryStore, db_url: str, app_id: str
) -> None:
    code, _, err = run(db_url, "purge", app_id)
    assert code == 1 and "--yes" in err
    code, out, _ = run(db_url, "purge", app_id, "--dry-run")
    assert code == 0 and "4 original rows, 2 display rows" in out
    assert len(seeded.load_window(app_id)) == 4


def test_purge_yes_removes_rows_and_keys_only_for_that_app(
    seeded: MemoryStore, db_url: str, app_id: str
) -> None:
    for pattern in ["*", "%", app_id[:-1] + "%"]:  # literal ids: no app has them
        code, _, err = run(db_url, "purge", pattern, "--yes")
        assert code == 1 and "no rows for app id(s)" in err
    code, out, _ = run(db_url, "purge", app_id, "--yes", "--json")
    assert code == 0 and json.loads(out) == [
        {"app": app_id, "original_rows": 4, "display_rows": 2, "tool_executions": 0}
    ]
    with seeded.engine.connect() as conn:
        for table in (original, display):
            left = conn.execute(sa.select(sa.func.count()).where(table.c.app_id == app_id))
            assert left.scalar() == 0
    assert len(seeded.load_window(app_id + "-other")) == 4


def test_purge_by_user(seeded: MemoryStore, db_url: str, app_id: str) -> None:
    code, out, _ = run(db_url, "purge", "--user-id", f"user-{app_id}", "--yes")
    assert code == 0 and "4 original rows" in out
    assert seeded.load_window(app_id) == []


def test_reload_and_stats(seeded: MemoryStore, db_url: str, app_id: str) -> None:
    code, out, _ = run(db_url, "reload", app_id, "--json")
    assert code == 0 and json.loads(out)["reports"][0]["messages"] == 4
    code, out, _ = run(db_url, "stats", "--json")
    data = json.loads(out)
    assert code == 0 and data["apps"] >= 2
    assert isinstance(data["newest"]["id"], int) and data["newest"]["at"].startswith("20")
    assert all(isinstance(n, int) for n in data["rows_by_type"].values())
    code, out, _ = run(db_url, "stats")
    assert code == 0 and "{" not in out and "None" not in out
    assert "rows by type: ai " in out


def test_usage_errors_exit_2(db_url: str) -> None:
    runner = CliRunner()
    from memstore.cli import main  # noqa: F401  (exit codes come from main; see subprocess test)

    assert runner.invoke(cli, ["reload"]).exit_code == 2


def test_console_script_as_subprocess(tmp_path: Path) -> None:
    exe = shutil.which("memstore")
    command = [exe] if exe else [sys.executable, "-m", "memstore"]
    env = {**os.environ, "MEMSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'sub.db'}"}
    env.pop("MEMSTORE_REDIS_URL", None)
    done = subprocess.run(
        [*command, "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [*command, "purge", "x", "--missing-ok"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == 1 and "--yes" in done.stderr
    done = subprocess.run([*command, "check"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    done = subprocess.run([*command, "demo"], env=env, capture_output=True, text=True, timeout=120)
    assert (
        done.returncode == 0 and "identical to the window before the restart: True" in done.stdout
    )


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "langchain4j"])
def test_show_in_provider_formats(seeded: MemoryStore, db_url: str, app_id: str, fmt: str) -> None:
    code, out, _ = run(db_url, "show", app_id, "--format", fmt)
    assert code == 0
    data = json.loads(out)
    if fmt == "openai":
        assert [m["role"] for m in data] == ["user", "assistant", "tool", "assistant"]
        assert data[1]["tool_calls"][0]["function"]["arguments"] == '{"p": 1}'
    elif fmt == "anthropic":
        assert [m["role"] for m in data["messages"]] == ["user", "assistant", "user", "assistant"]
    else:
        assert [m["type"] for m in data] == ["USER", "AI", "TOOL_EXECUTION_RESULT", "AI"]
    code, _, err = run(db_url, "show", app_id, "--display", "--format", fmt)
    assert code == 2 and "applies to" in err


def test_show_executions_and_guard_marks(seeded: MemoryStore, db_url: str, app_id: str) -> None:
    from memstore.guard import LoopGuard

    guard = LoopGuard(seeded, side_effect_tools={"send"})
    guard.check(app_id, "send", '{"to": "x"}', turn=guard.turn(app_id))
    code, out, _ = run(db_url, "show", app_id, "--executions")
    assert code == 0 and "pending" in out and "send" in out
    code, out, _ = run(db_url, "show", app_id, "--executions", "--format", "json")
    assert code == 0 and json.loads(out)[0]["state"] == "pending"


@pytest.mark.parametrize("db_url", ["sqlite+redis", "postgres+redis"], indirect=True)
def test_purge_leaves_no_cache_key_behind(
    seeded: MemoryStore, db_url: str, app_id: str, real_redis: redis.Redis
) -> None:
    client = real_redis
    assert run(db_url, "reload", app_id)[0] == 0
    assert run(db_url, "reload", app_id + "-other")[0] == 0
    assert client.exists(keys.window_key(app_id)) == 1
    assert run(db_url, "purge", app_id, "--yes")[0] == 0
    assert client.keys(f"memstore:{{{app_id}}}:*") == []
    assert client.exists(keys.window_key(app_id + "-other")) == 1


@pytest.mark.parametrize("db_url", ["sqlite+redis", "postgres+redis"], indirect=True)
def test_console_script_on_real_services(
    seeded: MemoryStore, db_url: str, app_id: str, real_redis: redis.Redis
) -> None:
    """The installed script end to end on PostgreSQL/SQLite with the real Redis: reload fills
    the window key, a purge writes its audit line and leaves no row and no key behind."""
    exe = shutil.which("memstore")
    command = [exe] if exe else [sys.executable, "-m", "memstore"]
    env = {**os.environ, "MEMSTORE_DATABASE_URL": db_url}  # MEMSTORE_REDIS_URL set by db_url

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )

    client = real_redis
    done = script("reload", app_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reports"][0]["cached"] is True
    assert client.exists(keys.window_key(app_id)) == 1
    done = script("show", app_id, "--format", "openai")
    assert done.returncode == 0 and json.loads(done.stdout)[0]["role"] == "user"
    done = script("purge", app_id, "--yes")
    assert done.returncode == 0, done.stderr
    assert "memstore.audit" in done.stderr and f"app={app_id!r}" in done.stderr
    assert "original_rows=4 display_rows=2" in done.stderr
    assert client.keys(f"memstore:{{{app_id}}}:*") == []
    assert seeded.load_window(app_id) == []
    assert len(seeded.load_window(app_id + "-other")) == 4


def test_reload_all_in_worker_processes_reports_what_one_process_reports(
    seeded: MemoryStore, db_url: str, app_id: str
) -> None:
    seeded.append(app_id + "-more", TURN)
    code, out, err = run(db_url, "reload", app_id, app_id + "-more", "--json", "--workers", "2")
    assert code == 0, err
    reports = json.loads(out)["reports"]
    assert [(r["app_id"], r["messages"]) for r in reports] == [(app_id, 4), (app_id + "-more", 4)]
    if db_url.startswith("sqlite"):  # (--all on this test's own database only)
        alone = run(db_url, "reload", "--all")
        in_workers = run(db_url, "reload", "--all", "--workers", "2")
        assert alone[0] == in_workers[0] == 0
        assert alone[1] == in_workers[1] and "apps: 3, messages: 12," in alone[1]
    assert run(db_url, "reload", "--all", "--workers", "0")[0] == 2


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_reload_all_cleanly_with_a_report(tmp_path: Path, workers: str) -> None:
    url = f"sqlite:///{tmp_path / 'many.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    generator = shared_generator(0)
    now = datetime.now(timezone.utc)
    rows = [
        original_row(row_id, f"app-{n:05d}", None, UserMessage(text="hi"), now)
        for n, row_id in enumerate(generator.next_ids(20_000))
    ]
    with store.engine.begin() as conn:
        conn.execute(original.insert(), rows)
    store.close()
    exe = shutil.which("memstore")
    command = [exe] if exe else [sys.executable, "-m", "memstore"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    child = subprocess.Popen(
        [*command, "reload", "--all", "--database-url", url, "--workers", workers],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert child.stderr is not None
    first = child.stderr.readline()  # the progress bar (or the no-Redis note): work has begun
    assert first
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    assert "interrupted after" in err and "Traceback" not in err
    done = int(err.split("interrupted after ")[1].split()[0])
    # (worker processes may still be starting when the signal comes: nothing reported yet)
    assert (0 if workers == "2" else 1) <= done < 20_000
    assert f"apps: {done}," in out  # the summary of what was done so far


HOSTILE = "see\x1b]52;c;ZXZpbA==\x07 this\x1b[2J\u202eevil\x9b"


@pytest.mark.parametrize("view", ["--window", "--original", "--display"])
def test_show_never_prints_terminal_controls(
    seeded: MemoryStore, db_url: str, app_id: str, view: str
) -> None:
    seeded.append(app_id, [UserMessage(text=HOSTILE), AiMessage(text="ok\x1b[31m")])
    code, out, _ = run(db_url, "show", app_id, view)
    assert code == 0
    assert not any(c in out for c in "\x1b\x07\x9b\u202e")
    assert "see\\x1b]52;c;ZXZpbA==\\x07 this\\x1b[2J\\u202eevil\\x9b" in out
    code, out, _ = run(db_url, "show", app_id, view, "--format", "json")
    assert code == 0 and "\x1b" not in out  # JSON escapes them itself
    assert HOSTILE in [entry.get("text") for entry in json.loads(out)]


def test_bulk_commands_skip_an_app_they_cannot_handle_and_go_on(tmp_path: Path) -> None:
    """A stored app id the validator refuses (an empty one another tool inserted sorts first)
    is reported and passed over; every other app is still handled; the exit code is 1."""
    url = f"sqlite:///{tmp_path / 'bulk.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    store.append("good-app", TURN)
    row = original_row(1, "", None, UserMessage(text="stray"), datetime.now(timezone.utc))
    with store.engine.begin() as conn:
        conn.execute(original.insert(), [row])
    store.close()

    code, out, err = run(url, "prune", "--all", "--keep-last", "1", "--yes", "--json")
    assert code == 1 and "skipped 1 app(s)" in err and "''" in err
    report = json.loads(out)
    assert report["summary"]["apps"] == 1 and report["reports"][0]["app_id"] == "good-app"
    assert report["skipped"][0]["app_id"] == ""
    for args in (["reload", "--all"], ["reload", "--all", "--workers", "2"], ["check", "--all"]):
        code, out, err = run(url, *args)
        assert code == 1, args
        assert "skipped 1 app(s)" in err and "InvalidAppIdError" in err, args
    code, out, _ = run(url, "reload", "--all", "--json")
    document = json.loads(out)
    assert document["summary"]["apps"] == 1 and "reports" not in document
    assert document["skipped"] == [{"app_id": "", "error": document["skipped"][0]["error"]}]


def test_show_takes_one_view(seeded: MemoryStore, db_url: str, app_id: str) -> None:
    code, _, err = run(db_url, "show", app_id, "--original", "--display")
    assert code == 2 and "--original or --display" in err
    code, out, _ = run(db_url, "show", app_id, "--display")
    assert code == 0 and "make a file" in out


def test_a_downgrade_lists_what_it_drops_and_needs_yes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'migrate.db'}"
    assert run(url, "migrate")[0] == 0
    head = run(url, "migrate", "current")[1].strip()
    code, _, err = run(url, "migrate", "downgrade", "0005")
    assert code == 1 and "refusing to downgrade without a terminal" in err
    assert "0008" in err and "0006" in err and "0005  " not in err
    assert run(url, "migrate", "current")[1].strip() == head  # nothing dropped
    code, out, _ = run(url, "migrate", "downgrade", "0005", "--yes")
    assert code == 0 and "downgraded to 0005" in out
    assert run(url, "migrate", "current")[1].strip() == "0005"
    code, _, err = run(url, "migrate", "downgrade", "0005", "--yes")
    assert code == 0 and "nothing to undo" in err
    for bad in ("0007", "9999"):  # newer than the current one, unknown
        result = CliRunner().invoke(
            cli, ["migrate", "downgrade", bad, "--yes", "--database-url", url]
        )
        assert isinstance(result.exception, ConfigurationError), bad  # main() exits 2 with it
    assert run(url, "migrate", "current")[1].strip() == "0005"


APP_ID_COMMANDS = {
    "show": ["show", "typo-app"],
    "reload": ["reload", "typo-app"],
    "check": ["check", "typo-app"],
    "purge": ["purge", "typo-app", "--yes"],
    "prune": ["prune", "typo-app", "--keep-last", "1", "--yes"],
    "export": ["export", "typo-app"],
}


def test_the_unknown_app_convention_covers_every_command_taking_app_ids() -> None:
    takes_app_ids = {
        name
        for name, command in cli.commands.items()
        if any(
            isinstance(param, click.Argument) and param.name in ("app_id", "app_ids")
            for param in command.params
        )
    }
    assert takes_app_ids == {*APP_ID_COMMANDS, "rekey"}  # rekey: tests/cli/test_rekey_cli.py
    assert all("missing_ok" in {p.name for p in cli.commands[n].params} for n in takes_app_ids)


@pytest.mark.parametrize("args", list(APP_ID_COMMANDS.values()), ids=list(APP_ID_COMMANDS))
def test_an_unknown_app_id_is_named_and_exits_1(
    seeded: MemoryStore, db_url: str, args: list[str], tmp_path: Path
) -> None:
    out_file = str(tmp_path / "out.jsonl")
    extra = ["--output", out_file] if args[0] == "export" else []
    code, _, err = run(db_url, *args, *extra)
    assert code == 1 and "no rows for app id(s) 'typo-app'" in err
    assert not Path(out_file).exists()
    code, _, _ = run(db_url, *args, *extra, "--missing-ok")
    assert code == 0


def test_read_commands_never_create_a_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    for args in (["show", "a"], ["stats"], ["check", "--all"]):
        result = CliRunner().invoke(cli, [*args, "--database-url", f"sqlite:///{missing}"])
        assert isinstance(result.exception, ConfigurationError), args
        assert "no SQLite database at" in str(result.exception)
    assert not missing.exists()
