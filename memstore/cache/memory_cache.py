"""The in-process window cache: the embedded default when no Redis URL is set.

Same rules as the Redis cache (group-safe eviction, guarded rebuilds, no window created by an
append), kept in a dict; it lives and dies with the process. The number of cached apps is
bounded; the least recently used window goes first.

Other processes cannot reach this dict, so each window remembers the app's SQL generation it
was built at (``generation``); the store compares it with the database's on every read and
rebuilds on a difference, and an append only extends a window that was current just before
the write (``before``).
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from memstore.cache.base import CachedWindow, WindowCacheOf, WindowPolicy
from memstore.core.window import (
    KIND_REQUEST,
    KIND_RESULT,
    WindowEntry,
    can_append_result,
    eviction_count,
    reuses_call_id,
    summary_prefix,
    tail_group_missing,
)

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(slots=True)
class _Slot:
    entries: list[WindowEntry] = field(default_factory=list)
    synthetic: set[str] = field(default_factory=set)
    expires_at: float = 0.0
    generation: int | None = None


class InProcessWindowCache:
    """Windows in a bounded in-process LRU map."""

    def __init__(self, policy: WindowPolicy, *, max_apps: int = 10_000) -> None:
        self._policy = policy
        self._max_apps = max_apps
        self._lock = threading.Lock()
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        # Versions come from one process-wide counter, so a pruned version can never be
        # mistaken for a later one.
        self._versions: dict[str, int] = {}
        self._counter = itertools.count(1)

    def _live_slot(self, app_id: str) -> _Slot | None:
        slot = self._slots.get(app_id)
        if slot is None:
            return None
        if slot.expires_at <= time.monotonic():
            del self._slots[app_id]
            return None
        self._slots.move_to_end(app_id)
        return slot

    def _bump(self, app_id: str) -> None:
        self._versions[app_id] = next(self._counter)
        if len(self._versions) > 4 * self._max_apps:
            for stale in [a for a in self._versions if a not in self._slots and a != app_id]:
                del self._versions[stale]

    def read(self, app_id: str) -> CachedWindow:
        with self._lock:
            slot = self._live_slot(app_id)
            version = str(self._versions.get(app_id, 0))
            if slot is None:
                return CachedWindow(None, version)
            messages = [entry.message for entry in slot.entries]
            return CachedWindow(messages, version, slot.generation)

    def store(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
        generation: int | None = None,
    ) -> bool:
        """See :meth:`WindowCacheOf.store`; ``generation`` is the app's SQL generation read
        before the window's rows were."""
        with self._lock:
            if str(self._versions.get(app_id, 0)) != expected_version or not entries:
                return False
            self._slots[app_id] = _Slot(
                list(entries),
                set(synthetic_call_ids),
                time.monotonic() + self._policy.ttl_seconds,
                generation,
            )
            self._slots.move_to_end(app_id)
            while len(self._slots) > self._max_apps:
                self._slots.popitem(last=False)
            return True

    def append(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> None:
        """See :meth:`WindowCacheOf.append`. With ``before``/``after`` (the app's SQL generation
        just before and after the write), a window not at ``before`` missed a write of another
        process and is dropped instead of extended."""
        with self._lock:
            self._bump(app_id)
            slot = self._live_slot(app_id)
            if slot is None:
                return
            if after is not None:
                if slot.generation != before:
                    del self._slots[app_id]
                    return
                slot.generation = after
            for entry in entries:
                if entry.kind == KIND_RESULT:
                    call_id = entry.call_ids[0]
                    verdict = (
                        "invalidate"
                        if call_id in slot.synthetic
                        else can_append_result(
                            [(e.kind, e.call_ids) for e in slot.entries], call_id
                        )
                    )
                    if verdict == "invalidate":
                        del self._slots[app_id]
                        return
                    if verdict == "skip":
                        continue
                elif tail_group_missing(known := [(e.kind, e.call_ids) for e in slot.entries]) or (
                    entry.kind == KIND_REQUEST and reuses_call_id(known, entry.call_ids)
                ):
                    del self._slots[app_id]
                    return
                slot.entries.append(entry)
            drop = eviction_count(
                [e.kind for e in slot.entries],
                self._policy.max_messages,
                start_at_user=self._policy.start_at_user,
                tokens=[e.tokens for e in slot.entries],
                max_tokens=self._policy.max_tokens,
            )
            skip = summary_prefix([e.kind for e in slot.entries])
            if drop >= len(slot.entries) - skip:
                del self._slots[app_id]
                return
            del slot.entries[skip : skip + drop]
            slot.expires_at = time.monotonic() + self._policy.ttl_seconds

    def invalidate(self, app_id: str) -> None:
        with self._lock:
            self._bump(app_id)
            self._slots.pop(app_id, None)

    def purge(self, app_id: str) -> int:
        with self._lock:
            existed = int(self._slots.pop(app_id, None) is not None)
            self._bump(app_id)  # a rebuild that read the app before the purge is refused
            return existed

    def close(self) -> None:
        with self._lock:
            self._slots.clear()


def _always(
    result: T, method: Callable[Concatenate[Any, P], object]
) -> Callable[Concatenate[NoWindowCache, P], T]:
    """A method with the signature of ``method`` that does nothing and returns ``result``."""

    def form(self: NoWindowCache, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return result

    return functools.wraps(method)(form)


class NoWindowCache:
    """Keeps no window: every read rebuilds from SQL and nothing is stored.

    For short-lived processes (the CLI without Redis), where an in-process window would die
    with the process anyway and ``reload --all`` would otherwise hold every app's window.
    Each method is the :class:`~memstore.cache.base.WindowCacheOf` one, answering a constant.
    """

    read = _always(CachedWindow(None, ""), WindowCacheOf.read)
    store = _always(False, WindowCacheOf.store)
    append = _always(None, WindowCacheOf.append)
    invalidate = _always(None, WindowCacheOf.invalidate)
    purge = _always(0, WindowCacheOf.purge)
    close = _always(None, WindowCacheOf.close)
