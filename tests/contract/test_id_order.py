"""Ids of one app follow the order its messages were written, whatever the writers' clocks
(issue 9, item 3). Every test runs on each database x cache pair, sync and async.

Two stores stand for two processes: distinct worker ids, and the second one's snowflake
generator reads a clock that is behind the first one's (or the very same millisecond with a
lower worker id). The first writes an AI message with a tool request, the second its result.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from memstore import (
    AiMessage,
    MemoryStore,
    ToolRequest,
    ToolResult,
    UnknownToolCallError,
    UserMessage,
)
from memstore.core.window import is_synthetic
from memstore.ids import MAX_WORKER_ID, SnowflakeGenerator
from tests.conftest import SESSION_WORKER_ID, StoreFactory
from tests.contract.test_store import count_rows


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def other_worker(offset: int) -> int:
    """A worker id other than this session's (another 'process')."""
    return (SESSION_WORKER_ID + offset) % (MAX_WORKER_ID + 1)


def use_generator(store: MemoryStore, generator: object) -> None:
    """Give ``store`` (or the async store behind the test facade) its own id generator."""
    inner = getattr(store, "_store", store)
    inner._ids = generator


def request_turn(call_id: str) -> list[object]:
    return [
        UserMessage(text="Read a.txt"),
        AiMessage(tool_requests=[ToolRequest(id=call_id, name="read_file", arguments="{}")]),
    ]


def answer(call_id: str) -> list[object]:
    return [
        ToolResult(id=call_id, tool_name="read_file", text="contents of a.txt"),
        AiMessage(text="a.txt says hello."),
    ]


def assert_real_result_in_every_rebuild(store: MemoryStore, app_id: str, expected: list) -> None:
    window = store.load_window(app_id, 100)
    assert window == expected
    assert not any(is_synthetic(message) for message in window)
    report = store.reload(app_id)
    assert (report.orphans_skipped, report.interrupted_answered) == (0, 0)
    assert store.memory(app_id).messages() == expected


def skewed_clock(behind_ms: int) -> Callable[[], int]:
    return lambda: wall_ms() - behind_ms


@pytest.mark.parametrize("behind_ms", [3, 40, 1500, 60_000])
def test_result_from_a_writer_whose_clock_is_behind_lands_after_its_request(
    make_store: StoreFactory, app_id: str, behind_ms: int
) -> None:
    ahead = make_store()
    behind = make_store(worker_id=other_worker(1))
    use_generator(behind, SnowflakeGenerator(other_worker(1), clock=skewed_clock(behind_ms)))

    request_ids = ahead.append(app_id, request_turn("call_1"))
    result_ids = behind.append(app_id, answer("call_1"))

    assert result_ids[0] > request_ids[-1] and result_ids == sorted(result_ids)
    expected = request_turn("call_1") + answer("call_1")
    assert_real_result_in_every_rebuild(ahead, app_id, expected)
    assert_real_result_in_every_rebuild(behind, app_id, expected)


def test_same_millisecond_with_a_lower_worker_id_lands_after_its_request(
    make_store: StoreFactory, app_id: str
) -> None:
    frozen = wall_ms()
    high, low = MAX_WORKER_ID - 1, 1  # the result's writer has the lower worker id
    first = make_store(worker_id=high)
    second = make_store(worker_id=low)
    use_generator(first, SnowflakeGenerator(high, clock=lambda: frozen))
    use_generator(second, SnowflakeGenerator(low, clock=lambda: frozen))

    request_ids = first.append(app_id, request_turn("call_1"))
    result_ids = second.append(app_id, answer("call_1"))

    assert result_ids[0] > request_ids[-1]
    assert_real_result_in_every_rebuild(second, app_id, request_turn("call_1") + answer("call_1"))


class FloorIgnoringIds:
    """Ids from a fixed point in the past, whatever the app's newest id is: what a writer whose
    ids precede the stored request would produce."""

    def __init__(self, start: int) -> None:
        self._next = start

    def next_ids(self, count: int, above: int | None = None) -> list[int]:
        ids = list(range(self._next, self._next + count))
        self._next += count
        return ids


def test_a_result_whose_id_precedes_its_request_is_rejected(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    request_ids = store.append(app_id, request_turn("call_1"))
    rows_before = count_rows(store, app_id)
    past = make_store(worker_id=other_worker(2))
    use_generator(past, FloorIgnoringIds(request_ids[0] - 1_000_000))

    with pytest.raises(UnknownToolCallError):
        past.append(app_id, answer("call_1"))
    assert count_rows(store, app_id) == rows_before  # nothing of the rejected batch was written
    assert store.load_window(app_id)[-1].id == "call_1"  # type: ignore[union-attr]
    assert is_synthetic(store.load_window(app_id)[-1])


def test_a_result_written_before_its_request_is_rejected(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    with pytest.raises(UnknownToolCallError):  # the request comes later in the same batch
        store.append(app_id, [*answer("call_1")[:1], *request_turn("call_1")])
    with pytest.raises(UnknownToolCallError):  # the request was not written yet
        store.append(app_id, answer("call_1"))
    assert count_rows(store, app_id) == (0, 0)
