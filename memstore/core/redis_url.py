"""What a ``MEMSTORE_REDIS_URL`` names: one server, a Redis Cluster, or a Sentinel-managed master.

Pure parsing (no I/O); :mod:`memstore.cache.redis_window` turns a :class:`RedisTarget` into a
client. Forms:

* ``redis://``, ``rediss://``, ``unix://`` — one server (redis-py's own URL syntax);
* ``redis+cluster://[user:password@]host:port[,host:port...][/]`` (``rediss+cluster://`` with
  TLS) — a Redis Cluster reached through any of the listed nodes;
* ``redis+sentinel://[user:password@]host:port[,host:port...]/MASTER_NAME[/db]``
  (``rediss+sentinel://`` with TLS to the master and the sentinels) — the master a set of
  sentinels names, re-discovered after a failover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

PLAIN_SCHEMES = ("redis://", "rediss://", "unix://")
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
SCHEMES = PLAIN_SCHEMES + CLUSTER_SCHEMES + SENTINEL_SCHEMES


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A parsed Redis URL."""

    kind: Literal["plain", "cluster", "sentinel"]
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    """Cluster nodes or sentinels (empty for ``plain``)."""
    master_name: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False


def parse_redis_url(url: str) -> RedisTarget:
    """Parse ``url``; raise ``ValueError`` naming the accepted forms when it is none of them."""
    if url.startswith(PLAIN_SCHEMES):
        return RedisTarget("plain", url)
    if url.startswith(CLUSTER_SCHEMES):
        kind: Literal["cluster", "sentinel"] = "cluster"
    elif url.startswith(SENTINEL_SCHEMES):
        kind = "sentinel"
    else:
        raise ValueError(
            "not a Redis URL (redis://, rediss://, unix://, redis+cluster://, "
            "rediss+cluster://, redis+sentinel:// or rediss+sentinel://)"
        )
    scheme, rest = url.split("://", 1)
    location, _, path = rest.partition("/")
    username = password = None
    if "@" in location:
        credentials, location = location.rsplit("@", 1)
        user, sep, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if sep else None
    nodes = tuple(_node(part) for part in location.split(",") if part.strip())
    if not nodes:
        raise ValueError(f"{scheme}:// needs at least one host:port")
    parts = [unquote(part) for part in path.split("/") if part]
    master_name = None
    db = 0
    if kind == "cluster":
        if parts and parts != ["0"]:
            raise ValueError("a Redis Cluster has only database 0: redis+cluster://host:port,...")
    else:
        if not parts or len(parts) > 2:
            raise ValueError("use redis+sentinel://host:port[,host:port...]/MASTER_NAME[/db]")
        master_name = parts[0]
        if len(parts) == 2:
            if not parts[1].isdigit():
                raise ValueError(f"not a database number: {parts[1]!r}")
            db = int(parts[1])
    return RedisTarget(
        kind,
        url,
        nodes,
        master_name,
        db,
        username,
        password,
        tls=scheme.startswith("rediss"),
    )


def _node(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port: {text.strip()!r}")
    return host.strip("[]"), int(port)
