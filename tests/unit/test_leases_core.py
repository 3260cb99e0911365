"""The worker-lease decisions of ``memstore.core.leases`` over plain data."""

from __future__ import annotations

import pytest

from memstore.core.id_order import MAX_SEQUENCE, compose_id, id_timestamp_ms, id_worker
from memstore.core.leases import (
    ClaimChoice,
    HeldLease,
    LeaseRow,
    choose_worker_id,
    id_floor,
    parse_worker_id,
    safety_margin,
    soonest_expiry,
)
from memstore.ids import SnowflakeGenerator

NOW = 1_800_000_000_000


def row(worker_id: int, *, expires_in_ms: int, epoch: int = 1) -> LeaseRow:
    return LeaseRow(worker_id, "host:1", epoch, NOW + expires_in_ms, 0, NOW)


def test_the_lowest_id_without_a_row_is_chosen() -> None:
    assert choose_worker_id([]) == ClaimChoice(0, None)
    rows = [row(0, expires_in_ms=1000), row(1, expires_in_ms=1000), row(3, expires_in_ms=1000)]
    assert choose_worker_id(rows) == ClaimChoice(2, None)


def test_a_lapsed_row_is_taken_over_at_its_epoch() -> None:
    rows = [row(0, expires_in_ms=1000), row(1, expires_in_ms=0, epoch=7)]
    assert choose_worker_id(rows) == ClaimChoice(1, 7)


def test_every_id_live_is_a_lookup_error_and_the_soonest_expiry_is_named() -> None:
    rows = [row(i, expires_in_ms=5000 + i) for i in range(1024)]
    with pytest.raises(LookupError):
        choose_worker_id(rows)
    assert soonest_expiry(rows) == 5.0
    assert soonest_expiry([row(0, expires_in_ms=-10)]) == 0.0


def test_expiry_is_judged_by_the_database_time_of_the_row() -> None:
    assert row(0, expires_in_ms=0).expired
    assert not row(0, expires_in_ms=1).expired
    assert row(0, expires_in_ms=2500).expires_in_seconds == 2.5


def test_a_lease_is_usable_until_its_deadline_then_not() -> None:
    lease = HeldLease(worker_id=3, epoch=2, renewed_at=100.0, ttl_seconds=60)
    assert safety_margin(60) == 5.0
    assert safety_margin(10) == 2.0
    assert lease.deadline == 155.0
    assert lease.usable(154.999)
    assert not lease.usable(155.0)
    assert not lease.renewal_due(119.9)
    assert lease.renewal_due(120.0)
    renewed = lease.renewed(150.0)
    assert (renewed.worker_id, renewed.epoch, renewed.usable(200.0)) == (3, 2, True)


def test_the_floor_is_the_last_id_of_the_previous_holders_millisecond() -> None:
    assert id_floor(5, 0) == -1
    floor = id_floor(5, NOW)
    assert floor == compose_id(NOW, 5, MAX_SEQUENCE)
    generator = SnowflakeGenerator(5, clock=lambda: NOW - 3_600_000, start_after=floor)
    first = generator.next_id()
    assert first > floor
    assert (id_worker(first), id_timestamp_ms(first)) == (5, NOW + 1)
    assert generator.last_ms == NOW + 1


def test_parse_worker_id() -> None:
    assert parse_worker_id("auto") is None
    assert parse_worker_id(" AUTO ") is None
    assert parse_worker_id("12") == 12
    assert parse_worker_id(7) == 7
