"""``memstore reload --workers N``: windows rebuilt in worker processes are those one process
rebuilds, on SQLite files, PostgreSQL and MariaDB with the real Redis (the workers are
processes of their own: fakeredis cannot be shared with them); without Redis the reports
still hold. Errors keep their type across the process boundary; a dead worker is an error."""

from __future__ import annotations

import multiprocessing
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from memstore import MemoryStore, Settings, operations
from memstore.cache import keys
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import NoWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.errors import (
    ConfigurationError,
    InvalidAppIdError,
    InvalidInputError,
    MemstoreError,
    SchemaError,
)
from memstore.messages import Message, UserMessage
from memstore.reload_workers import reload_in_workers
from memstore.sql.engine import make_engine
from tests.conftest import REDIS_URL, SESSION_WORKER_ID, migrated_engine, redis_client
from tests.integration.test_redis_reload import WINDOW, assert_appends_extend, histories


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return migrated_engine(request.param, tmp_path_factory)


def settings_for(engine: Engine, redis_url: str | None) -> Settings:
    return Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        redis_url=redis_url,
        worker_id=SESSION_WORKER_ID,
        window_size=WINDOW,
        reload_max=WINDOW,
    )


def seeded_apps(store: MemoryStore, run: str) -> dict[str, list[Message]]:
    apps = histories(run)
    for n in range(9):
        apps[f"{run}-n{n}"] = [UserMessage(text=f"m{n}-{i}") for i in range(n)]
    for app, messages in apps.items():
        if messages:
            store.append(app, messages)
    return apps


def test_workers_store_the_windows_one_process_stores(engine: Engine) -> None:
    client = redis_client()
    settings = settings_for(engine, REDIS_URL)
    cache = RedisWindowCache(client, WindowPolicy.from_settings(settings))
    store = MemoryStore(settings, engine=engine, cache=cache)
    run = f"rw-{uuid.uuid4().hex[:10]}"
    apps = seeded_apps(store, run)
    names = [*apps, f"{run}-plain"]  # a repeated app is reported twice
    try:
        with operations.bulk_collection():
            alone = list(operations.reload_apps(store, names))
        windows = {app: store.cache.read(app).messages for app in apps}
        for app in apps:
            store.cache.invalidate(app)
        assert all(store.cache.read(app).messages is None for app in apps)

        in_workers = list(reload_in_workers(settings, names, workers=2, chunk_apps=3))

        assert in_workers == alone
        assert {app: store.cache.read(app).messages for app in apps} == windows
        for app, messages in apps.items():
            assert windows[app] == (store.load_window(app, WINDOW) if messages else None)
        assert_appends_extend(store, f"{run}-plain")
    finally:
        client.delete(*(key for app in apps for key in keys.app_keys(app)))
        store.close()
        client.close()


def test_without_redis_workers_rebuild_check_and_report(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'w.db'}", reload_max=WINDOW)
    with MemoryStore(settings, cache=NoWindowCache()) as store:
        store.migrate()
        apps = seeded_apps(store, "nr")
        with operations.bulk_collection():
            alone = list(operations.reload_apps(store, list(apps)))
    reports = list(reload_in_workers(settings, iter(apps), workers=2, chunk_apps=4))
    assert reports == alone
    assert [r.app_id for r in reports] == list(apps)
    assert not any(r.cached for r in reports)
    assert sum(r.widened_groups for r in reports) >= 1
    assert sum(r.interrupted_answered for r in reports) == 1


