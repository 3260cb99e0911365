"""Tests for the snowflake id generator in :mod:`memstore.ids`."""

from __future__ import annotations

import itertools
import multiprocessing
import sys
import threading
import time
from collections import Counter

import pytest

from memstore.core.id_order import compose_id
from memstore.errors import ClockMovedBackwardsError, ConfigurationError, MemstoreError
from memstore.ids import (
    EPOCH_MS,
    MAX_SEQUENCE,
    MAX_TIMESTAMP,
    MAX_WORKER_ID,
    TIMESTAMP_SHIFT,
    WORKER_SHIFT,
    SnowflakeGenerator,
    id_timestamp_ms,
    id_worker,
    shared_generator,
)

# A fixed, in-range Unix millisecond timestamp for fake clocks (2025-06-01T00:00:00Z).
T0 = 1_748_736_000_000


class FakeClock:
    """A controllable clock; ``sleep`` advances it by the requested time.

    Time is kept in microseconds so the generator's sub-millisecond sleeps add up correctly.
    """

    def __init__(self, start_ms: int) -> None:
        self._us = start_ms * 1000
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self._us // 1000

    def set_ms(self, ms: int) -> None:
        self._us = ms * 1000

    def advance_ms(self, ms: int) -> None:
        self._us += ms * 1000

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"negative sleep {seconds}"
        self.sleeps.append(seconds)
        self._us += max(1, round(seconds * 1_000_000))


class StickyClock:
    """Returns the same millisecond for ``calls_per_ms`` reads, then moves on by one ms.

    ``sleep`` does not move it: only reading it does, so the generator has to poll it.
    """

    def __init__(self, start_ms: int, calls_per_ms: int) -> None:
        self.ms = start_ms
        self._calls_per_ms = calls_per_ms
        self._calls = 0
        self.sleeps = 0

    def __call__(self) -> int:
        self._calls += 1
        if self._calls > self._calls_per_ms:
            self._calls = 1
            self.ms += 1
        return self.ms

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps += 1


def fake_generator(
    worker_id: int = 7, *, start_ms: int = T0, max_backwards_wait_ms: int = 2000
) -> tuple[SnowflakeGenerator, FakeClock]:
    clock = FakeClock(start_ms)
    generator = SnowflakeGenerator(
        worker_id,
        max_backwards_wait_ms=max_backwards_wait_ms,
        clock=clock,
        sleep=clock.sleep,
    )
    return generator, clock


def assert_strictly_increasing(ids: list[int]) -> None:
    for earlier, later in itertools.pairwise(ids):
        assert later > earlier, f"id {later} does not follow {earlier}"


# --- range --------------------------------------------------------------------------------


def test_ids_are_positive_and_fit_in_signed_64_bits() -> None:
    generator = SnowflakeGenerator(MAX_WORKER_ID)
    ids = [generator.next_id() for _ in range(1000)] + generator.next_ids(1000)
    for snowflake in ids:
        assert isinstance(snowflake, int)
        assert 0 < snowflake < 2**63


def test_ids_at_the_end_of_the_timestamp_range_stay_below_2_63() -> None:
    generator, _ = fake_generator(MAX_WORKER_ID, start_ms=EPOCH_MS + MAX_TIMESTAMP)
    ids = generator.next_ids(MAX_SEQUENCE + 1)  # the whole last millisecond
    assert len(set(ids)) == MAX_SEQUENCE + 1
    assert all(0 < snowflake < 2**63 for snowflake in ids)
    assert max(ids) == 2**63 - 1


def test_clock_beyond_the_timestamp_range_is_refused() -> None:
    generator, _ = fake_generator(start_ms=EPOCH_MS + MAX_TIMESTAMP + 1)
    with pytest.raises(MemstoreError):
        generator.next_id()


# --- ordering -----------------------------------------------------------------------------


def test_ids_from_one_generator_are_strictly_increasing() -> None:
    generator = SnowflakeGenerator(3)
    ids = [generator.next_id() for _ in range(2000)]
    assert_strictly_increasing(ids)


