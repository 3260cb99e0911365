"""The health checks' verdicts, over plain data (no I/O, no clock reads).

A store probes its database, its schema revision, its cache and its worker-id lease; the
stores do the probing and this module turns what they saw into one
:class:`~memstore.reports.HealthCheck` per check. Reasons are short and fixed: they name a
failure's class or kind and revisions, never a URL, a password or message text.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstore.core.id_order import MAX_WORKER_ID
from memstore.core.leases import RENEWALS_PER_TTL, HeldLease, LeaseRow, soonest_expiry
from memstore.reports import HealthCheck

OK = "ok"
FAILED = "failed"
SKIPPED = "skipped"

DEFAULT_HEALTH_TIMEOUT_SECONDS = 5.0
"""How long :meth:`MemoryStore.health` waits for the database and the cache, each."""

OVERDUE_RENEWALS = 2
"""A held lease is unhealthy once this many heartbeat renewals in a row are missing."""


def passed(detail: str | None = None) -> HealthCheck:
    return HealthCheck(status=OK, detail=detail)


def failed(reason: str) -> HealthCheck:
    return HealthCheck(status=FAILED, detail=reason)


def skipped(reason: str) -> HealthCheck:
    return HealthCheck(status=SKIPPED, detail=reason)


def error_reason(error: BaseException, kind: str | None = None) -> str:
    """A failure named by its kind (a :class:`~memstore.errors.StorageError`'s) or class only:
    driver messages may quote hosts, user names or data."""
    return kind or type(error).__name__


_REDIS_CAUSES = (
    ("DB index is out of range", "the database index in the Redis URL is out of range"),
    ("NOAUTH", "Redis wants a password (NOAUTH): add it to the Redis URL"),
    ("WRONGPASS", "Redis refused the user name or password (WRONGPASS)"),
    ("invalid password", "Redis refused the password"),
    ("NOPERM", "the Redis user may not run this command (NOPERM)"),
    ("LOADING", "Redis is loading its dataset (LOADING): try again shortly"),
    ("MASTERDOWN", "the Redis replica has no master (MASTERDOWN)"),
)


def cache_reason(error: BaseException) -> str:
    """A Redis probe's failure named by its cause where the server's reply says it (a
    database index out of range, a missing or wrong password, a missing permission), else by
    its class. Only those fixed replies are read: a probe (``PING``) carries no data."""
    text = str(error)
    for marker, cause in _REDIS_CAUSES:
        if marker in text:
            return f"{cause} ({type(error).__name__})"
    return type(error).__name__


def timed_out(seconds: float) -> HealthCheck:
    return failed(f"no answer within {seconds:g}s")


def schema_check(current: str | None, head: str | None, known: bool) -> HealthCheck:
    """The schema is at this installation's head revision, or past it.

    ``known`` says whether ``current`` is a revision this installation ships. One it does not
    know was written by a newer memstore: the upgrade procedure migrates before it restarts
    the services, and memstore's migrations only add, so a process of the previous version
    stays ready meanwhile (failing it would take every old replica out of service at once).
    """
    if current is None:
        return failed("not migrated: run `memstore migrate`")
    if current == head:
        return passed(f"at head {head}")
    if not known:
        return passed(f"at revision {current}, newer than this memstore's head {head}")
    return failed(f"at revision {current}, head is {head}: run `memstore migrate`")


def held_lease_check(lease: HeldLease, monotonic_now: float) -> HealthCheck:
    """A lease this store holds is healthy while ids may be issued on it and its heartbeat
    renewals are not overdue (:data:`OVERDUE_RENEWALS` missed in a row)."""
    age = max(0.0, monotonic_now - lease.renewed_at)
    if not lease.usable(monotonic_now):
        return failed(
            f"worker id {lease.worker_id}: the lease may have lapsed (renewed {age:.0f}s ago); "
            "the next write renews it first"
        )
    if age >= OVERDUE_RENEWALS * lease.ttl_seconds / RENEWALS_PER_TTL:
        return failed(
            f"worker id {lease.worker_id}: lease renewal overdue (renewed {age:.0f}s ago)"
        )
    return passed(f"worker id {lease.worker_id}, renewed {age:.0f}s ago")


def free_lease_check(rows: Sequence[LeaseRow], max_worker_id: int = MAX_WORKER_ID) -> HealthCheck:
    """For a leasing store that holds no lease yet: one can be claimed on the first write."""
    live = [row for row in rows if not row.expired]
    total = max_worker_id + 1
    if len(live) >= total:
        return failed(
            f"all {total} worker ids are leased; the soonest lapses in {soonest_expiry(rows):.0f}s"
        )
    return passed(f"no lease held yet (claimed on the first write); {len(live)} of {total} leased")


def fixed_worker_check(worker_id: int | None) -> HealthCheck:
    return skipped(f"fixed worker id {worker_id}: no lease")