@pytest.mark.parametrize(
    ("url", "arguments", "error"),
    [
        ("sqlite:///{tmp}/x.db", {"workers": 0}, ConfigurationError),
        ("sqlite:///{tmp}/x.db", {"workers": 65}, ConfigurationError),
        ("sqlite:///{tmp}/x.db", {"workers": 2, "chunk_apps": 0}, ConfigurationError),
        ("sqlite:///{tmp}/x.db", {"workers": 2, "max_messages": 0}, InvalidInputError),
        ("sqlite://", {"workers": 2}, ConfigurationError),
        ("sqlite:///:memory:", {"workers": 2}, ConfigurationError),
        ("sqlite:///file:m?mode=memory&uri=true", {"workers": 2}, ConfigurationError),
    ],
)
def test_bad_arguments_fail_before_any_process_starts(
    tmp_path: Path, url: str, arguments: dict[str, int], error: type[Exception]
) -> None:
    settings = Settings(database_url=url.format(tmp=tmp_path))
    with pytest.raises(error):
        reload_in_workers(settings, ["a"], **arguments)  # type: ignore[arg-type]
    assert multiprocessing.active_children() == []


def test_an_error_in_a_worker_keeps_its_type_and_fields(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'unmigrated.db'}"
    make_engine(url).dispose()
    settings = Settings(database_url=url)
    with pytest.raises(SchemaError) as in_process:
        MemoryStore(settings, cache=NoWindowCache()).reload("a")
    with pytest.raises(SchemaError) as in_worker:
        list(reload_in_workers(settings, ["a", "b"], workers=2, chunk_apps=1))
    assert in_worker.value.kind == in_process.value.kind is not None
    assert in_worker.value.detail == in_process.value.detail


def test_a_worker_that_dies_is_an_error(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'k.db'}")
    with MemoryStore(settings, cache=NoWindowCache()) as store:
        store.migrate()
        apps = [f"k{n}" for n in range(60)]
        for app in apps:
            store.append(app, [UserMessage(text="hi")])
    reports = reload_in_workers(settings, apps, workers=2, chunk_apps=1)
    assert next(reports).app_id == "k0"
    victim = multiprocessing.active_children()[0]
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    with pytest.raises(MemstoreError, match="reload worker process ended unexpectedly"):
        for _report in reports:
            pass


def test_app_ids_are_normalized_and_a_bad_one_is_a_typed_error(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'n.db'}")
    with MemoryStore(settings, cache=NoWindowCache()) as store:
        store.migrate()
        store.append(42, [UserMessage(text="hi")])
    reports = list(reload_in_workers(settings, [42, "42"], workers=2))
    assert [(r.app_id, r.messages) for r in reports] == [("42", 1), ("42", 1)]
    with pytest.raises(InvalidAppIdError):
        list(reload_in_workers(settings, ["42", "bad\x00id"], workers=2, chunk_apps=1))


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _reload_all_in_workers(tmp_path: Path) -> tuple[Any, set[int]]:
    """``memstore reload --all --workers 2`` as a subprocess on a SQLite file with enough apps
    to keep its workers busy; returns it with its worker processes, once they run."""
    import subprocess
    import sys
    import time

    url = f"sqlite:///{tmp_path / 'many.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    for n in range(6000):  # seconds of work for two workers, so the signal finds them busy
        store.append(f"app-{n:05d}", [UserMessage(text=f"m{n}-{i}") for i in range(30)])
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memstore",
            "reload",
            "--all",
            "--workers",
            "2",
            "--max",
            "30",
            "--database-url",
            url,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 2:
        time.sleep(0.1)
        workers = {pid for pid in _children(process.pid) if "spawn_main" in _cmdline(pid)}
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"reload ended early: {err}")
    assert len(workers) == 2, "the workers did not start"
    return process, workers | _children(process.pid)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_ends_the_command_and_every_worker(tmp_path: Path, signum: int) -> None:
    import time

    process, helpers = _reload_all_in_workers(tmp_path)
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 128 + signum, err
    assert f"terminated by {signal.Signals(signum).name}" in err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in helpers):
        time.sleep(0.1)
    assert not [pid for pid in helpers if _alive(pid)], "a worker or the resource tracker lived on"


def test_workers_end_when_their_parent_is_killed(tmp_path: Path) -> None:
    import time

    process, helpers = _reload_all_in_workers(tmp_path)
    process.kill()  # SIGKILL: no handler runs in the parent
    process.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in helpers):
        time.sleep(0.1)
    assert not [pid for pid in helpers if _alive(pid)], "a worker outlived its parent"