def test_burst_of_20000_ids_with_real_clock_is_strictly_increasing() -> None:
    generator = SnowflakeGenerator(4)
    ids = generator.next_ids(20_000)
    assert len(ids) == 20_000
    assert_strictly_increasing(ids)
    more = [generator.next_id() for _ in range(20_000)]
    assert_strictly_increasing(ids + more)


@pytest.mark.parametrize(
    ("worker_id", "issued_before", "count", "above_offset"),
    [
        (7, 0, 20, None),  # a turn's ids in a fresh millisecond
        (7, MAX_SEQUENCE - 5, 20, None),  # the sequence runs out midway
        (0, 3, MAX_SEQUENCE + 10, None),  # more than a millisecond holds
        (7, 0, 20, 3),  # above a newer id of the same worker
        (MAX_WORKER_ID, 0, 30, 1),  # above another worker's newer id: borrowed millisecond
        (2, 10, 1, None),
    ],
)
def test_a_batch_of_ids_is_what_one_id_at_a_time_gives(
    worker_id: int, issued_before: int, count: int, above_offset: int | None
) -> None:
    """``next_ids(n)`` takes the next sequence numbers of a millisecond without the per-id
    checks; it must give exactly the ids that ``n`` single calls give on the same clock."""
    batch, batch_clock = fake_generator(worker_id)
    single, single_clock = fake_generator(worker_id)
    for generator in (batch, single):
        generator.next_ids(issued_before)
    above = None
    if above_offset is not None:  # a stored id ahead of the clock, of another writer
        other = (worker_id + 1) % (MAX_WORKER_ID + 1) if worker_id < MAX_WORKER_ID else 0
        above = compose_id(T0 + above_offset, other, 9)
    ids = batch.next_ids(count, above=above)
    one_by_one = [single.next_ids(1, above=above)[0] for _ in range(count)]
    assert ids == one_by_one
    assert_strictly_increasing(ids)
    assert batch_clock() == single_clock()
    assert batch.next_id() == single.next_id()  # and both carry on from the same place


def test_burst_of_20000_ids_overflows_the_sequence_within_one_millisecond() -> None:
    # The clock stays on each millisecond for 10,000 reads, far longer than it takes to use
    # up the 4,096 sequence numbers, so the generator must wait for the next millisecond.
    clock = StickyClock(T0, calls_per_ms=10_000)
    generator = SnowflakeGenerator(5, clock=clock, sleep=clock.sleep)

    ids = generator.next_ids(20_000)

    assert len(ids) == 20_000
    assert_strictly_increasing(ids)
    per_ms = Counter(id_timestamp_ms(snowflake) for snowflake in ids)
    assert max(per_ms.values()) == MAX_SEQUENCE + 1  # full milliseconds were used
    assert len(per_ms) == 5  # ceil(20,000 / 4,096)
    assert min(per_ms) == T0
    assert max(per_ms) <= clock.ms
    assert clock.sleeps > 0  # the generator waited instead of wrapping the sequence
    assert all(id_worker(snowflake) == 5 for snowflake in ids)

    # One id at a time over the same kind of overflow.
    singles = [generator.next_id() for _ in range(10_000)]
    assert_strictly_increasing(ids + singles)


# --- concurrency --------------------------------------------------------------------------


@pytest.mark.parametrize("clock_kind", ["real", "sticky"])
def test_thread_safety_no_duplicates_and_per_thread_order(clock_kind: str) -> None:
    if clock_kind == "real":
        generator = SnowflakeGenerator(9)
    else:
        # Every millisecond lasts 10,000 clock reads, so the threads keep running into
        # sequence overflow and the wait for the next millisecond, where races would show.
        clock = StickyClock(T0, calls_per_ms=10_000)
        generator = SnowflakeGenerator(9, clock=clock, sleep=clock.sleep)
    threads_count, per_thread = 8, 5000
    results: list[list[int]] = [[] for _ in range(threads_count)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_count)

    def run(index: int) -> None:
        try:
            barrier.wait()
            out = results[index]
            for _ in range(per_thread):
                out.append(generator.next_id())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(threads_count)]
    # Switch threads as often as possible so an unlocked read-modify-write would interleave.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(old_interval)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []

    all_ids = [snowflake for ids in results for snowflake in ids]
    assert len(all_ids) == threads_count * per_thread
    assert len(set(all_ids)) == len(all_ids)
    for ids in results:
        assert len(ids) == per_thread
        assert_strictly_increasing(ids)


