"""The health verdicts over plain data."""

from __future__ import annotations

from memstore.core import health
from memstore.core.leases import HeldLease, LeaseRow
from memstore.reports import HealthCheck, HealthReport


def test_schema_verdicts() -> None:
    assert health.schema_check("0006", "0006", True) == HealthCheck(
        status="ok", detail="at head 0006"
    )
    assert health.schema_check(None, "0006", True).status == "failed"
    behind = health.schema_check("0004", "0006", True)
    assert behind.status == "failed" and behind.detail is not None
    assert "memstore migrate" in behind.detail
    ahead = health.schema_check("0099", "0006", False)  # a newer memstore migrated it
    assert ahead == HealthCheck(
        status="ok", detail="at revision 0099, newer than this memstore's head 0006"
    )


def test_held_lease_verdicts() -> None:
    lease = HeldLease(worker_id=3, epoch=1, renewed_at=100.0, ttl_seconds=60)
    assert health.held_lease_check(lease, 100.0).status == "ok"
    assert health.held_lease_check(lease, 139.0).status == "ok"  # one renewal missed
    overdue = health.held_lease_check(lease, 140.0)  # two renewals (every 20 s) missed
    assert overdue.status == "failed" and "overdue" in (overdue.detail or "")
    lapsed = health.held_lease_check(lease, 155.0)  # 60 s less the 5 s safety margin
    assert lapsed.status == "failed" and "may have lapsed" in (lapsed.detail or "")


def row(worker_id: int, expires_at_ms: int) -> LeaseRow:
    return LeaseRow(worker_id, "h", 1, expires_at_ms, 0, db_now_ms=1_000)


def test_free_lease_verdicts() -> None:
    assert health.free_lease_check([]).status == "ok"
    assert health.free_lease_check([row(0, 5_000), row(1, 500)], max_worker_id=1).status == "ok"
    full = health.free_lease_check([row(0, 5_000), row(1, 9_000)], max_worker_id=1)
    assert full.status == "failed"
    assert full.detail == "all 2 worker ids are leased; the soonest lapses in 4s"


def test_reasons_name_kinds_or_classes_only() -> None:
    assert health.error_reason(ConnectionRefusedError("10.0.0.1:5432 refused")) == (
        "ConnectionRefusedError"
    )
    assert health.error_reason(RuntimeError("x"), "connection failed") == "connection failed"
    assert health.timed_out(2.5).detail == "no answer within 2.5s"


def test_skipped_checks_never_fail_a_report() -> None:
    ok, skipped, failed = health.passed(), health.skipped("n/a"), health.failed("down")
    assert ok.ok and skipped.ok and not failed.ok
    only_cache = HealthReport(
        ok=False, database=ok, migrations=ok, cache=failed, lease=skipped, seconds=0.1
    )
    assert only_cache.degraded
    database_too = HealthReport(
        ok=False, database=failed, migrations=skipped, cache=failed, lease=skipped, seconds=0.1
    )
    assert not database_too.degraded
