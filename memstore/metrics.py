"""Counters a store keeps about itself: cache hits and misses, rebuilds, fallbacks to SQL,
widened groups, interrupted answers, id collisions, lease renewals.

Each store owns one :class:`Metrics`; :meth:`MemoryStore.metrics` returns a plain snapshot.
Counting never does I/O and never raises, so any layer (a cache, the loader's caller, the lease
renewal) can count without caring who reads the numbers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memstore.extras import needs_extra

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
    "rows_reused",
    "rows_decoded",
)
"""Every counter name a snapshot holds, in a stable order."""

DESCRIPTIONS: dict[str, str] = {
    "cache_hits": "Window reads served from the cache",
    "cache_misses": "Window reads the cache could not serve (absent, stale or unavailable)",
    "cache_rebuilds": "Windows rebuilt from SQL and stored in the cache",
    "cache_fallbacks": "Cache calls that failed or were skipped, answered from SQL instead",
    "cache_errors": "Cache client errors (timeouts, refused connections, cluster errors)",
    "widened_groups": "Windows the loader widened to keep a tool group whole",
    "interrupted_answers": "Synthetic interrupted results for tool calls without a result",
    "id_collisions": "Writes retried because another process used the same snowflake id",
    "lease_renewals": "Successful renewals of the worker-id lease",
    "rows_reused": "Rows of window reads from SQL taken from the decoded-row memo",
    "rows_decoded": "Rows of window reads from SQL decoded anew (the decoded-row memo on)",
}
"""What each counter counts (the OpenTelemetry instruments' descriptions)."""

OTEL_PREFIX = "memstore."
"""An OpenTelemetry instrument is named ``memstore.<counter>``, e.g. ``memstore.cache_hits``."""

Listener = Callable[[str, int], None]
"""Called with ``(counter, amount)`` after each increment (an exporter, for example)."""


class Metrics:
    """Thread-safe monotonic counters with fixed names (see :data:`COUNTERS`)."""

    def __init__(self, names: Iterable[str] = COUNTERS) -> None:
        self._counts: dict[str, int] = dict.fromkeys(names, 0)
        self._lock = threading.Lock()
        self._listeners: tuple[Listener, ...] = ()

    def incr(self, name: str, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``name``; an unknown name is a programming error."""
        if name not in self._counts:
            raise KeyError(f"unknown memstore counter {name!r}")
        if amount <= 0:
            return
        self._lock.acquire()  # cheaper than ``with`` on the hot read path
        try:
            self._counts[name] += amount
        finally:
            self._lock.release()
        for listener in self._listeners:  # replaced, never mutated: no copy needed
            with contextlib.suppress(Exception):  # an exporter's failure never reaches the caller
                listener(name, amount)

    def snapshot(self) -> dict[str, int]:
        """The current value of every counter, as a new plain dict."""
        with self._lock:
            return dict(self._counts)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(name, amount)`` after every increment from now on."""
        with self._lock:
            self._listeners = (*self._listeners, listener)


_INSTRUMENTS: dict[int, tuple[Any, dict[str, Any]]] = {}
_INSTRUMENTS_LOCK = threading.Lock()


def _counters(meter: Any) -> dict[str, Any]:
    """One OpenTelemetry ``Counter`` per memstore counter and meter, made once per process
    (every store exporting to one meter adds to the same instruments)."""
    with _INSTRUMENTS_LOCK:
        known = _INSTRUMENTS.get(id(meter))
        if known is not None and known[0] is meter:
            return known[1]
        counters = {
            name: meter.create_counter(OTEL_PREFIX + name, unit="1", description=DESCRIPTIONS[name])
            for name in COUNTERS
        }
        _INSTRUMENTS[id(meter)] = (meter, counters)  # the meter is kept: its id stays unique
        return counters


def otel_listener(
    meter: Any = None, attributes: Mapping[str, str | int | bool] | None = None
) -> Listener:
    """A listener that adds every increment to an OpenTelemetry ``Counter`` named
    ``memstore.<counter>`` on ``meter`` (default: the global meter provider's ``memstore``
    meter), with ``attributes`` (default: none; never app or user ids: one time series per
    counter and process).

    Needs ``opentelemetry-api`` (the ``otel`` extra); raises
    :class:`~memstore.errors.MissingExtraError` without it.
    """
    if meter is None:
        with needs_extra("OpenTelemetry export", "otel"):
            from opentelemetry import metrics as otel_metrics
        from memstore._version import __version__

        meter = otel_metrics.get_meter("memstore", __version__)
    counters = _counters(meter)
    fixed = dict(attributes or {})

    def export(name: str, amount: int) -> None:
        counters[name].add(amount, fixed)

    return export