def _ids_in_subprocess(worker_id: int) -> list[int]:
    return SnowflakeGenerator(worker_id).next_ids(5000)


@pytest.mark.slow
def test_no_duplicates_across_processes_with_distinct_worker_ids() -> None:
    ctx = multiprocessing.get_context("spawn")
    worker_ids = [1, 2, 3, 4]
    with ctx.Pool(processes=4) as pool:
        results = pool.map_async(_ids_in_subprocess, worker_ids).get(timeout=120)

    sets = [set(ids) for ids in results]
    for worker_id, ids, id_set in zip(worker_ids, results, sets, strict=True):
        assert len(ids) == 5000
        assert len(id_set) == 5000
        assert_strictly_increasing(ids)
        assert {id_worker(snowflake) for snowflake in ids} == {worker_id}
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            assert sets[i].isdisjoint(sets[j])
    assert len(set().union(*sets)) == 4 * 5000


def test_generators_with_distinct_worker_ids_never_collide_in_the_same_millisecond() -> None:
    clock = FakeClock(T0)
    generators = [SnowflakeGenerator(w, clock=clock, sleep=clock.sleep) for w in (1, 2)]
    first = generators[0].next_ids(100)
    second = generators[1].next_ids(100)
    assert set(first).isdisjoint(second)


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("worker_id", [-1, -1024, MAX_WORKER_ID + 1, 1024, 5000, 2**63])
def test_worker_id_outside_range_raises_configuration_error(worker_id: int) -> None:
    with pytest.raises(ConfigurationError):
        SnowflakeGenerator(worker_id)
    with pytest.raises(ConfigurationError):
        shared_generator(worker_id)


@pytest.mark.parametrize("worker_id", [0, 1, 512, MAX_WORKER_ID])
def test_worker_id_inside_range_is_accepted(worker_id: int) -> None:
    generator, _ = fake_generator(worker_id)
    assert generator.worker_id == worker_id
    assert id_worker(generator.next_id()) == worker_id


def test_configuration_error_is_a_memstore_error() -> None:
    assert MAX_WORKER_ID == 1023
    with pytest.raises(MemstoreError):
        SnowflakeGenerator(1024)


# --- clock moving backwards ----------------------------------------------------------------


def test_small_backwards_step_waits_and_next_id_is_greater() -> None:
    generator, clock = fake_generator(max_backwards_wait_ms=2000)
    before = generator.next_ids(50)
    clock.advance_ms(3)
    before += generator.next_ids(50)
    last_ms = clock()

    clock.set_ms(last_ms - 500)  # back by less than the 2000 ms bound
    started_at = time.monotonic()
    after = generator.next_id()

    assert time.monotonic() - started_at < 1.0  # it slept on the fake clock, not for real
    assert clock.sleeps, "the generator must wait for the clock to catch up"
    assert sum(clock.sleeps) == pytest.approx(0.5, abs=0.06)
    assert after > max(before)
    assert after not in before
    assert id_timestamp_ms(after) >= last_ms
    assert_strictly_increasing([*before, after, *generator.next_ids(100)])


def test_backwards_step_just_under_the_bound_still_waits() -> None:
    generator, clock = fake_generator(max_backwards_wait_ms=100)
    before = generator.next_ids(10)
    clock.set_ms(T0 - 99)
    after = generator.next_id()
    assert clock.sleeps
    assert after > max(before)


