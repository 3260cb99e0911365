"""The Redis window cache. Redis failures never reach the caller.

A failed or timed-out call counts as a miss (reads go to SQL) or a skipped update (writes are
already durable in SQL). Apps whose update was skipped are remembered and their windows are
dropped on the next successful contact, so a window that missed a write is rebuilt rather
than served stale. After a failure the cache rests for ``retry_after_seconds`` instead of
paying the timeout on every call.

The argument layouts and the failure bookkeeping here are shared with the asyncio twin in
:mod:`memstore.cache.aio`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from pydantic import ValidationError
from redis.backoff import NoBackoff
from redis.retry import Retry

from memstore.cache import keys, scripts
from memstore.cache.base import CachedWindow, WindowPolicy, decode_entries, encode_entry
from memstore.core.window import WindowEntry
from memstore.errors import MemstoreError

logger = logging.getLogger("memstore")

T = TypeVar("T")

CACHE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
UNAVAILABLE = "\x00unavailable"
"""The version of a read that failed; a rebuild guarded by it is never stored."""


def client_options(timeout_seconds: float) -> dict[str, Any]:
    """Fail fast: short timeouts, no retries (the cache is optional)."""
    return {
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        "retry": Retry(NoBackoff(), 0),
    }


def append_args(policy: WindowPolicy, entries: Sequence[WindowEntry]) -> list[Any]:
    """ARGV of :data:`scripts.APPEND`."""
    return [
        policy.ttl_seconds,
        policy.max_messages,
        "1" if policy.start_at_user else "0",
        policy.max_tokens or 0,
        *(encode_entry(entry) for entry in entries),
    ]


def store_args(
    policy: WindowPolicy,
    expected_version: str,
    entries: Sequence[WindowEntry],
    synthetic_call_ids: Sequence[str],
) -> list[Any]:
    """ARGV of :data:`scripts.STORE`."""
    return [
        expected_version,
        policy.ttl_seconds,
        len(synthetic_call_ids),
        *synthetic_call_ids,
        *(encode_entry(entry) for entry in entries),
    ]


def cached_window(raw: Sequence[Any], version: Any) -> CachedWindow:
    """A read's outcome from the LRANGE and GET replies (bytes: memstore's clients never
    decode responses).

    An entry that does not decode (written by another memstore version, or damaged) makes the
    read a miss: the rebuild replaces the whole window.
    """
    token = version.decode() if version is not None else ""
    if not raw:
        return CachedWindow(None, token)
    try:
        return CachedWindow(decode_entries(raw), token)
    except (ValidationError, MemstoreError, ValueError) as error:
        # the error's class only: a validation error quotes the entry, i.e. chat text
        logger.warning(
            "memstore: a cached window does not decode (%s); rebuilding it", type(error).__name__
        )
        return CachedWindow(None, token)


class CacheHealth:
    """Failure bookkeeping shared by the sync and async Redis caches (thread-safe)."""

    def __init__(self, retry_after_seconds: float) -> None:
        self._retry_after = retry_after_seconds
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._resting_until = 0.0
        self.on_skipped: Callable[[str], None] | None = None
        """Called with the app id whenever an update of its window is skipped (the store
        stamps the app as stale in SQL); plain and quick, no I/O."""

    def resting(self, app_id: str, *, dirty: bool) -> bool:
        """True while the cache rests after a failure; a skipped write marks the app dirty."""
        if time.monotonic() >= self._resting_until:
            return False
        if dirty:
            self.mark_dirty(app_id)
        return True

    def failed(self, what: str, app_id: str, error: BaseException, *, dirty: bool) -> None:
        with self._lock:
            self._resting_until = time.monotonic() + self._retry_after
        if dirty:
            self.mark_dirty(app_id)
        logger.warning(
            "memstore: Redis %s failed for app %r (%s); serving from SQL", what, app_id, error
        )

    def mark_dirty(self, app_id: str) -> None:
        with self._lock:
            self._dirty.add(app_id)
        listener = self.on_skipped
        if listener is not None:
            listener(app_id)

    def dirty_apps(self) -> list[str]:
        with self._lock:
            return list(self._dirty)

    def cleaned(self, app_id: str) -> None:
        with self._lock:
            self._dirty.discard(app_id)


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
        self._append = client.register_script(scripts.APPEND)
        self._store = client.register_script(scripts.STORE)
        self._health = CacheHealth(retry_after_seconds)

    @classmethod
    def from_url(cls, url: str, policy: WindowPolicy, timeout_seconds: float) -> RedisWindowCache:
        """Connect to ``url``; the cache closes the client it made."""
        client = redis.Redis.from_url(url, **client_options(timeout_seconds))
        return cls(client, policy, owns_client=True)

    @property
    def client(self) -> redis.Redis:
        return self._client

    def set_skip_listener(self, listener: Callable[[str], None] | None) -> None:
        """Call ``listener(app_id)`` whenever an update of the app's window (append,
        invalidate, purge) is skipped because Redis failed or the cache rests."""
        self._health.on_skipped = listener

    def _call(self, what: str, app_id: str, action: Callable[[], T], *, dirty: bool) -> T | None:
        if self._health.resting(app_id, dirty=dirty):
            return None
        try:
            for stale in self._health.dirty_apps():
                self._invalidate_now(stale)
                self._health.cleaned(stale)
            return action()
        except CACHE_ERRORS as error:
            self._health.failed(what, app_id, error, dirty=dirty)
            return None

    def _invalidate_now(self, app_id: str) -> None:
        window, interrupted, version = keys.app_keys(app_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.delete(window, interrupted)
        pipe.incr(version)
        pipe.expire(version, self._policy.ttl_seconds)
        pipe.execute()

    def read(self, app_id: str) -> CachedWindow:
        def action() -> CachedWindow:
            raw = self._client.lrange(keys.window_key(app_id), 0, -1)
            if raw:
                hit = cached_window(raw, b"")
                if hit.messages is not None:
                    return hit
                # An entry did not decode: a miss like any other, guarded by the real version
                # (not b""), or the rebuild's STORE is refused and the bad window stays.
            # A miss: the version guards the rebuild; reading it after the miss and before the
            # SQL read is enough, and keeps a hit at exactly one LRANGE.
            return cached_window([], self._client.get(keys.version_key(app_id)))

        result = self._call("read", app_id, action, dirty=False)
        return result if result is not None else CachedWindow(None, UNAVAILABLE)

    def store(
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
        stored = self._call(
            "store", app_id, lambda: self._store(keys=app_keys, args=args), dirty=False
        )
        return stored == 1

    def append(self, app_id: str, entries: Sequence[WindowEntry]) -> None:
        args = append_args(self._policy, entries)
        app_keys = list(keys.app_keys(app_id))
        self._call("append", app_id, lambda: self._append(keys=app_keys, args=args), dirty=True)

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
