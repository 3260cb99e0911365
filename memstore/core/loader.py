"""The loader as a sans-I/O protocol: it says which rows it needs, the caller fetches them.

Sync and async stores drive the same generator, so the decision (how many rows, whether a
tool group needs the one extra bounded read) exists once::

    steps = window_steps(50, start_at_user=False)
    request = next(steps)            # RowRequest(limit=82, before_id=None)
    ...                              # fetch, then steps.send(rows) until StopIteration
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

from memstore.core.summary import SummaryRole, summary_info, window_summary
from memstore.core.window import StoredMessage, Window, select_window, with_summary
from memstore.messages import Message

LOOKAHEAD_ROWS = 32
"""Rows read beyond the window size, so most tool groups at the edge need no second query."""
WIDEN_LIMIT_ROWS = 1024
"""Most older rows the one extra query may read to find the request of a result at the edge."""
TOKENS_PER_ROW_GUESS = 16
"""For a token budget, the first read assumes messages of at least this many tokens; when
they are smaller, older rows are read in growing bounded pages until the budget is full."""
TOKEN_WINDOW_MAX_MESSAGES = 100_000
"""The message bound of a token-bounded window given no ``max_messages``."""


@dataclass(frozen=True, slots=True)
class RowRequest:
    """Fetch up to ``limit`` newest non-deleted rows of the app with ``id < before_id`` and
    ``id > after_id``, summary rows left out; with ``summary``, the app's newest summary row
    instead (none or one)."""

    limit: int
    before_id: int | None = None
    after_id: int | None = None
    summary: bool = False


WindowSteps = Generator[RowRequest, list[StoredMessage], Window]


def window_steps(
    max_messages: int | None,
    *,
    start_at_user: bool,
    max_tokens: int | None = None,
    count_tokens: Callable[[Message], int] | None = None,
    summaries: SummaryRole | None = None,
    lookahead: int = LOOKAHEAD_ROWS,
    widen_limit: int = WIDEN_LIMIT_ROWS,
) -> WindowSteps:
    """Yield the row reads the window needs (chronological rows are sent back); return it.

    ``max_messages=None`` needs ``max_tokens`` (the window is then bounded by
    :data:`TOKEN_WINDOW_MAX_MESSAGES` messages).

    With ``summaries`` (a summary role), the first read is the app's newest summary row (one
    indexed lookup); when there is one, only rows after its covered range are read and the
    window opens with the summary in that role (``"exclude"``: not at all). The summary
    counts toward both bounds (:func:`memstore.core.window.with_summary`). ``None``: the raw
    window, as if no compaction had happened.
    """
    floor: int | None = None
    opener: Message | None = None
    opener_id = 0
    if summaries is not None:
        found = yield RowRequest(1, summary=True)
        info = summary_info(found[-1].message) if found else None
        if found and info is not None:
            floor = info.last_id
            opener_id = found[-1].id
            opener = window_summary(opener_id, found[-1].message, summaries)
    if opener is not None:
        if max_messages is not None:
            max_messages = max(1, max_messages - 1)
        if max_tokens is not None and count_tokens is not None:
            max_tokens = max(1, max_tokens - count_tokens(opener))
    if max_tokens is not None:
        window = yield from _token_steps(
            max_messages,
            max_tokens,
            count_tokens,
            start_at_user=start_at_user,
            lookahead=lookahead,
            widen_limit=widen_limit,
            floor=floor,
        )
    else:
        window = yield from _message_steps(
            max_messages,
            start_at_user=start_at_user,
            lookahead=lookahead,
            widen_limit=widen_limit,
            floor=floor,
        )
    return with_summary(window, opener, opener_id, count_tokens)


def _message_steps(
    max_messages: int | None,
    *,
    start_at_user: bool,
    lookahead: int,
    widen_limit: int,
    floor: int | None,
) -> WindowSteps:
    if max_messages is None:
        raise ValueError("a window needs max_messages or max_tokens")
    first = RowRequest(max_messages + lookahead, after_id=floor)
    rows = yield first
    window = select_window(
        rows, max_messages, start_at_user=start_at_user, history_complete=len(rows) < first.limit
    )
    if window.needs_older_rows and rows:
        older = yield RowRequest(widen_limit, before_id=rows[0].id, after_id=floor)
        window = select_window(
            older + rows, max_messages, start_at_user=start_at_user, history_complete=True
        )
    return window


def _token_steps(
    max_messages: int | None,
    max_tokens: int,
    count_tokens: Callable[[Message], int] | None,
    *,
    start_at_user: bool,
    lookahead: int,
    widen_limit: int,
    floor: int | None,
) -> WindowSteps:
    """One read sized for the budget in the common case; older pages (each bounded, growing)
    while the budget is not full and rows remain, up to the message bound."""
    target = TOKEN_WINDOW_MAX_MESSAGES if max_messages is None else max_messages
    cap = target + lookahead
    guess = max(1, -(-max_tokens // TOKENS_PER_ROW_GUESS))
    limit = min(target, guess) + lookahead
    rows = yield RowRequest(limit, after_id=floor)
    complete = len(rows) < limit

    def select(history_complete: bool) -> Window:
        return select_window(
            rows,
            target,
            start_at_user=start_at_user,
            history_complete=history_complete,
            max_tokens=max_tokens,
            count_tokens=count_tokens,
        )

    while True:
        window = select(complete)
        if complete or not window.needs_older_rows or not rows:
            return window
        if len(rows) >= cap:  # the last read: only a tool group at the edge needs older rows
            rows = (yield RowRequest(widen_limit, before_id=rows[0].id, after_id=floor)) + rows
            return select(True)
        size = min(max(len(rows), widen_limit), cap - len(rows))
        older = yield RowRequest(size, before_id=rows[0].id, after_id=floor)
        complete = len(older) < size
        rows = older + rows


def run_steps(steps: WindowSteps, fetch: Callable[[RowRequest], list[StoredMessage]]) -> Window:
    """Drive ``steps`` with a synchronous ``fetch``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(fetch(request))
    except StopIteration as done:
        window: Window = done.value
        return window
