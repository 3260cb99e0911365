"""Fixtures of the integration tests: scratch databases and a private ``redis-server``.

The shared services (see ``tests/conftest.py``) are used by other people at the same time, so
nothing here flushes the shared Redis or drops the shared databases' tables: migration tests
get a database of their own, and the failure/restart tests a Redis server of their own.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from tests.conftest import MYSQL_URL, POSTGRES_URL

REDIS_SERVER = os.environ.get("MEMSTORE_TEST_REDIS_SERVER") or shutil.which("redis-server")


# -- scratch databases ---------------------------------------------------------------------------


def _server_url(name: str) -> str:
    url = POSTGRES_URL if name == "postgres" else MYSQL_URL
    if not url:
        pytest.skip(f"MEMSTORE_TEST_{name.upper()}_URL is not set")
    return url


@pytest.fixture
def scratch_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database of this test's own: a SQLite file in ``tmp_path``, or a
    ``memstore_mig_<random>`` database created on the PostgreSQL/MariaDB server and dropped at
    the end. Parametrize indirectly with ``sqlite`` / ``postgres`` / ``mysql``."""
    name: str = request.param
    if name == "sqlite":
        yield f"sqlite:///{tmp_path / 'scratch.db'}"
        return
    server = make_url(_server_url(name))
    database = f"memstore_mig_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as conn:  # a set URL that does not answer fails here, never skips
            conn.exec_driver_sql(f"CREATE DATABASE {database}")
        try:
            yield server.set(database=database).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                if name == "postgres":  # connections a failed test left open must not block
                    conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :db AND pid <> pg_backend_pid()"
                        ),
                        {"db": database},
                    )
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database}")
    finally:
        admin.dispose()


# -- a private redis-server ----------------------------------------------------------------------


def _ephemeral_start() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_LOW = 20000
_PORT_HIGH = max(_PORT_LOW + 2000, min(_ephemeral_start(), 32768))
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, below the kernel's ephemeral range.

    A port the kernel hands out (``bind(0)``) lies in the ephemeral range, where any outgoing
    connection of this machine may take it between this check and the server's ``bind``; ports
    below that range are only ever taken by listeners. Each port is handed out once per
    process, so two servers of one test never race for the same one.
    """
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(_PORT_LOW, _PORT_HIGH)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def address_in_use(log_text: str) -> bool:
    """Whether a redis-server log says it could not bind its port."""
    return "Address already in use" in log_text


class RedisServer:
    """A ``redis-server`` subprocess on a loopback port, without persistence.

    ``stop()`` and ``start()`` restart it on the same port (empty, like a real restart without
    persistence); ``pause()`` / ``resume()`` send SIGSTOP / SIGCONT, so calls time out instead
    of being refused.
    """

    def __init__(self, workdir: Path) -> None:
        if REDIS_SERVER is None:
            pytest.fail("redis-server is not installed (set MEMSTORE_TEST_REDIS_SERVER)")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._started_once = False

    def start(self, attempt: int = 0) -> None:
        assert self.process is None, "already running"
        log = (self.workdir / "redis.log").open("ab")
        try:
            self.process = subprocess.Popen(
                [
                    *(str(REDIS_SERVER), "--port", str(self.port), "--bind", "127.0.0.1"),
                    *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                    *("--dir", str(self.workdir)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        deadline = time.monotonic() + 10
        while True:
            if self.process.poll() is not None:
                log_text = (self.workdir / "redis.log").read_text(errors="replace")
                self.process = None
                if address_in_use(log_text) and not self._started_once and attempt < 3:
                    # another process took the port after free_port(): pick another
                    (self.workdir / "redis.log").unlink()
                    self.port = free_port()
                    self.url = f"redis://127.0.0.1:{self.port}/0"
                    return self.start(attempt + 1)
                pytest.fail(f"redis-server exited at start:\n{log_text[-2000:]}")
            try:
                with self.client() as client:
                    client.ping()
                self._started_once = True
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.fail("redis-server did not answer within 10 s")
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.paused:
            self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)


@pytest.fixture
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A running private ``redis-server``; terminated at the end of the test."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
