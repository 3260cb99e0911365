"""Counters a store keeps about itself: cache hits and misses, rebuilds, fallbacks to SQL,
widened groups, interrupted answers, id collisions, lease renewals.

Each store owns one :class:`Metrics`; :meth:`MemoryStore.metrics` returns a plain snapshot.
Counting never does I/O and never raises, so any layer (a cache, the loader's caller, the lease
renewal) can count without caring who reads the numbers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable

COUNTERS: tuple[str, ...] = (
    "cache_hits",
    "cache_misses",
    "cache_rebuilds",
    "cache_fallbacks",
    "cache_errors",
    "widened_groups",
    "interrupted_answers",
    "id_collisions",
    "lease_renewals",
)
"""Every counter name a snapshot holds, in a stable order."""

Listener = Callable[[str, int], None]
"""Called with ``(counter, amount)`` after each increment (an exporter, for example)."""


class Metrics:
    """Thread-safe monotonic counters with fixed names (see :data:`COUNTERS`)."""

    def __init__(self, names: Iterable[str] = COUNTERS) -> None:
        self._counts: dict[str, int] = dict.fromkeys(names, 0)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def incr(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name``; an unknown name is a programming error."""
        if name not in self._counts:
            raise KeyError(f"unknown memstore counter {name!r}")
        if amount <= 0:
            return
        with self._lock:
            self._counts[name] += amount
            listeners = tuple(self._listeners)
        for listener in listeners:
            with contextlib.suppress(Exception):  # an exporter's failure never reaches the caller
                listener(name, amount)

    def snapshot(self) -> dict[str, int]:
        """The current value of every counter, as a new plain dict."""
        with self._lock:
            return dict(self._counts)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(name, amount)`` after every increment from now on."""
        with self._lock:
            self._listeners.append(listener)
