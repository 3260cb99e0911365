"""Which snowflake ids a writer issues: above everything that must come before, whatever its
clock says.

A writer's clock may be behind another writer's (or show the same millisecond with a lower
worker id). Ids that only followed the local clock would then sort a tool result before the
request another process wrote a moment earlier. So a write first reads its app's newest
stored id, and its ids are the smallest ids of its worker above that id (and above the
writer's own last id), never below the local clock. The snowflake layout stays intact: the
worker id bits are kept, so two workers never issue the same id even when both are lifted
above the same newest id.

The layout (also exported by :mod:`memstore.ids`), most significant first: 1 sign bit (always
0), 41 bits of milliseconds since :data:`EPOCH_MS`, 10 bits of worker id, 12 bits of sequence.
"""

from __future__ import annotations

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
TIMESTAMP_BITS = 41
WORKER_BITS = 10
SEQUENCE_BITS = 12
MAX_WORKER_ID = (1 << WORKER_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_TIMESTAMP = (1 << TIMESTAMP_BITS) - 1
WORKER_SHIFT = SEQUENCE_BITS
TIMESTAMP_SHIFT = SEQUENCE_BITS + WORKER_BITS


def id_timestamp_ms(snowflake: int) -> int:
    """The Unix milliseconds encoded in ``snowflake``."""
    return (snowflake >> TIMESTAMP_SHIFT) + EPOCH_MS


def id_worker(snowflake: int) -> int:
    """The worker id encoded in ``snowflake``."""
    return (snowflake >> WORKER_SHIFT) & MAX_WORKER_ID


def compose_id(ms: int, worker_id: int, sequence: int) -> int:
    """The snowflake of Unix millisecond ``ms``, ``worker_id`` and ``sequence`` (no range check)."""
    return ((ms - EPOCH_MS) << TIMESTAMP_SHIFT) | (worker_id << WORKER_SHIFT) | sequence


def smallest_id_above(after: int, *, clock_ms: int, worker_id: int) -> int:
    """The smallest id of ``worker_id`` that is greater than ``after`` and not older than
    ``clock_ms``.

    If ``after`` is older than the clock, that is the clock's first id. Otherwise it is in
    ``after``'s millisecond when the worker id (then the sequence) leaves room above it, else
    in the next millisecond: the id borrows the time of the newer id instead of the clock's.
    """
    first_at_clock = compose_id(clock_ms, worker_id, 0)
    if after < first_at_clock:
        return first_at_clock
    ms = id_timestamp_ms(after)
    after_worker = id_worker(after)
    if worker_id > after_worker:
        return compose_id(ms, worker_id, 0)
    sequence = after & MAX_SEQUENCE
    if worker_id == after_worker and sequence < MAX_SEQUENCE:
        return after + 1
    return compose_id(ms + 1, worker_id, 0)


def ids_above(after: int, count: int, *, clock_ms: int, worker_id: int) -> list[int]:
    """The ``count`` smallest ids of ``worker_id`` above ``after`` and not older than
    ``clock_ms``, increasing."""
    ids: list[int] = []
    for _ in range(count):
        after = smallest_id_above(after, clock_ms=clock_ms, worker_id=worker_id)
        ids.append(after)
    return ids


def newest_of(*ids: int | None) -> int:
    """The greatest of ``ids`` (``-1`` when all are ``None``): the floor new ids must pass."""
    present = [value for value in ids if value is not None]
    return max(present, default=-1)
