"""The widening read of a tool group cut by the window's edge reads the group and no more
(issue 29.3): a probe finds the newest tool request before the rows held
(:attr:`RowRequest.requests_only`), the read starts there, and the window is the one a
plain read gives."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from memstore.core.loader import (
    LOOKAHEAD_ROWS,
    WIDEN_LIMIT_ROWS,
    RowRequest,
    run_steps,
    window_steps,
)
from memstore.core.window import StoredMessage, Window
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from tests.unit.test_lazy_window import fetched, same
from tests.unit.test_window_properties import PROPERTY, histories

Fetch = Callable[[RowRequest], list[StoredMessage]]


def below(rows: list[StoredMessage], request: RowRequest) -> list[StoredMessage]:
    return [
        row
        for row in rows
        if (request.before_id is None or row.id < request.before_id)
        and (request.after_id is None or row.id > request.after_id)
    ]


def counting(rows: list[StoredMessage], *, honour: bool) -> tuple[Fetch, list[int]]:
    """A fetch over ``rows`` as the SQL backends do it (``honour``: ``requests_only`` answered
    with tool requests alone), and the sizes of the reads it answered."""
    sizes: list[int] = []

    def fetch(request: RowRequest) -> list[StoredMessage]:
        chosen = below(rows, request)
        if honour and request.requests_only:
            chosen = [
                row
                for row in chosen
                if isinstance(row.message, AiMessage) and row.message.tool_requests
            ]
        chosen = chosen[-request.limit :]
        sizes.append(len(chosen))
        return chosen

    return fetch, sizes


def history(prefix: int, calls: int, after: int) -> list[StoredMessage]:
    """``prefix`` chat messages, one AI message of ``calls`` tool calls and their results,
    then ``after`` chat messages."""
    messages: list[Message] = [UserMessage(text=f"m{i}") for i in range(prefix)]
    requests = [ToolRequest(id=f"c{i}", name="read", arguments="{}") for i in range(calls)]
    messages.append(AiMessage(tool_requests=requests))
    messages += [ToolResult(id=f"c{i}", tool_name="read", text="r") for i in range(calls)]
    messages += [UserMessage(text=f"n{i}") for i in range(after)]
    return [StoredMessage(i, message) for i, message in enumerate(messages, start=1)]


def load(rows: list[StoredMessage], size: int, *, honour: bool) -> tuple[Window, list[int]]:
    fetch, sizes = counting(rows, honour=honour)
    return run_steps(window_steps(size, start_at_user=False), fetch), sizes


def test_a_group_cut_by_the_edge_costs_the_group_not_the_widen_limit() -> None:
    rows = history(prefix=20_000, calls=40, after=19)  # the window's edge: inside the group
    window, sizes = load(rows, 20, honour=True)
    group = 41
    assert sum(sizes) <= 20 + group + LOOKAHEAD_ROWS
    assert sizes[1:] == [1, 8]  # the probe finds the request, the read starts there
    plain, plain_sizes = load(rows, 20, honour=False)
    assert same(window, plain)
    assert sum(plain_sizes) > WIDEN_LIMIT_ROWS  # what the read cost before
    assert window.ids[0] == 20_001  # the request: the group is whole
    assert len(window.messages) == 60


def test_a_result_without_any_request_takes_the_plain_bounded_read() -> None:
    rows = [StoredMessage(i, UserMessage(text=f"m{i}")) for i in range(1, 2001)]
    rows.append(StoredMessage(2001, ToolResult(id="gone", tool_name="read", text="r")))
    rows += [StoredMessage(i, UserMessage(text=f"n{i}")) for i in range(2002, 2010)]
    window, sizes = load(rows, 10, honour=True)
    assert same(window, load(rows, 10, honour=False)[0])
    # the probe finds no request, then one plain read of the widen limit
    assert sizes[1:] == [0, WIDEN_LIMIT_ROWS]


def test_requests_between_the_group_and_its_results_take_more_probes() -> None:
    # two requests, then both groups' results: the newest request before the cut results is
    # not theirs, so a second probe reads back to the right one
    first = AiMessage(
        tool_requests=[ToolRequest(id=f"a{i}", name="t", arguments="{}") for i in range(40)]
    )
    second = AiMessage(tool_requests=[ToolRequest(id="b", name="t", arguments="{}")])
    messages: list[Message] = [UserMessage(text=f"m{i}") for i in range(100)]
    messages += [first, second, ToolResult(id="b", tool_name="t", text="r")]
    messages += [ToolResult(id=f"a{i}", tool_name="t", text="r") for i in range(40)]
    messages += [UserMessage(text=f"n{i}") for i in range(5)]
    rows = [StoredMessage(i, m) for i, m in enumerate(messages, start=1)]
    window, sizes = load(rows, 10, honour=True)
    assert same(window, load(rows, 10, honour=False)[0])
    assert sum(sizes) < 10 + 44 + LOOKAHEAD_ROWS


@PROPERTY
@given(histories(max_steps=80), st.integers(1, 30), st.booleans(), st.booleans())
def test_reading_from_the_request_gives_the_window_a_plain_read_gives(
    rows: list[StoredMessage], max_messages: int, start: bool, lazy: bool
) -> None:
    windows = []
    for honour in (True, False):
        fetch, _ = counting(rows, honour=honour)
        steps = window_steps(max_messages, start_at_user=start, lookahead=2)
        if lazy:
            windows.append(run_steps(steps, lambda r, f=fetch: fetched(f(r))))  # type: ignore[misc]
        else:
            windows.append(run_steps(steps, fetch))
    assert same(windows[0], windows[1])


@PROPERTY
@given(histories(max_steps=80), st.integers(1, 30), st.integers(5, 200))
def test_reading_from_the_request_gives_the_token_window_a_plain_read_gives(
    rows: list[StoredMessage], max_messages: int, budget: int
) -> None:
    windows = []
    for honour in (True, False):
        fetch, _ = counting(rows, honour=honour)
        steps = window_steps(
            max_messages,
            start_at_user=False,
            lookahead=2,
            max_tokens=budget,
            count_tokens=lambda m: 1 + len(getattr(m, "text", None) or "") // 3,
        )
        windows.append(run_steps(steps, fetch))
    assert same(windows[0], windows[1])
