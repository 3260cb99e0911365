"""Window caches for :class:`memstore.aio.AsyncMemoryStore`: ``redis.asyncio`` and in-process.

The Redis cache is the asyncio shell over :mod:`memstore.core.cache_plan`, like
:class:`memstore.cache.redis_window.RedisWindowCache`: same scripts, replies, failure and
retry decisions; only the calls are awaited.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from memstore.cache import keys
from memstore.cache.base import CachedWindow, WindowMemo, WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import (
    SCRIPTS,
    _credentials,
    client_options,
    refuse_cluster_node,
)
from memstore.core import cache_plan
from memstore.core.cache_plan import CacheState, ScriptCall
from memstore.core.redis_url import RedisTarget, parse_redis_url
from memstore.core.window import WindowEntry
from memstore.errors import ConfigurationError
from memstore.metrics import Metrics
from memstore.seams import redis_send

AsyncClient = aioredis.Redis | RedisCluster
T = TypeVar("T")

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # the sync client packs with hiredis by itself; the asyncio one does not
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - without the `fast` extra
    _hiredis_pack = None


def _pack(connection: Any, args: tuple[Any, ...]) -> list[bytes]:
    if _hiredis_pack is not None:
        return [_hiredis_pack(args)]
    return list(connection.pack_command(*args))


async def _within(seconds: float | None, work: Coroutine[Any, Any, T]) -> T:
    """``work``, cancelled after ``seconds`` (``asyncio.timeout``: no extra task per call)."""
    if seconds is None:
        return await work
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)  # pragma: no cover - Python 3.10


class AsyncWindowCache(Protocol):
    """The asyncio form of :class:`memstore.cache.base.WindowCache` (same promises)."""

    async def read(self, app_id: str) -> CachedWindow: ...

    async def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
        generation: int | None = None,
    ) -> bool: ...

    async def append(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> None: ...

    async def invalidate(self, app_id: str) -> None: ...

    async def purge(self, app_id: str) -> int: ...

    async def close(self) -> None: ...


class AsyncInProcessWindowCache:
    """The in-process cache behind an async face (it never blocks: plain dict operations)."""

    def __init__(self, policy: WindowPolicy, *, max_apps: int = 10_000) -> None:
        self._cache = InProcessWindowCache(policy, max_apps=max_apps)

    async def read(self, app_id: str) -> CachedWindow:
        return self._cache.read(app_id)

    async def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
        generation: int | None = None,
    ) -> bool:
        return self._cache.store(app_id, entries, synthetic_call_ids, expected_version, generation)

    async def append(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> None:
        self._cache.append(app_id, entries, before=before, after=after)

    async def invalidate(self, app_id: str) -> None:
        self._cache.invalidate(app_id)

    async def purge(self, app_id: str) -> int:
        return self._cache.purge(app_id)

    async def close(self) -> None:
        self._cache.close()


def async_client_options(timeout_seconds: float) -> dict[str, Any]:
    """:func:`client_options` with the asyncio ``Retry`` (redis-py 8.2 converts a synchronous
    one, with a warning)."""
    return {**client_options(timeout_seconds), "retry": AsyncRetry(NoBackoff(), 0)}


def make_async_client(
    target: RedisTarget, timeout_seconds: float
) -> tuple[AsyncClient, list[aioredis.Redis]]:
    """An asyncio client for ``target`` (none of them does I/O before its first command), and
    the helper clients to close with it (a Sentinel's connections to the sentinels)."""
    options = async_client_options(timeout_seconds)
    if target.kind == "cluster":
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
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
        client: aioredis.Redis = sentinel.master_for(target.master_name, db=target.db)
        return client, list(sentinel.sentinels)
    return aioredis.Redis.from_url(target.url, **options), []


class AsyncRedisWindowCache:
    """Windows in Redis through ``redis.asyncio`` (one server, a cluster or a Sentinel master)."""

    guards_generations = True
    """Stores pass each write's generation step to :meth:`append` and the generation a
    rebuild read after its rows to :meth:`store` (see :mod:`memstore.cache.scripts`)."""

    def __init__(
        self,
        client: AsyncClient,
        policy: WindowPolicy,
        *,
        owns_client: bool = False,
        retry_after_seconds: float = 1.0,
        metrics: Metrics | None = None,
        also_close: Sequence[aioredis.Redis] = (),
    ) -> None:
        """``also_close``: helper clients :meth:`close` closes too (when the cache owns its
        client)."""
        self._client = client
        self._also_close = list(also_close)
        self._policy = policy
        self._owns_client = owns_client
        self._scripts = {name: client.register_script(text) for name, text in SCRIPTS.items()}
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        self._timeout: float | None = kwargs.get("socket_timeout")
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
    ) -> AsyncRedisWindowCache:
        """Connect to ``url`` (any form of :mod:`memstore.core.redis_url`); the cache closes
        the client it made. A plain URL that reaches a cluster node raises
        :class:`ConfigurationError` (checked with a short blocking probe)."""
        try:
            target = parse_redis_url(url)
        except ValueError as error:
            raise ConfigurationError(f"invalid redis_url: {error}") from error
        refuse_cluster_node(target, timeout_seconds)
        client, helpers = make_async_client(target, timeout_seconds)
        return cls(client, policy, owns_client=True, metrics=metrics, also_close=helpers)

    @property
    def client(self) -> AsyncClient:
        return self._client

    @property
    def is_cluster(self) -> bool:
        return isinstance(self._client, RedisCluster)

    def _route_of(self, app_id: str) -> str:
        client = self._client
        if not isinstance(client, RedisCluster):
            return ""
        try:
            node = client.get_node_from_key(keys.window_key(app_id))
        except Exception:  # no slot map yet
            return "?"
        return "?" if node is None else str(node.name)

    def set_skip_listener(self, listener: Callable[[str], None] | None) -> None:
        """Call ``listener(app_id)`` whenever an update of the app's window (append,
        invalidate, purge) is skipped because Redis failed or its route rests (the stores
        stamp the app stale in SQL: see ``stale_window_max_seconds``)."""
        self.state.set_dirty_listener(listener)

    async def _run(self, call: ScriptCall) -> Any:
        route = self._route_of(call.app_id)
        step = self.state.begin(call, route, time.monotonic(), self._route_of)
        if step is None:
            return None
        try:
            if step.refresh and isinstance(self._client, RedisCluster):
                await self._client.nodes_manager.initialize()
                self.state.refreshed(route)
            for stale, marks in step.replay:
                await self._execute(cache_plan.invalidate_call(stale, self._policy))
                self.state.cleaned(stale, marks)
            reply = await self._execute(call)
        except Exception as error:
            # (CACHE_ERRORS and whatever else the client raises: the write is durable in SQL)
            self.state.failed(call, route, error, time.monotonic(), cluster=self.is_cluster)
            return None
        self.state.succeeded(route)
        return reply

    async def _execute(self, call: ScriptCall) -> Any:
        script = self._scripts[call.script]
        client = self._client
        if isinstance(client, RedisCluster):
            return await script(keys=call.keys, args=call.args)
        try:
            return await self._evalsha(client, script.sha, call)
        except NoScriptError:  # a restarted or flushed server: the script call loads it
            return await script(keys=call.keys, args=call.args)

    async def _evalsha(self, client: aioredis.Redis, sha: str, call: ScriptCall) -> Any:
        """One EVALSHA on a pooled connection, under one deadline for the send and the reply
        (the client's per-send ``wait_for`` cost a task per call: most of a hot read)."""
        pool = client.connection_pool
        connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            command = _pack(connection, ("EVALSHA", sha, len(call.keys), *call.keys, *call.args))
            return await _within(self._timeout, self._exchange(connection, command))
        except aioredis.ResponseError:
            raise  # the reply was read whole: the connection stays usable
        except BaseException:
            await connection.disconnect(nowait=True)
            raise
        finally:
            await pool.release(connection)

    @staticmethod
    async def _exchange(connection: Any, command: list[bytes]) -> Any:
        if not connection.is_connected:
            await connection.connect()
        await redis_send(connection, command)
        return await connection.read_response()

    async def read(self, app_id: str) -> CachedWindow:
        memo = self.memo
        reply = await self._run(cache_plan.read_call(app_id, self._policy, memo.stamp(app_id)))
        return cache_plan.read_outcome(reply, app_id, self._policy.cipher, memo)

    async def store(
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
        return cache_plan.store_outcome(await self._run(call))

    async def append(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> None:
        """Append when the window is at generation ``before`` (then it is at ``after``); drop
        it otherwise, and when the step is not given."""
        await self._run(cache_plan.append_call(app_id, self._policy, entries, before, after))

    async def invalidate(self, app_id: str) -> None:
        self.memo.forget(app_id)
        await self._run(cache_plan.invalidate_call(app_id, self._policy))

    async def purge(self, app_id: str) -> int:
        self.memo.forget(app_id)
        return cache_plan.purge_outcome(await self._run(cache_plan.purge_call(app_id)))

    async def close(self) -> None:
        self.memo.clear()
        if self._owns_client:
            await self._client.aclose()
            for helper in self._also_close:
                await helper.aclose()
