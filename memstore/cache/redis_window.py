"""The Redis window cache. Redis failures never reach the caller.

A thin I/O shell over :mod:`memstore.core.cache_plan`, which decides what each operation sends,
how a reply reads, and what a failure means: a failed or timed-out call counts as a miss (reads
go to SQL) or a skipped update (writes are already durable in SQL, the app is marked dirty and
its window dropped on the next successful contact). After a failure the server (the cluster
shard) rests for ``retry_after_seconds``; other shards keep serving.

The client comes from :func:`make_client`: one server, a Redis Cluster or a Sentinel-managed
master (see :mod:`memstore.core.redis_url`). The asyncio twin is :mod:`memstore.cache.aio`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from memstore.cache import keys, scripts
from memstore.cache.base import CachedWindow, WindowMemo, WindowPolicy
from memstore.core import cache_plan
from memstore.core.cache_plan import UNAVAILABLE, CacheState, ScriptCall
from memstore.core.redis_url import RedisTarget, parse_redis_url
from memstore.core.window import WindowEntry
from memstore.errors import ConfigurationError
from memstore.metrics import Metrics

logger = logging.getLogger("memstore")

__all__ = ["CACHE_ERRORS", "UNAVAILABLE", "RedisWindowCache", "client_options", "make_client"]

CACHE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, OSError)
"""What the Redis clients raise (the caches treat any exception of their client as one)."""
SCRIPTS: dict[cache_plan.Script, str] = {
    "read": scripts.READ,
    "append": scripts.APPEND,
    "store": scripts.STORE,
    "invalidate": scripts.INVALIDATE,
    "purge": scripts.PURGE,
}

SyncClient = redis.Redis | RedisCluster


def client_options(timeout_seconds: float) -> dict[str, Any]:
    """Fail fast: short timeouts, no retries (the cache is optional)."""
    return {
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        "retry": Retry(NoBackoff(), 0),
    }


def _credentials(target: RedisTarget) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if target.username:
        found["username"] = target.username
    if target.password is not None:
        found["password"] = target.password
    return found


def make_client(
    target: RedisTarget, timeout_seconds: float
) -> tuple[SyncClient, list[redis.Redis]]:
    """A client for ``target``, and the helper clients to close with it (a Sentinel's
    connections to the sentinels). A cluster client contacts the nodes here (call it inside a
    cache-error guard); the others connect on first use."""
    options = client_options(timeout_seconds)
    if target.kind == "cluster":
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],  # type: ignore[no-untyped-call]
            ssl=target.tls,
            require_full_coverage=False,
            **_credentials(target),
            **options,
        )
        return cluster, []
    if target.kind == "sentinel":
        assert target.master_name is not None
        connection: dict[str, Any] = {**_credentials(target), **options}
        if target.tls:
            connection["ssl"] = True
        # redis-py 8.2 typed Sentinel; older releases did not
        sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(target.nodes),
            sentinel_kwargs={**options, "ssl": target.tls} if target.tls else dict(options),
            **connection,
        )
        client: redis.Redis = sentinel.master_for(target.master_name, db=target.db)  # type: ignore[no-untyped-call, unused-ignore]
        return client, list(sentinel.sentinels)
    return redis.Redis.from_url(target.url, **options), []


def refuse_cluster_node(target: RedisTarget, timeout_seconds: float) -> None:
    """Raise :class:`ConfigurationError` when a plain URL reaches a Redis Cluster node (every
    call would meet ``MOVED``). An unreachable server passes: the cache is optional."""
    if target.kind != "plain":
        return
    try:
        with redis.Redis.from_url(target.url, **client_options(timeout_seconds)) as probe:
            info = probe.info("cluster")
    except CACHE_ERRORS:
        return
    if isinstance(info, dict) and str(info.get("cluster_enabled", 0)) == "1":
        raise ConfigurationError(
            "MEMSTORE_REDIS_URL names a Redis Cluster node with a plain redis:// URL; use "
            "redis+cluster://host:port[,host:port...] (rediss+cluster:// with TLS)"
        )


class RedisWindowCache:
    """Windows in Redis, one list per app, changed only through the Lua scripts."""

    guards_generations = True
    """Stores pass each write's generation step to :meth:`append` and the generation a
    rebuild read after its rows to :meth:`store` (see :mod:`memstore.cache.scripts`)."""

    def __init__(
        self,
        client: SyncClient | None,
        policy: WindowPolicy,
        *,
        owns_client: bool = False,
        retry_after_seconds: float = 1.0,
        metrics: Metrics | None = None,
        connect: Callable[[], SyncClient] | None = None,
        also_close: Sequence[redis.Redis] = (),
    ) -> None:
        """``client``: a ``redis.Redis`` or ``RedisCluster``; or ``None`` with ``connect``, a
        factory the cache calls (again after a failure) until it gets a client.
        ``also_close``: helper clients :meth:`close` closes too (when the cache owns its
        client)."""
        self._also_close = list(also_close)
        if client is None and connect is None:
            raise ValueError("RedisWindowCache needs a client or a connect factory")
        self._policy = policy
        self._owns_client = owns_client or client is None
        self._connect = connect
        self._lock = threading.Lock()
        self._client: SyncClient | None = None
        self._scripts: dict[cache_plan.Script, Any] = {}
        if client is not None:
            self._use(client)
        self.state = CacheState(retry_after_seconds, metrics)
        """Rest timers and dirty apps (``state.add_dirty_listener`` hooks the dirty event)."""
        self.memo = WindowMemo()
        """The windows this process decoded last (a read of an unchanged window serves them)."""

    @classmethod
    def from_url(
        cls,
        url: str,
        policy: WindowPolicy,
        timeout_seconds: float,
        *,
        metrics: Metrics | None = None,
    ) -> RedisWindowCache:
        """Connect to ``url`` (any form of :mod:`memstore.core.redis_url`); the cache closes
        the client it made. A plain URL that reaches a cluster node raises
        :class:`ConfigurationError`."""
        try:
            target = parse_redis_url(url)
        except ValueError as error:
            raise ConfigurationError(f"invalid redis_url: {error}") from error
        refuse_cluster_node(target, timeout_seconds)
        if target.kind == "cluster":  # the cluster client contacts nodes when made: lazily
            return cls(
                None,
                policy,
                metrics=metrics,
                connect=lambda: make_client(target, timeout_seconds)[0],
            )
        client, helpers = make_client(target, timeout_seconds)
        return cls(client, policy, owns_client=True, metrics=metrics, also_close=helpers)

    def _use(self, client: SyncClient) -> None:
        self._scripts = {name: client.register_script(text) for name, text in SCRIPTS.items()}
        self._client = client

    @property
    def client(self) -> SyncClient:
        """The Redis client (connecting now if the cache has not yet)."""
        return self._connected()

    @property
    def is_cluster(self) -> bool:
        return isinstance(self._client, RedisCluster)

    def _connected(self) -> SyncClient:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    assert self._connect is not None
                    self._use(self._connect())
                client = self._client
                assert client is not None
        return client

    def _route_of(self, app_id: str) -> str:
        client = self._client
        if not isinstance(client, RedisCluster):
            return ""
        try:
            node = client.get_node_from_key(keys.window_key(app_id))  # type: ignore[no-untyped-call]
        except Exception:  # no slot map yet
            return "?"
        return "?" if node is None else str(node.name)

    def _refresh(self) -> None:
        client = self._client
        if isinstance(client, RedisCluster):
            client.nodes_manager.initialize()

    def set_skip_listener(self, listener: Callable[[str], None] | None) -> None:
        """Call ``listener(app_id)`` whenever an update of the app's window (append,
        invalidate, purge) is skipped because Redis failed or its route rests (the stores
        stamp the app stale in SQL: see ``stale_window_max_seconds``)."""
        self.state.set_dirty_listener(listener)

    def _run(self, call: ScriptCall) -> Any:
        route = self._route_of(call.app_id)
        step = self.state.begin(call, route, time.monotonic(), self._route_of)
        if step is None:
            return None
        try:
            self._connected()
            if step.refresh:
                self._refresh()
                self.state.refreshed(route)
            for stale, marks in step.replay:
                self._execute(cache_plan.invalidate_call(stale, self._policy))
                self.state.cleaned(stale, marks)
            reply = self._execute(call)
        except Exception as error:
            # (CACHE_ERRORS and whatever else the client raises: the write is durable in SQL)
            self.state.failed(call, route, error, time.monotonic(), cluster=self.is_cluster)
            return None
        self.state.succeeded(route)
        return reply

    def _execute(self, call: ScriptCall) -> Any:
        return self._scripts[call.script](keys=call.keys, args=call.args)

    def run_batch(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run ``calls`` (of different apps) in one pipelined round trip; each reply as
        :meth:`_run` would give it (``None``: failed or skipped, with the same bookkeeping).
        A cluster client, a resting route or a dirty app runs them one by one instead."""
        client = self._client
        if not calls or client is None or isinstance(client, RedisCluster):
            return [self._run(call) for call in calls]
        # one route: the first call's step says for all (a dirty app anywhere is replayed)
        step = self.state.begin(calls[0], "", time.monotonic(), self._route_of)
        if step is None:  # resting: the first call is skipped and counted, the rest likewise
            return [None, *(self._run(call) for call in calls[1:])]
        if step.refresh or step.replay:  # (begin has no side effects when it says go)
            return [self._run(call) for call in calls]
        try:
            pipe = client.pipeline(transaction=False)
            for call in calls:
                self._scripts[call.script](keys=call.keys, args=call.args, client=pipe)
            replies = pipe.execute(raise_on_error=False)
        except Exception as error:
            for call in calls:
                self.state.failed(call, "", error, time.monotonic(), cluster=False)
            return [None] * len(calls)
        out: list[Any] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):  # the route rests, as after a failed single call
                self.state.failed(call, "", reply, time.monotonic(), cluster=False)
                out.append(None)
            else:
                out.append(reply)
        if all(not isinstance(reply, Exception) for reply in replies):
            self.state.succeeded("")
        return out

    def begin_reloads(self, app_ids: Sequence[str]) -> list[str]:
        """Drop the windows of ``app_ids`` and read the versions their rebuilds store under
        (as :meth:`invalidate` then :meth:`read` of each), in one round trip."""
        calls: list[ScriptCall] = []
        for app_id in app_ids:
            self.memo.forget(app_id)
            calls.append(cache_plan.invalidate_call(app_id, self._policy))
            calls.append(cache_plan.read_call(app_id, self._policy))
        replies = self.run_batch(calls)
        return [cache_plan.read_outcome(reply).version for reply in replies[1::2]]

    def store_batch(
        self, windows: Sequence[tuple[str, Sequence[WindowEntry], Sequence[str], str, int | None]]
    ) -> list[bool]:
        """:meth:`store` of several apps' windows ``(app_id, entries, synthetic call ids,
        expected version, generation)`` in one round trip; whether each was stored."""
        calls = [
            cache_plan.store_call(app_id, self._policy, version, entries, synthetic, generation)
            for app_id, entries, synthetic, version, generation in windows
        ]
        planned = [call for call in calls if call is not None]
        replies = iter(self.run_batch(planned))
        return [call is not None and cache_plan.store_outcome(next(replies)) for call in calls]

    def read(self, app_id: str) -> CachedWindow:
        memo = self.memo
        reply = self._run(cache_plan.read_call(app_id, self._policy, memo.stamp(app_id)))
        return cache_plan.read_outcome(reply, app_id, self._policy.cipher, memo)

    def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
        generation: int | None = None,
    ) -> bool:
        call = cache_plan.store_call(
            app_id, self._policy, expected_version, entries, synthetic_call_ids, generation
        )
        if call is None:
            return False
        return cache_plan.store_outcome(self._run(call))

    def append(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> None:
        """Append when the window is at generation ``before`` (then it is at ``after``); drop
        it otherwise, and when the step is not given."""
        self._run(cache_plan.append_call(app_id, self._policy, entries, before, after))

    def invalidate(self, app_id: str) -> None:
        self.memo.forget(app_id)
        self._run(cache_plan.invalidate_call(app_id, self._policy))

    def purge(self, app_id: str) -> int:
        self.memo.forget(app_id)
        return cache_plan.purge_outcome(self._run(cache_plan.purge_call(app_id)))

    def close(self) -> None:
        self.memo.clear()
        if self._owns_client:
            if self._client is not None:
                self._client.close()
            for helper in self._also_close:
                helper.close()
