"""The Redis window cache. Redis failures never reach the caller.

A failed or timed-out call counts as a miss (reads go to SQL) or a skipped update (writes are
already durable in SQL). Apps whose update was skipped are remembered and their windows are
dropped on the next successful contact, so a window that missed a write is rebuilt rather
than served stale. After a failure the cache rests for ``retry_after_seconds`` instead of
paying the timeout on every call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from memstore.cache import keys, scripts
from memstore.cache.base import CachedWindow, WindowPolicy, decode_entries, encode_entry
from memstore.core.window import WindowEntry

logger = logging.getLogger("memstore")

T = TypeVar("T")

CACHE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)


def client_from_url(url: str, timeout_seconds: float) -> redis.Redis:
    """A client that fails fast: short timeouts, no retries (the cache is optional)."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 0),
    )


class RedisWindowCache:
    """Windows in Redis, one list per app, changed only through the Lua scripts."""

    def __init__(
        self,
        client: redis.Redis,
        policy: WindowPolicy,
        *,
        owns_client: bool = False,
        retry_after_seconds: float = 1.0,
    ) -> None:
        self._client = client
        self._policy = policy
        self._owns_client = owns_client
        self._retry_after = retry_after_seconds
        self._append = client.register_script(scripts.APPEND)
        self._store = client.register_script(scripts.STORE)
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._resting_until = 0.0

    @classmethod
    def from_url(cls, url: str, policy: WindowPolicy, timeout_seconds: float) -> RedisWindowCache:
        """Connect to ``url``; the cache closes the client it made."""
        return cls(client_from_url(url, timeout_seconds), policy, owns_client=True)

    @property
    def client(self) -> redis.Redis:
        return self._client

    # -- failure handling ------------------------------------------------------------------

    def _call(self, what: str, app_id: str, action: Callable[[], T], *, dirty: bool) -> T | None:
        if time.monotonic() < self._resting_until:
            if dirty:
                self._mark_dirty(app_id)
            return None
        try:
            self._drop_dirty_windows()
            return action()
        except CACHE_ERRORS as error:
            with self._lock:
                self._resting_until = time.monotonic() + self._retry_after
            if dirty:
                self._mark_dirty(app_id)
            logger.warning(
                "memstore: Redis %s failed for app %r (%s); serving from SQL", what, app_id, error
            )
            return None

    def _mark_dirty(self, app_id: str) -> None:
        with self._lock:
            self._dirty.add(app_id)

    def _drop_dirty_windows(self) -> None:
        if not self._dirty:
            return
        with self._lock:
            pending = list(self._dirty)
        for app_id in pending:
            self._invalidate_now(app_id)
            with self._lock:
                self._dirty.discard(app_id)

    def _invalidate_now(self, app_id: str) -> None:
        window, interrupted, version = keys.app_keys(app_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.delete(window, interrupted)
        pipe.incr(version)
        pipe.expire(version, self._policy.ttl_seconds)
        pipe.execute()

    # -- the WindowCache protocol -----------------------------------------------------------

    def read(self, app_id: str) -> CachedWindow:
        def action() -> CachedWindow:
            pipe = self._client.pipeline(transaction=False)
            pipe.lrange(keys.window_key(app_id), 0, -1)
            pipe.get(keys.version_key(app_id))
            raw, version = pipe.execute()
            token = version.decode() if version is not None else ""
            return CachedWindow(decode_entries(raw) if raw else None, token)

        result = self._call("read", app_id, action, dirty=False)
        return result if result is not None else CachedWindow(None, _UNAVAILABLE)

    def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
    ) -> bool:
        if expected_version == _UNAVAILABLE or not entries:
            return False
        args: list[Any] = [
            expected_version,
            self._policy.ttl_seconds,
            len(synthetic_call_ids),
            *synthetic_call_ids,
            *(encode_entry(entry) for entry in entries),
        ]
        stored = self._call(
            "store",
            app_id,
            lambda: self._store(keys=list(keys.app_keys(app_id)), args=args),
            dirty=False,
        )
        return stored == 1

    def append(self, app_id: str, entries: Sequence[WindowEntry]) -> None:
        args: list[Any] = [
            self._policy.ttl_seconds,
            self._policy.max_messages,
            "1" if self._policy.start_at_user else "0",
            *(encode_entry(entry) for entry in entries),
        ]
        self._call(
            "append",
            app_id,
            lambda: self._append(keys=list(keys.app_keys(app_id)), args=args),
            dirty=True,
        )

    def invalidate(self, app_id: str) -> None:
        self._call("invalidate", app_id, lambda: self._invalidate_now(app_id), dirty=True)

    def purge(self, app_id: str) -> int:
        deleted = self._call(
            "purge", app_id, lambda: int(self._client.delete(*keys.app_keys(app_id))), dirty=True
        )
        return deleted or 0

    def close(self) -> None:
        if self._owns_client:
            self._client.close()


_UNAVAILABLE = "\x00unavailable"