def test_repeated_small_backwards_steps_keep_ids_increasing() -> None:
    generator, clock = fake_generator(max_backwards_wait_ms=50)
    ids = generator.next_ids(5)
    for step in range(1, 40):
        clock.advance_ms(7)
        ids += generator.next_ids(3)
        clock.set_ms(clock() - (step % 45))
        ids.append(generator.next_id())
    assert len(set(ids)) == len(ids)
    assert_strictly_increasing(ids)


def test_large_backwards_step_raises_and_never_returns_a_duplicate() -> None:
    generator, clock = fake_generator(max_backwards_wait_ms=2000)
    before = generator.next_ids(100)
    last_ms = clock()

    clock.set_ms(last_ms - 5000)  # back by more than the bound
    with pytest.raises(ClockMovedBackwardsError):
        generator.next_id()
    with pytest.raises(ClockMovedBackwardsError):
        generator.next_ids(10)
    clock.set_ms(last_ms - 2001)
    with pytest.raises(ClockMovedBackwardsError):
        generator.next_id()
    assert issubclass(ClockMovedBackwardsError, MemstoreError)

    # The clock recovers to the very millisecond last used: ids continue past the old ones.
    clock.set_ms(last_ms)
    after = generator.next_ids(100)
    clock.advance_ms(1)
    after += generator.next_ids(100)

    assert set(before).isdisjoint(after)
    assert_strictly_increasing(before + after)


# --- decoding -----------------------------------------------------------------------------


@pytest.mark.parametrize("worker_id", [0, 1, 837, MAX_WORKER_ID])
@pytest.mark.parametrize("ms", [EPOCH_MS + 1, T0, EPOCH_MS + MAX_TIMESTAMP])
def test_id_timestamp_and_worker_decode(worker_id: int, ms: int) -> None:
    generator, _ = fake_generator(worker_id, start_ms=ms)
    ids = generator.next_ids(3)
    for sequence, snowflake in enumerate(ids):
        assert id_timestamp_ms(snowflake) == ms
        assert id_worker(snowflake) == worker_id
        assert snowflake & MAX_SEQUENCE == sequence
        assert snowflake >> TIMESTAMP_SHIFT == ms - EPOCH_MS
        assert (snowflake >> WORKER_SHIFT) & MAX_WORKER_ID == worker_id


def test_decode_hand_built_id() -> None:
    snowflake = (123_456_789 << TIMESTAMP_SHIFT) | (1000 << WORKER_SHIFT) | 4095
    assert id_timestamp_ms(snowflake) == EPOCH_MS + 123_456_789
    assert id_worker(snowflake) == 1000


def test_id_timestamp_matches_the_real_clock() -> None:
    generator = SnowflakeGenerator(11)
    before_ms = time.time_ns() // 1_000_000
    snowflake = generator.next_id()
    after_ms = time.time_ns() // 1_000_000
    assert before_ms <= id_timestamp_ms(snowflake) <= after_ms
    assert id_worker(snowflake) == 11


# --- shared generators --------------------------------------------------------------------


def test_shared_generator_returns_the_same_object_per_worker_id() -> None:
    first = shared_generator(901)
    assert shared_generator(901) is first
    assert isinstance(first, SnowflakeGenerator)
    assert first.worker_id == 901
    other = shared_generator(902)
    assert other is not first
    assert other.worker_id == 902
    assert shared_generator(902) is other


def test_shared_generator_is_the_same_object_across_threads() -> None:
    seen: list[SnowflakeGenerator] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def run() -> None:
        barrier.wait()
        generator = shared_generator(903)
        with lock:
            seen.append(generator)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(seen) == 8
    assert all(generator is seen[0] for generator in seen)


def test_asking_for_no_ids_reads_no_clock() -> None:
    """A lease check asks for no ids: it must not wait on, or fail for, the clock."""

    def clock() -> int:
        raise AssertionError("the clock was read")

    assert SnowflakeGenerator(7, clock=clock).next_ids(0, above=5) == []
