"""What a window cache promises; the plain data it trades in and the entry codec the Redis caches
share live in :mod:`memstore.core.cache_entries` and are re-exported here."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeAlias, TypeVar

from memstore.core.cache_entries import (
    HEADER_END,
    ID_SEPARATOR,
    TOKENS_SEPARATOR,
    CachedWindow,
    WindowMemo,
    WindowPolicy,
    decode_entries,
    encode_entry,
)
from memstore.core.window import WindowEntry

Window = TypeVar("Window", covariant=True)
Stored = TypeVar("Stored", covariant=True)
Done = TypeVar("Done", covariant=True)
Count = TypeVar("Count", covariant=True)


class WindowCacheOf(Protocol[Window, Stored, Done, Count]):
    """A rebuildable projection of the newest messages of each app. Never a point of failure:
    implementations swallow their own errors, report a miss, and log a warning.

    The promises once for both forms: :data:`WindowCache` (results as they are) and
    :data:`AsyncWindowCache` (each result awaited)."""

    def read(self, app_id: str) -> Window:
        """The cached window, or a miss; the version is taken in the same step."""
        ...

    def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
        generation: int | None = None,
    ) -> Stored:
        """Replace the window unless a write happened since ``expected_version`` was read;
        ``generation``: the app's SQL generation the window reflects (caches that check
        appends against it keep it)."""
        ...

    def append(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> Done:
        """Append and trim group-safe; do nothing when no window is cached. ``before`` and
        ``after``: the app's SQL generation just before and after the write; a cache that
        keeps generations drops a window not at ``before`` instead of extending it."""
        ...

    def invalidate(self, app_id: str) -> Done:
        """Drop the window so the next read rebuilds it."""
        ...

    def purge(self, app_id: str) -> Count:
        """Delete every key of the app; return how many existed."""
        ...

    def close(self) -> Done:
        """Release connections the cache owns."""
        ...


WindowCache: TypeAlias = WindowCacheOf[CachedWindow, bool, None, int]
"""What a window cache promises (see :class:`WindowCacheOf`)."""
AsyncWindowCache: TypeAlias = WindowCacheOf[
    Awaitable[CachedWindow], Awaitable[bool], Awaitable[None], Awaitable[int]
]
"""The asyncio form of :data:`WindowCache` (same promises; each method a coroutine)."""

__all__ = [
    "HEADER_END",
    "ID_SEPARATOR",
    "TOKENS_SEPARATOR",
    "AsyncWindowCache",
    "CachedWindow",
    "WindowCache",
    "WindowCacheOf",
    "WindowMemo",
    "WindowPolicy",
    "decode_entries",
    "encode_entry",
]
