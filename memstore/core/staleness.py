"""Bounded staleness of Redis windows across instances: the decisions, no I/O.

A write commits in SQL first; when its Redis window update is then skipped (Redis unreachable
from the writer, or the cache resting after a failure), the writer stamps the app as stale in
SQL (``chat_app_generation.stale_at_ms``). Every instance with a Redis cache looks for stamped
apps before it serves a cached window, at most every :func:`poll_interval` seconds, drops their
windows and clears the stamps it dropped; a stamp whose window could not be dropped (Redis still
unreachable from that instance) stays for the next poll of any instance.

Here: when a poll is due, and which stamps may be cleared after the drops.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass

MAX_STALE_WINDOW_SECONDS = 3600.0
"""Upper bound of ``Settings.stale_window_max_seconds``."""


@dataclass(frozen=True, slots=True)
class StaleMark:
    """One stamped app as a poll read it: the app, its generation and its stamp, both as read
    (the clear is conditional on both, so a newer change's stamp is never cleared unseen)."""

    app_id: str
    generation: int
    stale_at_ms: int


def poll_interval(bound_seconds: float) -> float:
    """How often an instance looks for stamps, for a staleness bound of ``bound_seconds``:
    half of it, so a stamp written up to a few hundred milliseconds after the write (the
    writer's failed Redis call, then one SQL statement) is still dropped within the bound.
    ``0`` (or less) means the mechanism is off: never poll."""
    if bound_seconds <= 0:
        return math.inf
    return bound_seconds / 2


def marks_to_clear(marks: Sequence[StaleMark], not_dropped: Collection[str]) -> list[StaleMark]:
    """The marks whose window this instance dropped (every mark except those of the apps whose
    drop was skipped): one successful drop in the shared Redis is enough for every instance."""
    skipped = set(not_dropped)
    return [mark for mark in marks if mark.app_id not in skipped]


class PollSchedule:
    """When the next poll is due (monotonic seconds). Thread-safe; plain data.

    A poll that fails (the database unreachable) is retried one interval later, not on every
    read: the read is then served without the check (the writers could not commit either).
    """

    def __init__(self, bound_seconds: float) -> None:
        self.interval = poll_interval(bound_seconds)
        self._next = -math.inf if self.interval != math.inf else math.inf
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.interval != math.inf

    def due(self, now: float) -> bool:
        """True when a read at ``now`` must look for stamps first."""
        return now >= self._next

    def started(self, now: float) -> None:
        """A poll started at ``now``: the next one is due an interval after its start."""
        with self._lock:
            self._next = now + self.interval
