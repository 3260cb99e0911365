"""Leased snowflake worker ids: the decisions, over plain data (no I/O, no clock reads).

A process that runs with ``MEMSTORE_WORKER_ID=auto`` holds one worker id at a time, leased
from the ``worker_leases`` table. Whether a lease row has lapsed is judged by the database's
clock (the SQL compares ``expires_at_ms`` with the database's own time), never by a process's
clock. A process judges whether *its own* lease may still be in force with its monotonic clock
only: it counts from the moment it sent a successful claim or renewal, so the local deadline
is never later than the database's expiry (the database set the expiry after that moment).

Every claim raises the row's ``epoch``; a renewal or release names the epoch it holds and
changes nothing if another process has claimed the id since (fencing). ``last_ms`` carries
the newest millisecond a holder issued ids in to the next holder, which issues only ids above
that millisecond whatever its clock says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memstore.core.id_order import MAX_SEQUENCE, MAX_WORKER_ID, compose_id

RENEWALS_PER_TTL = 3
"""The heartbeat renews this many times per lease period: two renewals may fail in a row
before the lease lapses."""


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """One row of ``worker_leases`` as read, with the database's time of the read."""

    worker_id: int
    holder: str
    epoch: int
    expires_at_ms: int
    last_ms: int
    db_now_ms: int

    @property
    def expired(self) -> bool:
        """True when the lease has lapsed by the database's clock."""
        return self.expires_at_ms <= self.db_now_ms

    @property
    def expires_in_seconds(self) -> float:
        """Seconds until the lease lapses (negative: lapsed that long ago)."""
        return (self.expires_at_ms - self.db_now_ms) / 1000


@dataclass(frozen=True, slots=True)
class ClaimChoice:
    """Which worker id to try: a fresh one (``epoch`` is ``None``: insert a row) or a lapsed
    row, taken over only if it still has ``epoch`` when the claim runs."""

    worker_id: int
    epoch: int | None


def choose_worker_id(rows: Iterable[LeaseRow], max_worker_id: int = MAX_WORKER_ID) -> ClaimChoice:
    """The lowest worker id that has no row or whose lease lapsed.

    Raises ``LookupError`` when every id is held by a live lease; see :func:`soonest_expiry`.
    """
    by_id = {row.worker_id: row for row in rows}
    for worker_id in range(max_worker_id + 1):
        row = by_id.get(worker_id)
        if row is None:
            return ClaimChoice(worker_id, None)
        if row.expired:
            return ClaimChoice(worker_id, row.epoch)
    raise LookupError("every worker id is leased")


def soonest_expiry(rows: Iterable[LeaseRow]) -> float:
    """Seconds until the first live lease lapses (0 when none is live)."""
    live = [row.expires_in_seconds for row in rows if not row.expired]
    return max(min(live, default=0.0), 0.0)


def id_floor(worker_id: int, last_ms: int) -> int:
    """The greatest id ``worker_id`` may have issued in millisecond ``last_ms``: a new holder
    issues only ids above it (``-1``: no earlier holder issued any id)."""
    if last_ms <= 0:
        return -1
    return compose_id(last_ms, worker_id, MAX_SEQUENCE)


def safety_margin(ttl_seconds: float) -> float:
    """How long before the lease's end a holder stops trusting it: a fifth of the lease period,
    at most 5 s (room for the database's and the process's clocks to run at slightly
    different rates, and for a write that began just before the deadline)."""
    return min(ttl_seconds / 5, 5.0)


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A lease this process holds: ``renewed_at`` is the monotonic time at which the claim or
    the last successful renewal was *sent* (before the database set the expiry)."""

    worker_id: int
    epoch: int
    renewed_at: float
    ttl_seconds: float

    @property
    def deadline(self) -> float:
        """The monotonic time after which no id may be issued without renewing first."""
        return self.renewed_at + self.ttl_seconds - safety_margin(self.ttl_seconds)

    def usable(self, monotonic_now: float) -> bool:
        """True while ids may be issued on this lease."""
        return monotonic_now < self.deadline

    def renewal_due(self, monotonic_now: float) -> bool:
        """True when the heartbeat should renew (a third of the period since the last one)."""
        return monotonic_now >= self.renewed_at + self.ttl_seconds / RENEWALS_PER_TTL

    def renewed(self, sent_at: float) -> HeldLease:
        """The lease after a successful renewal sent at ``sent_at``."""
        return HeldLease(self.worker_id, self.epoch, sent_at, self.ttl_seconds)

    def heartbeat_interval(self) -> float:
        """Seconds between two heartbeat renewals."""
        return self.ttl_seconds / RENEWALS_PER_TTL


def parse_worker_id(value: int | str) -> int | None:
    """``None`` for ``"auto"`` (lease an id), else the fixed id as an int."""
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return None
        return int(value)
    return value
