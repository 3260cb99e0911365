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

from memstore.core.window import StoredMessage, Window, select_window

LOOKAHEAD_ROWS = 32
"""Rows read beyond the window size, so most tool groups at the edge need no second query."""
WIDEN_LIMIT_ROWS = 1024
"""Most older rows the one extra query may read to find the request of a result at the edge."""


@dataclass(frozen=True, slots=True)
class RowRequest:
    """Fetch up to ``limit`` newest non-deleted rows of the app with ``id < before_id``."""

    limit: int
    before_id: int | None = None


WindowSteps = Generator[RowRequest, list[StoredMessage], Window]


def window_steps(
    max_messages: int,
    *,
    start_at_user: bool,
    lookahead: int = LOOKAHEAD_ROWS,
    widen_limit: int = WIDEN_LIMIT_ROWS,
) -> WindowSteps:
    """Yield the row reads the window needs (chronological rows are sent back); return it."""
    first = RowRequest(max_messages + lookahead)
    rows = yield first
    window = select_window(
        rows, max_messages, start_at_user=start_at_user, history_complete=len(rows) < first.limit
    )
    if window.needs_older_rows and rows:
        older = yield RowRequest(widen_limit, before_id=rows[0].id)
        window = select_window(
            older + rows, max_messages, start_at_user=start_at_user, history_complete=True
        )
    return window


def run_steps(steps: WindowSteps, fetch: Callable[[RowRequest], list[StoredMessage]]) -> Window:
    """Drive ``steps`` with a synchronous ``fetch``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(fetch(request))
    except StopIteration as done:
        window: Window = done.value
        return window
