"""Snowflake ids: 64-bit, time-ordered, unique across processes with distinct worker ids.

Layout (most significant first): 1 sign bit (always 0), 41 bits of milliseconds since
:data:`EPOCH_MS`, 10 bits of worker id, 12 bits of sequence. Ids from one generator are
strictly increasing; the 41-bit clock lasts until 2093.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from memstore.errors import ClockMovedBackwardsError, ConfigurationError

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
TIMESTAMP_BITS = 41
WORKER_BITS = 10
SEQUENCE_BITS = 12
MAX_WORKER_ID = (1 << WORKER_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_TIMESTAMP = (1 << TIMESTAMP_BITS) - 1
WORKER_SHIFT = SEQUENCE_BITS
TIMESTAMP_SHIFT = SEQUENCE_BITS + WORKER_BITS


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SnowflakeGenerator:
    """Thread-safe generator of snowflake ids for one worker id.

    ``clock`` returns Unix milliseconds and ``sleep`` takes seconds; both exist for tests.
    When the clock steps back, the generator waits until it has caught up with the last
    timestamp it used, for at most ``max_backwards_wait_ms``; a longer step raises
    :class:`~memstore.errors.ClockMovedBackwardsError` instead of risking a duplicate.
    """

    def __init__(
        self,
        worker_id: int,
        *,
        max_backwards_wait_ms: int = 2000,
        clock: Callable[[], int] = _wall_clock_ms,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 <= worker_id <= MAX_WORKER_ID:
            raise ConfigurationError(f"worker id must be in 0..{MAX_WORKER_ID}, got {worker_id}")
        self.worker_id = worker_id
        self._max_backwards_wait_ms = max_backwards_wait_ms
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last_ms = -1
        self._sequence = 0

    def next_id(self) -> int:
        """Return the next id."""
        return self.next_ids(1)[0]

    def next_ids(self, count: int) -> list[int]:
        """Return ``count`` strictly increasing ids, reserved under one lock acquisition."""
        ids: list[int] = []
        with self._lock:
            for _ in range(count):
                ids.append(self._next_locked())
        return ids

    def _next_locked(self) -> int:
        now = self._current_ms()
        if now == self._last_ms:
            self._sequence = (self._sequence + 1) & MAX_SEQUENCE
            if self._sequence == 0:
                now = self._wait_past(self._last_ms)
        else:
            self._sequence = 0
        self._last_ms = now
        elapsed = now - EPOCH_MS
        if not 0 <= elapsed <= MAX_TIMESTAMP:
            raise ClockMovedBackwardsError(f"clock {now} ms is outside the snowflake range")
        return (elapsed << TIMESTAMP_SHIFT) | (self.worker_id << WORKER_SHIFT) | self._sequence

    def _current_ms(self) -> int:
        now = self._clock()
        if now >= self._last_ms:
            return now
        behind = self._last_ms - now
        if behind > self._max_backwards_wait_ms:
            raise ClockMovedBackwardsError(
                f"system clock moved back {behind} ms (more than the "
                f"{self._max_backwards_wait_ms} ms this generator waits out); refusing to "
                "issue ids that could repeat"
            )
        return self._wait_until(self._last_ms, deadline_ms=self._max_backwards_wait_ms)

    def _wait_past(self, last_ms: int) -> int:
        now = self._clock()
        while now <= last_ms:
            self._sleep(0.0001)
            now = self._clock()
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
        return now


def id_timestamp_ms(snowflake: int) -> int:
    """The Unix milliseconds encoded in ``snowflake``."""
    return (snowflake >> TIMESTAMP_SHIFT) + EPOCH_MS


def id_worker(snowflake: int) -> int:
    """The worker id encoded in ``snowflake``."""
    return (snowflake >> WORKER_SHIFT) & MAX_WORKER_ID


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
