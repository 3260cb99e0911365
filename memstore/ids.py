"""Snowflake ids: 64-bit, time-ordered, unique across processes with distinct worker ids.

Layout (most significant first): 1 sign bit (always 0), 41 bits of milliseconds since
:data:`EPOCH_MS`, 10 bits of worker id, 12 bits of sequence. Ids from one generator are
strictly increasing; the 41-bit clock lasts until 2093.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from memstore.core.id_order import (
    EPOCH_MS,
    MAX_SEQUENCE,
    MAX_TIMESTAMP,
    MAX_WORKER_ID,
    SEQUENCE_BITS,
    TIMESTAMP_BITS,
    TIMESTAMP_SHIFT,
    WORKER_BITS,
    WORKER_SHIFT,
    id_timestamp_ms,
    id_worker,
    smallest_id_above,
)
from memstore.errors import ClockMovedBackwardsError, ConfigurationError

__all__ = [
    "EPOCH_MS",
    "MAX_SEQUENCE",
    "MAX_TIMESTAMP",
    "MAX_WORKER_ID",
    "SEQUENCE_BITS",
    "TIMESTAMP_BITS",
    "TIMESTAMP_SHIFT",
    "WORKER_BITS",
    "WORKER_SHIFT",
    "SnowflakeGenerator",
    "id_timestamp_ms",
    "id_worker",
    "shared_generator",
]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SnowflakeGenerator:
    """Thread-safe generator of snowflake ids for one worker id.

    ``clock`` returns Unix milliseconds and ``sleep`` takes seconds; both exist for tests.
    When the clock steps back, the generator waits until it has caught up with the newest
    time it read, for at most ``max_backwards_wait_ms``; a longer step raises
    :class:`~memstore.errors.ClockMovedBackwardsError` instead of risking a duplicate.

    ``next_ids(count, above=newest)`` issues ids greater than ``newest`` even when this
    generator's clock is behind the writer of ``newest``: the ids then carry ``newest``'s
    millisecond (or the next one) instead of the clock's, keeping this worker id.

    ``start_after`` is an id this generator never issues at or below (a leased worker id's
    previous holders' newest id), whatever its clock says.
    """

    def __init__(
        self,
        worker_id: int,
        *,
        max_backwards_wait_ms: int = 2000,
        clock: Callable[[], int] = _wall_clock_ms,
        sleep: Callable[[float], None] = time.sleep,
        start_after: int = -1,
    ) -> None:
        if not 0 <= worker_id <= MAX_WORKER_ID:
            raise ConfigurationError(f"worker id must be in 0..{MAX_WORKER_ID}, got {worker_id}")
        self.worker_id = worker_id
        self._max_backwards_wait_ms = max_backwards_wait_ms
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._clock_high_ms = -1
        """The newest time the clock showed: a reading below it is the clock stepping back."""
        self._last_id = start_after

    @property
    def last_ms(self) -> int:
        """The millisecond of the newest id issued (or of ``start_after``); 0 before any."""
        last = self._last_id
        return id_timestamp_ms(last) if last >= 0 else 0

    def next_id(self) -> int:
        """Return the next id."""
        return self.next_ids(1)[0]

    def next_ids(self, count: int, above: int | None = None) -> list[int]:
        """Return ``count`` strictly increasing ids, reserved under one lock acquisition, all
        greater than ``above`` when it is given (an app's newest stored id)."""
        if count <= 0:
            return []  # no clock read: asking for no ids never waits or raises
        floor = -1 if above is None else above
        ids: list[int] = []
        with self._lock:
            now = self._current_ms()  # once: the ids of one call are issued at one instant
            snowflake, now = self._next_locked(floor, now)
            ids.append(snowflake)
            for _ in range(count - 1):
                if snowflake & MAX_SEQUENCE < MAX_SEQUENCE:
                    # the next sequence number of the same millisecond and worker id: what
                    # _next_locked gives above an id of its own, without its checks per id
                    snowflake += 1
                    self._last_id = snowflake
                else:
                    snowflake, now = self._next_locked(floor, now)
                ids.append(snowflake)
        return ids

    def _next_locked(self, floor: int, now: int) -> tuple[int, int]:
        """The next id at clock ``now`` (ms) and the clock it was issued at (later when this
        generator had used up ``now``'s millisecond and waited for the next)."""
        if not 0 <= now - EPOCH_MS <= MAX_TIMESTAMP:
            raise ClockMovedBackwardsError(f"clock {now} ms is outside the snowflake range")
        after = max(self._last_id, floor)
        snowflake = smallest_id_above(after, clock_ms=now, worker_id=self.worker_id)
        if after == self._last_id and id_timestamp_ms(snowflake) > now >= id_timestamp_ms(after):
            # This generator used up the millisecond the clock shows: wait for the next one
            # rather than run ahead of its own clock. (Above somebody else's id it borrows.)
            now = self._wait_past(now)
            snowflake = smallest_id_above(after, clock_ms=now, worker_id=self.worker_id)
        elapsed = id_timestamp_ms(snowflake) - EPOCH_MS
        if not 0 <= elapsed <= MAX_TIMESTAMP:
            raise ClockMovedBackwardsError(
                f"time {id_timestamp_ms(snowflake)} ms is outside the snowflake range"
            )
        self._last_id = snowflake
        return snowflake, now

    def _current_ms(self) -> int:
        now = self._clock()
        if now >= self._clock_high_ms:
            self._clock_high_ms = now
            return now
        behind = self._clock_high_ms - now
        if behind > self._max_backwards_wait_ms:
            raise ClockMovedBackwardsError(
                f"system clock moved back {behind} ms (more than the "
                f"{self._max_backwards_wait_ms} ms this generator waits out); refusing to "
                "issue ids that could repeat"
            )
        return self._wait_until(self._clock_high_ms, deadline_ms=self._max_backwards_wait_ms)

    def _wait_past(self, last_ms: int) -> int:
        now = self._clock()
        while now <= last_ms:
            self._sleep(0.0001)
            now = self._clock()
        self._clock_high_ms = max(self._clock_high_ms, now)
        return now

    def _wait_until(self, target_ms: int, *, deadline_ms: int) -> int:
        waited_from = time.monotonic()
        now = self._clock()
        while now < target_ms:
            if (time.monotonic() - waited_from) * 1000 > deadline_ms + 1000:
                raise ClockMovedBackwardsError(
                    f"system clock did not catch up with {target_ms} ms within {deadline_ms} ms"
                )
            self._sleep(min(0.001 * (target_ms - now), 0.05))
            now = self._clock()
        self._clock_high_ms = max(self._clock_high_ms, now)
        return now


_GENERATORS: dict[int, SnowflakeGenerator] = {}
_GENERATORS_LOCK = threading.Lock()


def shared_generator(worker_id: int, max_backwards_wait_ms: int = 2000) -> SnowflakeGenerator:
    """The process-wide generator for ``worker_id``.

    Two stores in one process with the same worker id must share a generator, or they could
    issue the same id in the same millisecond.
    """
    with _GENERATORS_LOCK:
        generator = _GENERATORS.get(worker_id)
        if generator is None:
            generator = SnowflakeGenerator(worker_id, max_backwards_wait_ms=max_backwards_wait_ms)
            _GENERATORS[worker_id] = generator
        return generator
