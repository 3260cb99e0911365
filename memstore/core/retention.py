"""Retention: which leading rows of an app's original history a prune removes. Pure, no I/O.

A prune always removes a prefix of the history (in id order), so what remains is the newest
part of the conversation. The prefix is chosen by age (rows created before a cutoff) and/or by
count (keep the newest ``keep_last`` rows); when both are given both limits apply. The prefix is
then moved so no tool exchange is split:

* it widens backwards over a tool group whose results lie in the kept part (the group is kept
  whole, as a window keeps a group whole at its edge: :func:`memstore.core.window.eviction_count`);
* when a cut is made, results at its head whose request exists nowhere before them (legacy
  orphans) go with the pruned prefix, so the kept part never starts with a result.

So the remaining rows never start with a result, and never hold a request whose results were
removed, nor a result whose request was removed. Deletes run in batches that also end only
where no group is split, so an interrupted prune leaves a valid history too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from memstore.core.window import KIND_RESULT, eviction_count, requests_of_results
from memstore.errors import InvalidRetentionError

DEFAULT_BATCH_ROWS = 1000


@dataclass(frozen=True, slots=True)
class RetentionRule:
    """What a prune keeps: rows younger than ``older_than`` and/or the newest ``keep_last``."""

    older_than: timedelta | None = None
    keep_last: int | None = None

    def __post_init__(self) -> None:
        if self.older_than is None and self.keep_last is None:
            raise InvalidRetentionError("give older_than, keep_last or both")
        if self.older_than is not None and self.older_than < timedelta(0):
            raise InvalidRetentionError("older_than must not be negative")
        if self.keep_last is not None and (
            isinstance(self.keep_last, bool) or not isinstance(self.keep_last, int)
        ):
            raise InvalidRetentionError("keep_last must be an integer")
        if self.keep_last is not None and self.keep_last < 1:
            raise InvalidRetentionError("keep_last must be at least 1 (purge removes everything)")

    def cutoff(self, now: datetime) -> datetime | None:
        """Rows created before this instant are old enough to prune (``None``: no age rule)."""
        return None if self.older_than is None else now - self.older_than


@dataclass(frozen=True, slots=True)
class PruneRow:
    """What a prune decision needs of one original-history row: no message text."""

    id: int
    kind: str
    """One of the ``KIND_*`` constants of :mod:`memstore.core.window`."""
    call_ids: tuple[str, ...]
    """The request's call ids, or the one call id a result answers; empty otherwise."""
    created_at: datetime


@dataclass(frozen=True, slots=True)
class PruneBatch:
    """One delete: the rows with ``first_id <= id <= last_id`` of the decided snapshot."""

    first_id: int
    last_id: int
    rows: int


@dataclass(frozen=True, slots=True)
class PrunePlan:
    drop: int
    """How many leading rows go."""
    batches: list[PruneBatch] = field(default_factory=list)
    """The deletes, oldest first; each ends where no tool group is split."""
    cut_id: int | None = None
    """The id below which the display history goes too (set only when rows go)."""
    first_kept_id: int | None = None
    """The oldest row left (``None`` when nothing goes or everything goes)."""


def _suffix_min(binds: Sequence[int | None]) -> list[int]:
    """``out[i]``: the smallest request index a result at ``i`` or later answers (len if none)."""
    size = len(binds)
    out = [size] * (size + 1)
    for index in range(size - 1, -1, -1):
        bound = binds[index]
        out[index] = min(out[index + 1], size if bound is None else bound)
    return out


def plan_prune(
    rows: Sequence[PruneRow],
    rule: RetentionRule,
    now: datetime,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> PrunePlan:
    """Decide which leading rows of ``rows`` (one app, chronological, all of its visible rows
    at one instant) a prune under ``rule`` removes, and in which batches."""
    size = len(rows)
    entries = [(row.kind, row.call_ids) for row in rows]
    drop = 0
    cutoff = rule.cutoff(now)
    if cutoff is not None:
        while drop < size and rows[drop].created_at < cutoff:
            drop += 1
    if rule.keep_last is not None:
        kinds = [kind for kind, _ in entries]
        drop = max(drop, eviction_count(kinds, rule.keep_last, start_at_user=False))

    binds = requests_of_results(entries)
    reach = _suffix_min(binds)
    while reach[drop] < drop:  # a kept result answers a request in the prefix: keep it whole
        drop = reach[drop]
    if drop > 0:
        while drop < size and entries[drop][0] == KIND_RESULT and binds[drop] is None:
            drop += 1  # a legacy orphan would head the kept rows: it goes with the prefix
    if drop == 0:
        return PrunePlan(0)

    batches: list[PruneBatch] = []
    start = 0
    for index in range(1, drop + 1):
        if index == drop or (index - start >= batch_rows and reach[index] >= index):
            batches.append(PruneBatch(rows[start].id, rows[index - 1].id, index - start))
            start = index
    if drop < size:
        return PrunePlan(drop, batches, rows[drop].id, rows[drop].id)
    return PrunePlan(drop, batches, rows[-1].id + 1, None)
