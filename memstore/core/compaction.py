"""The compaction decision: which part of a window a summary replaces. Pure, no I/O.

A window is a run of *units* (one message, or a tool request with its results). The newest
whole units that satisfy ``keep_last_tokens`` and ``keep_last_messages`` stay; everything
older in the window (with the previous summary, so summaries chain) goes to the summarizer.
The cut never splits a tool group, and the newest unit always stays (a tool call still
running is never summarized).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memstore.core.summary import SummaryInfo, is_summary, summary_info
from memstore.core.window import KIND_RESULT, Window, entry_for
from memstore.messages import Message


def compaction_cut(
    kinds: Sequence[str],
    tokens: Sequence[int],
    keep_last_tokens: int | None,
    keep_last_messages: int | None,
) -> int:
    """Where the kept part of a window's entries starts: the newest whole units (a message, or
    a request with the results after it) whose tokens sum to at most ``keep_last_tokens`` and
    whose messages number at most ``keep_last_messages`` (a ``None`` bound does not apply).
    The newest unit is always kept, so the answer is below ``len(kinds)`` for a non-empty
    window; ``0`` means nothing is older than the kept part."""
    size = len(kinds)
    start = size
    total_tokens = 0
    total_messages = 0
    index = size - 1
    while index >= 0:
        first = index
        while first > 0 and kinds[first] == KIND_RESULT:
            first -= 1
        cost = sum(tokens[first : index + 1])
        count = index + 1 - first
        if start < size and (
            (keep_last_tokens is not None and total_tokens + cost > keep_last_tokens)
            or (keep_last_messages is not None and total_messages + count > keep_last_messages)
        ):
            break
        total_tokens += cost
        total_messages += count
        start = first
        index = first - 1
    return start


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What one compaction summarizes and records."""

    inputs: list[Message]
    """What the summarizer gets: the previous summary (if any), then the covered messages."""
    info: SummaryInfo
    """The range the new summary covers."""
    previous_id: int | None
    """The row id of the summary the window opened with (``None``: none)."""
    kept_messages: int
    kept_tokens: int


def plan_compaction(
    window: Window,
    count: Callable[[Message], int],
    keep_last_tokens: int | None,
    keep_last_messages: int | None,
) -> CompactionPlan | None:
    """Decide a compaction of ``window`` (loaded with its summary as a system message, and
    with row ids); ``None`` when nothing is older than the part that stays.

    The covered range runs from the previous summary's first id (or the first covered
    message's) to the newest covered row below every kept row; a result stored late for a
    covered request (with an id above a kept row) is then outside the range and, with its
    request summarized, is left out of later windows as an orphan.
    """
    messages = window.messages
    ids = window.ids
    previous = messages[0] if messages and is_summary(messages[0]) else None
    offset = 1 if previous is not None else 0
    tail = messages[offset:]
    tail_ids = ids[offset:]
    tokens = [count(message) for message in tail]
    cut = compaction_cut(
        [entry_for(m).kind for m in tail], tokens, keep_last_tokens, keep_last_messages
    )
    if cut <= 0:
        return None
    kept_floor = min(tail_ids[cut:])
    covered_ids = tail_ids[:cut]
    last = max(row_id for row_id in covered_ids if row_id < kept_floor)
    previous_info = None if previous is None else summary_info(previous)
    first = previous_info.first_id if previous_info is not None else min(covered_ids)
    return CompactionPlan(
        inputs=list(messages[:offset]) + list(tail[:cut]),
        info=SummaryInfo(first, last, cut),
        previous_id=ids[0] if previous is not None else None,
        kept_messages=len(tail) - cut,
        kept_tokens=sum(tokens[cut:]),
    )


def over_threshold(
    messages: Sequence[Message], count: Callable[[Message], int], threshold: int
) -> bool:
    """True when ``messages`` (a window) count more than ``threshold`` tokens: automatic
    compaction is due."""
    total = 0
    for message in messages:
        total += count(message)
        if total > threshold:
            return True
    return False
