"""The loader as a sans-I/O protocol: it says which rows it needs, the caller fetches them.

Sync and async stores drive the same generator, so the decision (how many rows, whether a
tool group needs the one extra bounded read) exists once::

    steps = window_steps(50, start_at_user=False)
    request = next(steps)            # RowRequest(limit=82, before_id=None)
    ...                              # fetch, then steps.send(rows) until StopIteration
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from memstore.core.rows import FetchedRows
from memstore.core.summary import SummaryRole, is_summary, summary_info, window_summary
from memstore.core.window import StoredMessage, Window, select_window, with_summary
from memstore.messages import Message

LOOKAHEAD_ROWS = 32
"""Rows read beyond the window size, so most tool groups at the edge need no second query."""
WIDEN_LIMIT_ROWS = 1024
"""Most older rows the widening reads may take, in all, to find the request of a result at the
edge."""
WIDEN_PROBES = 4
"""Most probes for the newest tool request before the rows held (see
:attr:`RowRequest.requests_only`); a group still open after them gets one plain read of the
rest of :data:`WIDEN_LIMIT_ROWS`."""
TOKENS_PER_ROW_GUESS = 64
"""For a token budget, the first read assumes messages of at least this many tokens; when
they are smaller, older rows are read in growing bounded pages until the budget is full.
(64: a typical chat or tool message; a smaller guess over-reads and decodes several times the
rows a window of ordinary messages needs, so a long history's read cost more than a short
one's.)"""
TOKEN_WINDOW_MAX_MESSAGES = 100_000
"""The message bound of a token-bounded window given no ``max_messages``."""


@dataclass(frozen=True, slots=True)
class RowRequest:
    """Fetch up to ``limit`` newest non-deleted rows of the app with ``id < before_id`` and
    ``id > after_id``, summary rows left out; with ``summary``, also the app's newest summary
    row (none or one, in the same statement).

    With ``requests_only``, tool-request rows alone (AI messages with tool calls; ``limit=1``:
    the probe of the widening read, one index lookup): the widening read of a tool group cut
    by the window's edge then reads from that request on, the group and no more. A fetch that
    ignores the flag answers with rows of every type; the loader then reads more, never
    less, so the window is the same either way."""

    limit: int
    before_id: int | None = None
    after_id: int | None = None
    summary: bool = False
    requests_only: bool = False


Rows = Sequence[StoredMessage]
"""What a fetch sends back: chronological rows (a :class:`FetchedRows` decodes lazily)."""

WindowSteps = Generator[RowRequest, Rows, Window]

SUFFIX_MARGIN_ROWS = 4
"""Rows :func:`select_lazily` decodes beyond the window's size at first, so a tool group
crossing the window's edge (a request and its results) is usually inside the first try (in
the benchmark data set a third of the windows needed a second try without them, none with)."""
SUFFIX_STEP_ROWS = 8
"""How many more rows :func:`select_lazily` decodes when a tool group reaches past the suffix
it tried (parallel calls of one group are rarely more)."""


def select_lazily(
    rows: Rows,
    max_messages: int,
    *,
    start_at_user: bool,
    history_complete: bool,
    first_try: int,
    max_tokens: int | None = None,
    count_tokens: Callable[[Message], int] | None = None,
) -> Window:
    """:func:`select_window` over ``rows``, deciding from the newest rows alone when they can.

    ``select_window`` of a suffix of the rows, told the history may go on before it, either
    says it needs older rows or returns the window it would return for all the rows: the
    units it visited hold no result whose request lies before the suffix, so the older rows
    add only units older than where it stopped. So the suffix (``first_try`` rows and
    :data:`SUFFIX_MARGIN_ROWS`, growing while a tool group reaches past it) decides, and only
    its rows are decoded (a :class:`FetchedRows` decodes on access). Only
    ``stats.duplicate_results_skipped`` may count fewer (duplicates among rows it never read).
    """
    size = first_try + SUFFIX_MARGIN_ROWS
    total = len(rows)
    if isinstance(rows, FetchedRows) and first_try > 0:
        while size < total:
            window = select_window(
                rows.tail(size),
                max_messages,
                start_at_user=start_at_user,
                history_complete=False,
                max_tokens=max_tokens,
                count_tokens=count_tokens,
            )
            if not window.needs_older_rows:
                return window
            size += max(SUFFIX_STEP_ROWS, size // 4)
    return select_window(
        rows,
        max_messages,
        start_at_user=start_at_user,
        history_complete=history_complete,
        max_tokens=max_tokens,
        count_tokens=count_tokens,
    )


def _joined(older: Rows, rows: Rows) -> Rows:
    """``older`` followed by ``rows``, still decoded on use when both are fetched rows."""
    if isinstance(older, FetchedRows) and isinstance(rows, FetchedRows):
        return older.followed_by(rows)
    return [*older, *rows]


def _first_id(rows: Rows) -> int:
    return rows.ids[0] if isinstance(rows, FetchedRows) else rows[0].id


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

    With ``summaries`` (a summary role), the first read also brings the app's newest summary
    row (the same round trip: one more index probe); when there is one, rows up to the end of
    its covered range are dropped, later reads stay after it, and the window opens with the
    summary in that role (``"exclude"``: not at all). The summary counts toward both bounds
    (:func:`memstore.core.window.with_summary`). ``None``: the raw window, as if no
    compaction had happened.
    """
    found = _Opener(summaries, count_tokens)
    if max_tokens is not None:
        window = yield from _token_steps(
            max_messages,
            max_tokens,
            count_tokens,
            start_at_user=start_at_user,
            lookahead=lookahead,
            widen_limit=widen_limit,
            found=found,
        )
    else:
        window = yield from _message_steps(
            max_messages,
            start_at_user=start_at_user,
            lookahead=lookahead,
            widen_limit=widen_limit,
            found=found,
        )
    return with_summary(window, found.opener, found.opener_id, count_tokens)


class _Opener:
    """The summary a window opens with, taken from the first read's rows."""

    def __init__(
        self, role: SummaryRole | None, count_tokens: Callable[[Message], int] | None
    ) -> None:
        self.role = role
        self.count_tokens = count_tokens
        self.floor: int | None = None
        self.opener: Message | None = None
        self.opener_id = 0

    def first(self, limit: int) -> RowRequest:
        return RowRequest(limit, summary=self.role is not None)

    def take(self, rows: Rows, limit: int) -> tuple[Rows, bool]:
        """The first read's window rows (after the covered range) and whether the rows of the
        window are all there (the read came back short, or reached the covered range)."""
        plain: Rows
        if isinstance(rows, FetchedRows):
            plain, summaries = rows.without_summaries()
        else:
            plain = [row for row in rows if not is_summary(row.message)]
            summaries = [row for row in rows if is_summary(row.message)]
        complete = len(plain) < limit
        if self.role is None or not summaries:
            return plain, complete
        summary = summaries[-1]
        info = summary_info(summary.message)
        if info is None:
            return plain, complete
        self.floor = info.last_id
        self.opener_id = summary.id
        self.opener = window_summary(summary.id, summary.message, self.role)
        after: Rows = (
            plain.after(info.last_id)
            if isinstance(plain, FetchedRows)
            else [row for row in plain if row.id > info.last_id]
        )
        return after, complete or len(after) < len(plain)

    def messages(self, max_messages: int) -> int:
        return max(1, max_messages - 1) if self.opener is not None else max_messages

    def tokens(self, max_tokens: int) -> int:
        if self.opener is None or self.count_tokens is None:
            return max_tokens
        return max(1, max_tokens - self.count_tokens(self.opener))


def _message_steps(
    max_messages: int | None,
    *,
    start_at_user: bool,
    lookahead: int,
    widen_limit: int,
    found: _Opener,
) -> WindowSteps:
    if max_messages is None:
        raise ValueError("a window needs max_messages or max_tokens")
    limit = max_messages + lookahead
    rows, complete = found.take((yield found.first(limit)), limit)
    size = found.messages(max_messages)

    def select(held: Rows, history_complete: bool) -> Window:
        return select_lazily(
            held,
            size,
            start_at_user=start_at_user,
            history_complete=history_complete,
            first_try=size,
        )

    window = select(rows, complete)
    if window.needs_older_rows and rows:
        window = yield from _widened(rows, select, widen_limit, found.floor)
    return window


def _widened(
    rows: Rows, select: Callable[[Rows, bool], Window], widen_limit: int, floor: int | None
) -> WindowSteps:
    """The window of ``rows`` and the older rows the tool group at its edge needs: a probe for
    the newest tool request before the rows held, then the rows from it on (the group's
    request, in a well-formed history: the read is the group and no more), at most
    :data:`WIDEN_PROBES` times, then one plain read of what is left of ``widen_limit`` rows in
    all. The last selection takes the history as complete (a request still missing makes its
    results orphans, as the edge check decides)."""
    budget = widen_limit
    for _ in range(WIDEN_PROBES):
        probe = yield RowRequest(1, before_id=_first_id(rows), after_id=floor, requests_only=True)
        if not probe:  # no request before the rows: the plain read decides
            break
        older = yield RowRequest(budget, before_id=_first_id(rows), after_id=_first_id(probe) - 1)
        budget -= len(older)
        rows = _joined(older, rows)
        window = select(rows, budget <= 0)
        if budget <= 0 or not window.needs_older_rows:
            return window
    older = yield RowRequest(budget, before_id=_first_id(rows), after_id=floor)
    return select(_joined(older, rows), True)


def _token_steps(
    max_messages: int | None,
    max_tokens: int,
    count_tokens: Callable[[Message], int] | None,
    *,
    start_at_user: bool,
    lookahead: int,
    widen_limit: int,
    found: _Opener,
) -> WindowSteps:
    """One read sized for the budget in the common case; older pages (each bounded, growing)
    while the budget is not full and rows remain, up to the message bound."""
    target = TOKEN_WINDOW_MAX_MESSAGES if max_messages is None else max_messages
    cap = target + lookahead
    guess = max(1, -(-max_tokens // TOKENS_PER_ROW_GUESS))
    limit = min(target, guess) + lookahead
    first: Rows
    first, complete = found.take((yield found.first(limit)), limit)
    target = found.messages(target)
    budget = found.tokens(max_tokens)
    floor = found.floor
    rows: Rows = first

    def select(held: Rows, history_complete: bool) -> Window:
        return select_lazily(
            held,
            target,
            start_at_user=start_at_user,
            history_complete=history_complete,
            first_try=len(held) - lookahead,
            max_tokens=budget,
            count_tokens=count_tokens,
        )

    while True:
        window = select(rows, complete)
        if complete or not window.needs_older_rows or not rows:
            return window
        if len(rows) >= cap:  # the last read: only a tool group at the edge needs older rows
            return (yield from _widened(rows, select, widen_limit, floor))
        size = min(max(len(rows), widen_limit), cap - len(rows))
        older = yield RowRequest(size, before_id=_first_id(rows), after_id=floor)
        complete = len(older) < size
        rows = _joined(older, rows)


def run_steps(steps: WindowSteps, fetch: Callable[[RowRequest], Rows]) -> Window:
    """Drive ``steps`` with a synchronous ``fetch``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(fetch(request))
    except StopIteration as done:
        window: Window = done.value
        return window
