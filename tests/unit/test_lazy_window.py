"""The loader decodes only the rows a window needs (issue 14): :class:`FetchedRows` and
:func:`select_lazily` give exactly the window :func:`select_window` gives over every row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.core.crypto import PLAIN
from memstore.core.loader import RowRequest, run_steps, select_lazily, window_steps
from memstore.core.rows import SUMMARY, FetchedRows, encode_payload, message_type
from memstore.core.window import StoredMessage, Window, select_window
from memstore.errors import StorageError
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from tests.unit.test_window_properties import PROPERTY, histories


def fetched(rows: list[StoredMessage]) -> FetchedRows:
    return FetchedRows(
        [row.id for row in rows],
        [encode_payload(row.message) for row in rows],
        [message_type(row.message) for row in rows],
        PLAIN,
        "app",
    )


def same(left: Window, right: Window) -> bool:
    """Equal windows; ``duplicate_results_skipped`` may differ (it counts rows looked at)."""
    left.stats.duplicate_results_skipped = right.stats.duplicate_results_skipped = 0
    return (
        left.messages == right.messages
        and left.ids == right.ids
        and left.synthetic_call_ids == right.synthetic_call_ids
        and left.needs_older_rows == right.needs_older_rows
        and left.stats == right.stats
    )


def count_tokens(message: Message) -> int:
    return 1 + len(getattr(message, "text", None) or "") // 3


@PROPERTY
@given(histories(), st.integers(1, 40), st.booleans(), st.booleans(), st.data())
def test_a_suffix_decides_exactly_the_window_of_all_rows(
    rows: list[StoredMessage], max_messages: int, start: bool, complete: bool, data: st.DataObject
) -> None:
    lazy = fetched(rows)
    first_try = data.draw(st.integers(1, max(1, len(rows))))
    budget = data.draw(st.one_of(st.none(), st.integers(1, 60)))
    counter = None if budget is None else count_tokens
    expected = select_window(
        rows,
        max_messages,
        start_at_user=start,
        history_complete=complete,
        max_tokens=budget,
        count_tokens=counter,
    )
    got = select_lazily(
        lazy,
        max_messages,
        start_at_user=start,
        history_complete=complete,
        first_try=first_try,
        max_tokens=budget,
        count_tokens=counter,
    )
    assert same(got, expected)


@PROPERTY
@given(histories(max_steps=60), st.integers(1, 30), st.booleans())
def test_the_loader_gives_the_same_window_from_lazy_rows(
    rows: list[StoredMessage], max_messages: int, start: bool
) -> None:
    def fetch_from(lazy: bool):  # type: ignore[no-untyped-def]
        def fetch(request: RowRequest) -> list[StoredMessage] | FetchedRows:
            chosen = [
                row
                for row in rows
                if (request.before_id is None or row.id < request.before_id)
                and (request.after_id is None or row.id > request.after_id)
            ][-request.limit :]
            return fetched(chosen) if lazy else chosen

        return fetch

    steps = [window_steps(max_messages, start_at_user=start, lookahead=4) for _ in range(2)]
    assert same(run_steps(steps[0], fetch_from(True)), run_steps(steps[1], fetch_from(False)))


def test_the_look_ahead_rows_stay_undecoded_when_the_window_does_not_need_them() -> None:
    rows = [StoredMessage(i, UserMessage(text=f"m{i}")) for i in range(1, 83)]
    lazy = fetched(rows)
    lazy.payloads[0] = "not json"  # would raise if decoded
    window = select_lazily(lazy, 50, start_at_user=False, history_complete=False, first_try=50)
    assert [m.text for m in window.messages] == [f"m{i}" for i in range(33, 83)]  # type: ignore[union-attr]
    with pytest.raises(StorageError, match="row 1 of chat_history_original"):
        lazy[0]


def test_summary_rows_are_told_apart_by_their_type_without_decoding() -> None:
    rows = [StoredMessage(i, UserMessage(text=f"m{i}")) for i in range(1, 6)]
    lazy = fetched(rows)
    lazy.kinds[2] = SUMMARY
    plain, summaries = lazy.without_summaries()
    assert plain.ids == [1, 2, 4, 5] and [row.id for row in summaries] == [3]
    assert plain.after(2).ids == [4, 5]
    assert lazy.tail(2) == rows[-2:]


def test_the_widening_read_decodes_only_the_older_rows_the_window_needs() -> None:
    call = ToolRequest(id="c1", name="read", arguments="{}")
    messages: list[Message] = [UserMessage(text=f"u{i}") for i in range(1, 61)]
    messages += [AiMessage(tool_requests=[call])]
    messages += [UserMessage(text=f"v{i}") for i in range(62, 100)]
    messages += [ToolResult(id="c1", tool_name="read", text="r")]
    messages += [UserMessage(text=f"w{i}") for i in range(101, 131)]
    rows = [StoredMessage(i, m) for i, m in enumerate(messages, start=1)]
    every = fetched(rows)
    every.payloads[4] = "not json"  # row 5: far older than the request the window needs

    def fetch(request: RowRequest) -> FetchedRows:
        return every.subset(
            [
                i
                for i, row_id in enumerate(every.ids)
                if (request.before_id is None or row_id < request.before_id)
                and (request.after_id is None or row_id > request.after_id)
            ][-request.limit :]
        )

    # The newest rows hold the result but not its request: a widening read brings rows 1-76;
    # the window (the result belongs to the group at row 61, older than the window's edge)
    # is decided from rows 51-130, and row 5 is never decoded.
    window = run_steps(window_steps(50, start_at_user=False, lookahead=4), fetch)
    assert window.ids == [*range(80, 100), *range(101, 131)]
