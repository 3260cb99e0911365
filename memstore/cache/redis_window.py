"""The Redis window cache. Redis failures never reach the caller.

A thin synchronous I/O shell. Every operation is written once, as sans-I/O steps, in
:class:`memstore.cache.redis_shell.RedisShell` over :mod:`memstore.core.cache_plan`, which
decides what each operation sends, how a reply reads, and what a failure means: a failed or
timed-out call counts as a miss (reads go to SQL) or a skipped update (writes are already
durable in SQL, the app is marked dirty and its window dropped on the next successful
contact). After a failure the server (the cluster shard) rests for ``retry_after_seconds``;
other shards keep serving. This module drives those steps with synchronous calls, and adds
the pipelined batches that reloads use.

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
from redis.cluster import RedisCluster

from memstore.cache.base import WindowPolicy
from memstore.cache.redis_shell import (
    CACHE_ERRORS,
    Action,
    RedisShell,
    Step,
    build_client,
    client_options,
    driven,
)
from memstore.cache.redis_shell import SCRIPTS as SCRIPTS
from memstore.cache.redis_shell import refuse_cluster_node as refuse_cluster_node
from memstore.core import cache_plan
from memstore.core.cache_plan import UNAVAILABLE, ScriptCall
from memstore.core.redis_url import RedisTarget
from memstore.core.window import WindowEntry
from memstore.metrics import Metrics

logger = logging.getLogger("memstore")

__all__ = ["CACHE_ERRORS", "UNAVAILABLE", "RedisWindowCache", "client_options", "make_client"]

SyncClient = redis.Redis | RedisCluster


def make_client(
    target: RedisTarget, timeout_seconds: float
) -> tuple[SyncClient, list[redis.Redis]]:
    """A client for ``target``, and the helper clients to close with it (a Sentinel's
    connections to the sentinels). A cluster client contacts the nodes here (call it inside a
    cache-error guard); the others connect on first use."""
    return build_client(target, client_options(timeout_seconds), redis)


class RedisWindowCache(RedisShell):
    """Windows in Redis, one list per app, changed only through the Lua scripts."""

    _cluster_class = RedisCluster

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
        if client is None and connect is None:
            raise ValueError("RedisWindowCache needs a client or a connect factory")
        super().__init__(
            policy,
            owns_client=owns_client or client is None,
            retry_after_seconds=retry_after_seconds,
            metrics=metrics,
            also_close=also_close,
        )
        self._connect = connect
        self._lock = threading.Lock()
        self._client: SyncClient | None = None
        self._scripts: dict[cache_plan.Script, Any] = {}
        if client is not None:
            self._use(client)

    @classmethod
    def _reaching(cls, target: RedisTarget, timeout_seconds: float) -> dict[str, Any]:
        if target.kind == "cluster":  # the cluster client contacts nodes when made: lazily
            return {"client": None, "connect": lambda: make_client(target, timeout_seconds)[0]}
        client, helpers = make_client(target, timeout_seconds)
        return {"client": client, "owns_client": True, "also_close": helpers}

    def _use(self, client: SyncClient) -> None:
        self._scripts = {name: client.register_script(text) for name, text in SCRIPTS.items()}
        self._client = client

    @property
    def client(self) -> SyncClient:
        """The Redis client (connecting now if the cache has not yet)."""
        return self._connected()

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

    def _do(self, step: Step) -> Any:
        client = self._connected()
        if step is Action.REFRESH:
            if isinstance(client, RedisCluster):
                client.nodes_manager.initialize()
            return None
        return self._scripts[step.script](keys=step.keys, args=step.args)

    read = driven(RedisShell._read_steps)
    store = driven(RedisShell._store_steps)
    append = driven(RedisShell._append_steps)
    invalidate = driven(RedisShell._invalidate_steps)
    purge = driven(RedisShell._purge_steps)
    _run = driven(RedisShell._call_steps, "_run")

    def close(self) -> None:
        """Release the connections the cache owns."""
        self.memo.clear()
        for client in self._owned():
            client.close()

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
