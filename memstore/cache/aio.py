"""Window caches for :class:`memstore.aio.AsyncMemoryStore`: ``redis.asyncio`` and in-process.

Same scripts, argument layouts and failure rules as :mod:`memstore.cache.redis_window`; only
the calls are awaited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import redis.asyncio as aioredis

from memstore.cache import keys, scripts
from memstore.cache.base import CachedWindow, WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import (
    CACHE_ERRORS,
    UNAVAILABLE,
    CacheHealth,
    append_args,
    cached_window,
    client_options,
    store_args,
)
from memstore.core.window import WindowEntry

T = TypeVar("T")


class AsyncWindowCache(Protocol):
    """The asyncio form of :class:`memstore.cache.base.WindowCache` (same promises)."""

    async def read(self, app_id: str) -> CachedWindow: ...

    async def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
    ) -> bool: ...

    async def append(self, app_id: str, entries: Sequence[WindowEntry]) -> None: ...

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


class AsyncRedisWindowCache:
    """Windows in Redis through ``redis.asyncio``."""

    def __init__(
        self,
        client: aioredis.Redis,
        policy: WindowPolicy,
        *,
        owns_client: bool = False,
        retry_after_seconds: float = 1.0,
    ) -> None:
        self._client = client
        self._policy = policy
        self._owns_client = owns_client
        self._append = client.register_script(scripts.APPEND)
        self._store = client.register_script(scripts.STORE)
        self._health = CacheHealth(retry_after_seconds)

    @classmethod
    def from_url(
        cls, url: str, policy: WindowPolicy, timeout_seconds: float
    ) -> AsyncRedisWindowCache:
        """Connect to ``url``; the cache closes the client it made."""
        client = aioredis.Redis.from_url(url, **client_options(timeout_seconds))
        return cls(client, policy, owns_client=True)

    @property
    def client(self) -> aioredis.Redis:
        return self._client

    def set_skip_listener(self, listener: Callable[[str], None] | None) -> None:
        """See :meth:`memstore.cache.redis_window.RedisWindowCache.set_skip_listener`."""
        self._health.on_skipped = listener

    async def _call(
        self, what: str, app_id: str, action: Callable[[], Awaitable[T]], *, dirty: bool
    ) -> T | None:
        if self._health.resting(app_id, dirty=dirty):
            return None
        try:
            for stale in self._health.dirty_apps():
                await self._invalidate_now(stale)
                self._health.cleaned(stale)
            return await action()
        except CACHE_ERRORS as error:
            self._health.failed(what, app_id, error, dirty=dirty)
            return None

    async def _invalidate_now(self, app_id: str) -> None:
        window, interrupted, version = keys.app_keys(app_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.delete(window, interrupted)
        pipe.incr(version)
        pipe.expire(version, self._policy.ttl_seconds)
        await pipe.execute()

    async def read(self, app_id: str) -> CachedWindow:
        async def action() -> CachedWindow:
            raw = await self._client.lrange(keys.window_key(app_id), 0, -1)
            if raw:
                hit = cached_window(raw, b"")
                if hit.messages is not None:
                    return hit
                # An entry did not decode: a miss guarded by the real version (see the sync
                # cache), so the rebuild replaces the bad window.
            return cached_window([], await self._client.get(keys.version_key(app_id)))

        result = await self._call("read", app_id, action, dirty=False)
        return result if result is not None else CachedWindow(None, UNAVAILABLE)

    async def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
    ) -> bool:
        if expected_version == UNAVAILABLE or not entries:
            return False
        args = store_args(self._policy, expected_version, entries, synthetic_call_ids)
        app_keys = list(keys.app_keys(app_id))

        async def action() -> object:
            return await self._store(keys=app_keys, args=args)

        return await self._call("store", app_id, action, dirty=False) == 1

    async def append(self, app_id: str, entries: Sequence[WindowEntry]) -> None:
        args = append_args(self._policy, entries)
        app_keys = list(keys.app_keys(app_id))

        async def action() -> object:
            return await self._append(keys=app_keys, args=args)

        await self._call("append", app_id, action, dirty=True)

    async def invalidate(self, app_id: str) -> None:
        await self._call("invalidate", app_id, lambda: self._invalidate_now(app_id), dirty=True)

    async def purge(self, app_id: str) -> int:
        async def action() -> int:
            return int(await self._client.delete(*keys.app_keys(app_id)))

        return await self._call("purge", app_id, action, dirty=True) or 0

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()
