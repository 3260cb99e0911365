"""On every backend, a window whose edge cuts a tool group reads the group and no more
(issue 29.3): rows fetched ≤ window + group + the look-ahead, where one plain widening read
took up to 1,024 older rows. The reads are counted on the store's own SQL history (a
pass-through counter over the real database), and the window is the whole group."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from memstore import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from memstore.core.loader import LOOKAHEAD_ROWS
from memstore.core.validate import validate


def counted_reads(store: Any) -> list[int]:
    """Count the rows of every loader read the store makes from now on."""
    inner = getattr(store, "_store", store)  # the async store behind the test facade
    history = inner._sql
    sizes: list[int] = []
    fetch = history.fetch

    if inspect.iscoroutinefunction(fetch):

        @functools.wraps(fetch)
        async def afetch(app_id: str, request: Any) -> Any:
            rows = await fetch(app_id, request)
            sizes.append(len(rows))
            return rows

        history.fetch = afetch
    else:

        @functools.wraps(fetch)
        def sfetch(app_id: str, request: Any) -> Any:
            rows = fetch(app_id, request)
            sizes.append(len(rows))
            return rows

        history.fetch = sfetch
    return sizes


def history(prefix: int, calls: int, after: int) -> list[Message]:
    messages: list[Message] = []
    for i in range(prefix // 2):
        messages += [UserMessage(text=f"q{i}"), AiMessage(text=f"a{i}")]
    requests = [ToolRequest(id=f"c{i}", name="read", arguments="{}") for i in range(calls)]
    messages.append(AiMessage(tool_requests=requests))
    messages += [ToolResult(id=f"c{i}", tool_name="read", text=f"r{i}") for i in range(calls)]
    for i in range(after // 2):
        messages += [UserMessage(text=f"u{i}"), AiMessage(text=f"b{i}")]
    return messages


def test_a_group_cut_by_the_window_edge_is_read_whole_and_no_more(store: Any, app_id: str) -> None:
    messages = history(prefix=1_200, calls=40, after=18)
    for start in range(0, len(messages), 400):
        store.append(app_id, messages[start : start + 400])
    sizes = counted_reads(store)
    window = store.load_window(app_id, 20)
    assert window == messages[-(18 + 41) :]  # the group whole, its request first
    assert validate(window, "openai") == []
    assert len(sizes) == 3, sizes  # the first read, the probe for the request, the group
    assert sum(sizes) <= 20 + 41 + LOOKAHEAD_ROWS, sizes
