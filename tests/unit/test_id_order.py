"""Properties of the id decision (:mod:`memstore.core.id_order`) and of the generator that uses
it: new ids are above the app's newest id whatever the writer's clock, keep the worker id, are
the smallest such ids, and never collide between workers."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore.core.id_order import (
    EPOCH_MS,
    MAX_SEQUENCE,
    MAX_WORKER_ID,
    compose_id,
    id_timestamp_ms,
    id_worker,
    ids_above,
    newest_of,
    smallest_id_above,
)
from memstore.ids import SnowflakeGenerator

T0 = 1_748_736_000_000  # 2025-06-01T00:00:00Z

clocks = st.integers(min_value=T0 - 5_000, max_value=T0 + 5_000)
workers = st.integers(min_value=0, max_value=MAX_WORKER_ID)
sequences = st.integers(min_value=0, max_value=MAX_SEQUENCE)


@st.composite
def snowflakes(draw: st.DrawFn) -> int:
    """An id of some worker at a time near :data:`T0` (edge sequences and workers likely)."""
    ms = draw(clocks)
    worker = draw(st.one_of(st.sampled_from([0, 1, MAX_WORKER_ID - 1, MAX_WORKER_ID]), workers))
    sequence = draw(st.one_of(st.sampled_from([0, MAX_SEQUENCE - 1, MAX_SEQUENCE]), sequences))
    return compose_id(ms, worker, sequence)


afters = st.one_of(st.just(-1), snowflakes())


def previous_id_of_worker(snowflake: int) -> int:
    """The largest id of ``snowflake``'s worker below it."""
    if snowflake & MAX_SEQUENCE:
        return snowflake - 1
    return compose_id(id_timestamp_ms(snowflake) - 1, id_worker(snowflake), MAX_SEQUENCE)


@given(after=afters, clock_ms=clocks, worker=workers)
def test_the_id_is_above_the_newest_keeps_the_worker_and_is_the_smallest(
    after: int, clock_ms: int, worker: int
) -> None:
    snowflake = smallest_id_above(after, clock_ms=clock_ms, worker_id=worker)
    assert snowflake > after
    assert id_worker(snowflake) == worker
    assert id_timestamp_ms(snowflake) >= clock_ms
    assert 0 < snowflake < 2**63
    previous = previous_id_of_worker(snowflake)  # any smaller id of the worker breaks a rule
    assert previous <= after or id_timestamp_ms(previous) < clock_ms


@given(after=afters, clock_ms=clocks, worker=workers)
def test_a_clock_ahead_of_the_newest_id_is_used_as_is(
    after: int, clock_ms: int, worker: int
) -> None:
    if after < compose_id(clock_ms, 0, 0):
        assert smallest_id_above(after, clock_ms=clock_ms, worker_id=worker) == compose_id(
            clock_ms, worker, 0
        )


@given(
    after=afters,
    clock_ms=clocks,
    worker=workers,
    count=st.integers(min_value=1, max_value=MAX_SEQUENCE + 50),
)
@settings(max_examples=60)
def test_a_batch_is_strictly_increasing_and_above_the_newest(
    after: int, clock_ms: int, worker: int, count: int
) -> None:
    ids = ids_above(after, count, clock_ms=clock_ms, worker_id=worker)
    assert len(ids) == count
    assert ids[0] > after
    assert all(b > a for a, b in itertools.pairwise(ids))
    assert {id_worker(snowflake) for snowflake in ids} == {worker}


@given(
    after=afters,
    clocks_ms=st.tuples(clocks, clocks),
    pair=st.lists(workers, min_size=2, max_size=2, unique=True),
    count=st.integers(min_value=1, max_value=300),
)
@settings(max_examples=60)
def test_two_workers_lifted_above_the_same_id_never_collide(
    after: int, clocks_ms: tuple[int, int], pair: list[int], count: int
) -> None:
    first = ids_above(after, count, clock_ms=clocks_ms[0], worker_id=pair[0])
    second = ids_above(after, count, clock_ms=clocks_ms[1], worker_id=pair[1])
    assert set(first).isdisjoint(second)


@given(st.lists(st.one_of(st.none(), snowflakes()), max_size=4))
def test_newest_of_is_the_floor(ids: list[int | None]) -> None:
    present = [value for value in ids if value is not None]
    assert newest_of(*ids) == (max(present) if present else -1)


class SteppedClock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        return self.ms

    def sleep(self, _seconds: float) -> None:
        self.ms += 1


@given(
    steps=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3),  # how far the clock moves on
            st.one_of(st.none(), st.integers(min_value=-3_000, max_value=3_000)),  # newest id's
            # time relative to this writer's clock, or no newest id
            workers,  # the newest id's worker
            st.integers(min_value=1, max_value=20),  # ids in this write
        ),
        min_size=1,
        max_size=40,
    ),
    worker=workers,
)
@settings(max_examples=80)
def test_the_generator_never_goes_below_a_newest_id_nor_its_own_last_id(
    steps: list[tuple[int, int | None, int, int]], worker: int
) -> None:
    clock = SteppedClock()
    generator = SnowflakeGenerator(worker, clock=clock, sleep=clock.sleep)
    issued: list[int] = []
    for forward, newest_offset, newest_worker, count in steps:
        clock.ms += forward
        newest = (
            None
            if newest_offset is None
            else compose_id(clock.ms + newest_offset, newest_worker, MAX_SEQUENCE // 2)
        )
        ids = generator.next_ids(count, above=newest)
        assert len(ids) == count
        if newest is not None:
            assert ids[0] > newest
        assert all(id_worker(snowflake) == worker for snowflake in ids)
        assert all(id_timestamp_ms(snowflake) >= EPOCH_MS for snowflake in ids)
        issued += ids
    assert all(b > a for a, b in itertools.pairwise(issued))


def test_a_clock_behind_the_newest_id_borrows_its_time_without_waiting() -> None:
    clock = SteppedClock()
    generator = SnowflakeGenerator(5, clock=clock, sleep=clock.sleep)
    newest = compose_id(T0 + 60_000, 9, 17)  # written by a writer one minute ahead
    ids = generator.next_ids(3, above=newest)
    assert ids == [compose_id(T0 + 60_001, 5, s) for s in range(3)]  # worker 5 < 9: next ms
    assert clock.ms == T0  # no waiting for the clock
    assert generator.next_id() == compose_id(T0 + 60_001, 5, 3)  # and never back below


def test_same_millisecond_with_a_higher_worker_id_stays_in_that_millisecond() -> None:
    clock = SteppedClock()
    generator = SnowflakeGenerator(700, clock=clock, sleep=clock.sleep)
    newest = compose_id(T0, 20, MAX_SEQUENCE)
    assert generator.next_ids(2, above=newest) == [compose_id(T0, 700, s) for s in range(2)]
