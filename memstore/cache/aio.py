"""Window caches for :class:`memstore.aio.AsyncMemoryStore`: ``redis.asyncio`` and in-process.

The Redis cache is the asyncio shell over :class:`memstore.cache.redis_shell.RedisShell`, like
:class:`memstore.cache.redis_window.RedisWindowCache`: the same operations, scripts, replies,
failure and retry decisions (one source); only the calls are awaited. The in-process cache is
:class:`~memstore.cache.memory_cache.InProcessWindowCache` behind an async face.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from memstore.cache.base import AsyncWindowCache as AsyncWindowCache
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_shell import (
    SCRIPTS,
    Action,
    RedisShell,
    Step,
    adriven,
    build_client,
    client_options,
)
from memstore.core.cache_plan import ScriptCall
from memstore.core.redis_url import RedisTarget
from memstore.metrics import Metrics
from memstore.seams import redis_send

AsyncClient = aioredis.Redis | RedisCluster
T = TypeVar("T")
P = ParamSpec("P")

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


def _awaiting(
    method: Callable[Concatenate[InProcessWindowCache, P], T],
) -> Callable[Concatenate[AsyncInProcessWindowCache, P], Coroutine[Any, Any, T]]:
    """The async form of an :class:`InProcessWindowCache` method: the same call (it never
    blocks: plain dict operations under a lock held for no I/O)."""

    async def form(self: AsyncInProcessWindowCache, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(self._cache, *args, **kwargs)

    return functools.wraps(method)(form)


class AsyncInProcessWindowCache:
    """The in-process cache behind an async face (it never blocks: plain dict operations)."""

    def __init__(self, policy: WindowPolicy, *, max_apps: int = 10_000) -> None:
        self._cache = InProcessWindowCache(policy, max_apps=max_apps)

    read = _awaiting(InProcessWindowCache.read)
    store = _awaiting(InProcessWindowCache.store)
    append = _awaiting(InProcessWindowCache.append)
    invalidate = _awaiting(InProcessWindowCache.invalidate)
    purge = _awaiting(InProcessWindowCache.purge)
    close = _awaiting(InProcessWindowCache.close)


def async_client_options(timeout_seconds: float) -> dict[str, Any]:
    """:func:`client_options` with the asyncio ``Retry`` (redis-py 8.2 converts a synchronous
    one, with a warning)."""
    return {**client_options(timeout_seconds), "retry": AsyncRetry(NoBackoff(), 0)}


def make_async_client(
    target: RedisTarget, timeout_seconds: float
) -> tuple[AsyncClient, list[aioredis.Redis]]:
    """An asyncio client for ``target`` (none of them does I/O before its first command), and
    the helper clients to close with it (a Sentinel's connections to the sentinels)."""
    return build_client(target, async_client_options(timeout_seconds), aioredis)


class AsyncRedisWindowCache(RedisShell):
    """Windows in Redis through ``redis.asyncio`` (one server, a cluster or a Sentinel master)."""

    _cluster_class = RedisCluster

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
        super().__init__(
            policy,
            owns_client=owns_client,
            retry_after_seconds=retry_after_seconds,
            metrics=metrics,
            also_close=also_close,
        )
        self._client: AsyncClient = client
        self._scripts = {name: client.register_script(text) for name, text in SCRIPTS.items()}
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        self._timeout: float | None = kwargs.get("socket_timeout")

    @classmethod
    def _reaching(cls, target: RedisTarget, timeout_seconds: float) -> dict[str, Any]:
        client, helpers = make_async_client(target, timeout_seconds)
        return {"client": client, "owns_client": True, "also_close": helpers}

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def _do(self, step: Step) -> Any:
        client = self._client
        if step is Action.REFRESH:
            if isinstance(client, RedisCluster):
                await client.nodes_manager.initialize()
            return None
        script = self._scripts[step.script]
        if isinstance(client, RedisCluster):
            return await script(keys=step.keys, args=step.args)
        try:
            return await self._evalsha(client, script.sha, step)
        except NoScriptError:  # a restarted or flushed server: the script call loads it
            return await script(keys=step.keys, args=step.args)

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

    read = adriven(RedisShell._read_steps)
    store = adriven(RedisShell._store_steps)
    append = adriven(RedisShell._append_steps)
    invalidate = adriven(RedisShell._invalidate_steps)
    purge = adriven(RedisShell._purge_steps)

    async def close(self) -> None:
        """Release the connections the cache owns."""
        self.memo.clear()
        for client in self._owned():
            await client.aclose()
