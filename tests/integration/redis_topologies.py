"""Private Redis topologies for the failover tests: a 3-master + 3-replica Redis Cluster and a
Sentinel setup (one master, one replica, three sentinels), all ``redis-server`` processes on
free loopback ports without persistence.

``redis-server`` missing fails the tests (it never skips them) when ``MEMSTORE_TEST_REDIS_URL``
is set; without that URL the tests skip like every other real-Redis test.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tests.conftest import REDIS_URL
from tests.integration.conftest import REDIS_SERVER, address_in_use, free_port

REDIS_CLI = shutil.which("redis-cli", path=str(Path(REDIS_SERVER).parent)) if REDIS_SERVER else None
REDIS_CLI = REDIS_CLI or shutil.which("redis-cli")


def require_redis_binaries() -> tuple[str, str]:
    if not REDIS_URL:
        pytest.skip("MEMSTORE_TEST_REDIS_URL is not set")
    if REDIS_SERVER is None or REDIS_CLI is None:
        pytest.fail("redis-server / redis-cli are not installed (set MEMSTORE_TEST_REDIS_SERVER)")
    return REDIS_SERVER, REDIS_CLI


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class PortTaken(Exception):
    """A ``redis-server`` could not bind its port: someone took it after ``free_port()``."""


class Node:
    """One ``redis-server`` process (a cluster node, a replica, or a sentinel)."""

    def __init__(
        self,
        workdir: Path,
        port: int,
        args: list[str],
        *,
        sentinel: bool = False,
        cluster_timeout_ms: int | None = None,
    ):
        self.workdir = workdir
        self.port = port
        self.args = args
        self.sentinel = sentinel
        self.cluster_timeout_ms = cluster_timeout_ms
        # the cluster bus port is chosen like the client port (Redis would take port + 10000,
        # which may lie in the ephemeral range where any outgoing connection can hold it)
        self.bus_port = free_port() if cluster_timeout_ms is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.started_once = False

    def _cluster_args(self) -> list[str]:
        if self.cluster_timeout_ms is None:
            return []
        return [
            *("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf"),
            *("--cluster-port", str(self.bus_port)),
            *("--cluster-node-timeout", str(self.cluster_timeout_ms)),
            *("--cluster-replica-validity-factor", "0"),
            *("--cluster-require-full-coverage", "no"),
        ]

    def start(self) -> None:
        for attempt in range(4):
            try:
                self._start_once()
                self.started_once = True
                return
            except PortTaken:
                # another process bound the port after free_port(); a first start may move
                if self.started_once or attempt == 3:
                    raise
                self.port = free_port()
                if self.bus_port is not None:
                    self.bus_port = free_port()

    def _start_once(self) -> None:
        server, _ = require_redis_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / "redis.log").open("ab")
        command = [server]
        if self.sentinel:
            command += [str(self.workdir / "sentinel.conf"), "--sentinel"]
        command += [
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)),
            *("--daemonize", "no"),
        ]
        if not self.sentinel:
            command += ["--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"]
        try:
            self.process = subprocess.Popen(
                command + self._cluster_args() + self.args, stdout=log, stderr=subprocess.STDOUT
            )
        finally:
            log.close()
        wait_until(self._answers, 10, f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            self.process = None
            log = self.workdir / "redis.log"
            text = log.read_text(errors="replace")
            if address_in_use(text):
                log.unlink()
                raise PortTaken(self.port)
            pytest.fail(f"redis-server exited at start:\n{text[-2000:]}")
        with self.client() as client:
            return bool(client.ping())

    def client(self, timeout: float = 5) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout
        )

    def kill(self) -> None:
        """SIGKILL: no goodbye to replicas or clients."""
        if self.process is None:
            return
        if self.paused:
            self.resume()
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

    def replid(self) -> str:
        with self.client() as client:
            return str(client.info("replication")["master_replid"])


class Cluster:
    """Six cluster-enabled ``redis-server`` processes joined as 3 masters with a replica each."""

    NODE_TIMEOUT_MS = 1000

    def __init__(self, workdir: Path) -> None:
        self.nodes = [
            Node(workdir / f"n{i}", free_port(), [], cluster_timeout_ms=self.NODE_TIMEOUT_MS)
            for i in range(6)
        ]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> None:
        _, cli = require_redis_binaries()
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 20) -> None:
        def healthy() -> bool:
            for node in self.live():
                with node.client() as client:
                    if client.cluster("info")["cluster_state"] != "ok":
                        return False
                    if len(self._masters_seen_by(client)) != 3:
                        return False
            return True

        wait_until(healthy, timeout, "cluster_state:ok with 3 masters")

    @staticmethod
    def _masters_seen_by(client: redis.Redis) -> set[int]:
        return {
            int(address.split(":")[1].split("@")[0])
            for address, info in client.cluster("nodes").items()
            if "master" in info["flags"] and "fail" not in info["flags"] and info["slots"]
        }

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node.process is not None and not node.paused]

    def node(self, port: int) -> Node:
        return next(node for node in self.nodes if node.port == port)

    def master_of(self, key: str) -> Node:
        """The node serving ``key``'s slot now."""
        for node in self.live():
            with node.client() as client:
                slot = int(client.cluster("keyslot", key))
                for start, end, master, *_ in client.cluster("slots"):
                    if int(start) <= slot <= int(end):
                        return self.node(int(master[1]))
        raise AssertionError("no live node answers")

    def replica_of(self, master: Node) -> Node:
        with master.client() as client:
            info = client.info("replication")
        return self.node(int(info["slave0"]["port"]))

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()


class SentinelSetup:
    """One master, one replica, three sentinels watching ``mymaster``."""

    NAME = "mymaster"

    def __init__(self, workdir: Path) -> None:
        self.master = Node(workdir / "master", free_port(), [])
        self.replica = Node(workdir / "replica", free_port(), [])
        self.sentinels = [
            Node(workdir / f"sentinel{i}", free_port(), [], sentinel=True) for i in range(3)
        ]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.NAME}/0"

    def start(self) -> None:
        self.master.start()
        self.replica.args = ["--replicaof", "127.0.0.1", str(self.master.port)]
        self.replica.start()
        self.wait_replica_synced(self.master, self.replica)
        for sentinel in self.sentinels:
            sentinel.workdir.mkdir(parents=True, exist_ok=True)
            (sentinel.workdir / "sentinel.conf").write_text(
                f"sentinel monitor {self.NAME} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {self.NAME} 1000\n"
                f"sentinel failover-timeout {self.NAME} 3000\n"
                f"sentinel parallel-syncs {self.NAME} 1\n"
            )
            sentinel.start()
        wait_until(self._sentinels_agree, 20, "the sentinels to see the master and replica")

    def _sentinels_agree(self) -> bool:
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                master = client.sentinel_master(self.NAME)
                if int(master["num-other-sentinels"]) != 2 or int(master["num-slaves"]) != 1:
                    return False
        return True

    def current_master_port(self) -> int:
        with self.sentinels[0].client() as client:
            return int(client.sentinel_get_master_addr_by_name(self.NAME)[1])

    @staticmethod
    def wait_replica_synced(master: Node, replica: Node) -> None:
        def synced() -> bool:
            with replica.client() as client:
                return client.info("replication").get("master_link_status") == "up"

        wait_until(synced, 15, "the replica to sync")

    def stop(self) -> None:
        for node in [*self.sentinels, self.master, self.replica]:
            node.kill()
