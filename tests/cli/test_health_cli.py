"""``memstore health``: exit codes for readiness probes, in-process and as the console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore.cli import cli
from memstore.errors import ConfigurationError
from memstore.sql import migrate
from memstore.sql.engine import make_engine
from memstore.sql.health import head_revision
from tests.integration.conftest import free_port


@pytest.fixture(autouse=True)
def no_redis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    monkeypatch.delenv("MEMSTORE_DATABASE_URL", raising=False)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'health.db'}"


@pytest.fixture
def migrated(url: str) -> str:
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["health", *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


def test_ready_store_exits_0(migrated: str) -> None:
    code, out = invoke("--database-url", migrated)
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines[:4]] == [
        ["database", "ok"],
        ["migrations", "ok"],
        ["cache", "ok"],
        ["lease", "ok"],
    ]
    assert lines[-1].startswith("ready (ok, ")


def test_json_report(migrated: str) -> None:
    code, out = invoke("--json", "--database-url", migrated)
    assert code == 0
    data = json.loads(out)
    assert data["ready"] is True and data["status"] == "ok"
    assert set(data["checks"]) == {"database", "migrations", "cache", "lease"}
    assert data["checks"]["migrations"] == {"status": "ok", "detail": f"at head {head_revision()}"}


def test_unmigrated_database_is_not_ready(url: str) -> None:
    code, out = invoke("--json", "--database-url", url)
    assert code == 1
    data = json.loads(out)
    assert data["ready"] is False and data["status"] == "failed"
    assert data["checks"]["migrations"]["status"] == "failed"


def test_unreachable_redis_is_not_ready_unless_the_cache_is_optional(migrated: str) -> None:
    redis_url = f"redis://127.0.0.1:{free_port()}/0"
    code, out = invoke("--json", "--database-url", migrated, "--redis-url", redis_url)
    assert code == 1
    data = json.loads(out)
    assert data["status"] == "degraded"
    assert data["checks"]["cache"] == {"status": "failed", "detail": "ConnectionError"}
    code, out = invoke("--cache-optional", "--database-url", migrated, "--redis-url", redis_url)
    assert code == 0
    assert out.splitlines()[-1].startswith("ready (degraded, ")


def test_unmigrated_is_not_ready_even_with_the_cache_optional(url: str) -> None:
    assert invoke("--cache-optional", "--database-url", url)[0] == 1


def test_timeout_bounds_a_silent_database() -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        port = sock.getsockname()[1]
        started = time.monotonic()
        code, out = invoke(
            "--timeout", "0.5", "--database-url", f"postgresql+psycopg://u@127.0.0.1:{port}/d"
        )
    assert code == 1 and time.monotonic() - started < 3
    assert "no answer within 0.5s" in out


def test_bad_options_and_settings() -> None:
    assert CliRunner().invoke(cli, ["health", "--timeout", "0"]).exit_code == 2
    with pytest.raises(ConfigurationError):
        invoke("--database-url", "oracle://x")  # main() turns this into exit 2


def test_console_script_exit_codes(tmp_path: Path) -> None:
    beside = Path(sys.executable).with_name("memstore")  # this interpreter's console script
    exe = str(beside) if beside.is_file() else shutil.which("memstore")
    command = [exe] if exe else [sys.executable, "-m", "memstore"]
    env = {**os.environ, "MEMSTORE_DATABASE_URL": f"sqlite:///{tmp_path / 'probe.db'}"}
    env.pop("MEMSTORE_REDIS_URL", None)

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "health", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )

    done = run()
    assert done.returncode == 1, done.stderr  # not migrated
    assert "not ready" in done.stdout
    migrated = subprocess.run(
        [*command, "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert migrated.returncode == 0, migrated.stderr
    done = run("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ready"] is True
    done = run(MEMSTORE_WINDOW_SIZE="lots")
    assert done.returncode == 2 and "MEMSTORE_WINDOW_SIZE" in done.stderr
