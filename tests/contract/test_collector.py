"""The stream collector on every database x cache pair (see conftest.BACKENDS)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from memstore import (
    AiMessage,
    IncompleteToolCallError,
    InvalidMessageError,
    MemoryStore,
    MessageTooLargeError,
    StreamProtocolError,
    ToolResult,
    UserMessage,
)
from memstore.core.validate import validate
from memstore.core.window import is_synthetic
from memstore.errors import UnknownToolCallError
from memstore.messages import Message
from memstore.sql.schema import display, original
from tests.conftest import StoreFactory
from tests.unit.test_stream import ANTHROPIC_STREAM, OPENAI_STREAM, as_objects

ARGS_A = '{"path": "a.txt",  "content": "héllo 🌍"}'
ARGS_B = '{ "path":"b.txt" , "mode" : 420 }'


class InsertCounter:
    def __init__(self) -> None:
        self.original = 0
        self.display = 0
        self.other = 0
        self.generation = 0  # every write first raises its app's generation (and locks it)

    def __call__(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        head = statement.lstrip().upper()
        if not head.startswith("INSERT"):
            return
        if "CHAT_APP_GENERATION" in head.split("(")[0]:
            self.generation += 1
        elif "CHAT_HISTORY_ORIGINAL" in head.split("(")[0]:
            self.original += 1
        elif "CHAT_HISTORY" in head.split("(")[0]:
            self.display += 1
        else:
            self.other += 1


@contextmanager
def count_inserts(store: MemoryStore) -> Iterator[InsertCounter]:
    counter = InsertCounter()
    engine = getattr(store, "event_engine", store.engine)  # the async store's sync_engine
    sa.event.listen(engine, "before_cursor_execute", counter)
    try:
        yield counter
    finally:
        sa.event.remove(engine, "before_cursor_execute", counter)


def original_count(store: MemoryStore, app_id: str) -> int:
    with store.engine.connect() as conn:
        query = sa.select(sa.func.count()).where(original.c.app_id == app_id)
        return int(conn.execute(query).scalar() or 0)


def display_rows(store: MemoryStore, app_id: str) -> list[Any]:
    with store.engine.connect() as conn:
        query = sa.select(display).where(display.c.app_id == app_id).order_by(display.c.id)
        return list(conn.execute(query))


def assert_valid(window: list[Message]) -> None:
    assert validate(window, "openai") == []
    assert validate(window, "anthropic") == []


def stream_args(turn: Any, index: int, call_id: str, name: str, args: str) -> None:
    turn.on_tool_call_delta(index, id=call_id, name=name)
    for i in range(0, len(args), 5):
        turn.on_tool_call_delta(index, arguments=args[i : i + 5])


def test_multi_round_turn_writes_what_the_provider_saw(store: MemoryStore, app_id: str) -> None:
    user = UserMessage(text="Create two files, then report")
    store.append(app_id, [user], user_id="u-7")
    store.memory(app_id).messages()  # a cached window exists, so the flushes append to it
    with count_inserts(store) as inserts, store.collector(app_id, user_id="u-7") as turn:
        for delta in ["Let me ", "check."]:
            turn.on_text(delta)
        stream_args(turn, 0, "c1", "read_file", '{"path": "."}')
        assert [r.id for r in turn.tool_calls()] == ["c1"]
        turn.on_tool_executed("c1", "empty dir")
        # durable before the next model call
        assert original_count(store, app_id) == 3 and inserts.original == 1
        turn.on_text("Creating both.")
        turn.on_tool_call_delta(0, id="c2", name="write_file")
        turn.on_tool_call_delta(1, id="c3", name="write_file")
        for i in range(0, 40, 4):
            turn.on_tool_call_delta(1, arguments=ARGS_B[i : i + 4])
            turn.on_tool_call_delta(0, arguments=ARGS_A[i : i + 4])
        requests = turn.tool_calls()
        assert [r.arguments for r in requests] == [ARGS_A, ARGS_B]
        turn.on_tool_executed("c3", "ok b")
        # a tool that ran is durable at once, with its AI message, before its sibling returns
        assert inserts.original == 2 and original_count(store, app_id) == 5
        turn.on_tool_executed("c2", "ok a")
        assert inserts.original == 3
        for delta in ["Created ", "a.txt and b.txt", "."]:
            turn.on_text(delta)
        assert inserts.original == 3 and inserts.display == 0  # nothing per delta
        seen = [user, *turn.turn_messages]
    # flush points: one per executed tool + the turn end (final text + the display row)
    assert (inserts.original, inserts.display, inserts.other) == (4, 1, 0)
    assert inserts.generation == inserts.original
    assert turn.flushes == 4
    window = store.load_window(app_id)
    assert window == [*seen, AiMessage(text="Created a.txt and b.txt.")]
    assert [m.type for m in window] == [
        "user",
        "ai",
        "tool_result",
        "ai",
        "tool_result",
        "tool_result",
        "ai",
    ]
    assert_valid(window)
    assert store.memory(app_id).messages() == window
    store.memory(app_id).invalidate()
    assert store.memory(app_id).messages() == window
    rows = display_rows(store, app_id)
    assert [(r.role, r.status, r.user_id) for r in rows] == [
        ("user", "ok", "u-7"),
        ("ai", "ok", "u-7"),
    ]
    assert rows[1].content.splitlines() == [
        "Let me check.",
        '[tool] read_file({"path": "."}) -> ok',
        "Creating both.",
        f"[tool] write_file({ARGS_A.replace('  ', ' ')}) -> ok",
        f"[tool] write_file({' '.join(ARGS_B.split())}) -> ok",
        "Created a.txt and b.txt.",
    ]


def test_text_only_turn_is_one_flush(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi")])
    with count_inserts(store) as inserts, store.collector(app_id) as turn:
        for char in "Hello, wörld 🌍":
            turn.on_text(char)
    assert (inserts.original, inserts.display) == (1, 1)
    assert store.load_window(app_id)[-1] == AiMessage(text="Hello, wörld 🌍")
    assert store.history(app_id)[0].text == "Hello, wörld 🌍"


def test_registered_formatter_shapes_the_display_row(store: MemoryStore, app_id: str) -> None:
    store.register_formatter("write_file", lambda req, res: f"wrote a file ({res and res.text})")
    store.append(app_id, [UserMessage(text="go")])
    with store.collector(app_id) as turn:
        stream_args(turn, 0, "c1", "write_file", ARGS_A)
        turn.on_tool_executed("c1", "ok")
        turn.on_text("Done.")
    assert store.history(app_id)[0].text == "wrote a file (ok)\nDone."


def test_failure_flushes_completed_pairs_and_never_fabricates_a_reply(
    store: MemoryStore, app_id: str
) -> None:
    store.append(app_id, [UserMessage(text="do it")])
    store.memory(app_id).messages()
    with pytest.raises(RuntimeError, match="tool crashed"), store.collector(app_id) as turn:
        stream_args(turn, 0, "c1", "read_file", "{}")
        turn.on_tool_executed("c1", "one")
        turn.on_text("Now both.")
        stream_args(turn, 0, "c2", "write_file", ARGS_A)
        stream_args(turn, 1, "c3", "write_file", ARGS_B)
        turn.on_tool_executed("c2", "ok a")
        raise RuntimeError("tool crashed")
    window = store.load_window(app_id)
    kinds = ["user", "ai", "tool_result", "ai", "tool_result", "tool_result"]
    assert [m.type for m in window] == kinds
    last = window[-1]
    assert isinstance(last, ToolResult) and last.id == "c3" and is_synthetic(last)
    assert not any(isinstance(m, AiMessage) and not m.tool_requests for m in window)
    assert_valid(window)
    cached = store.memory(app_id).messages()
    assert cached == window
    assert_valid(cached)
    row = store.history(app_id)[0]
    assert row.status == "failed"
    assert row.text.splitlines()[-1] == "[failed] RuntimeError: tool crashed"
    assert "Now both." in row.text


@pytest.mark.parametrize("error", [asyncio.CancelledError, KeyboardInterrupt])
def test_cancellation_fails_the_turn_and_re_raises(
    store: MemoryStore, app_id: str, error: type[BaseException]
) -> None:
    store.append(app_id, [UserMessage(text="stream")])
    store.memory(app_id).messages()
    with pytest.raises(error), store.collector(app_id) as turn:
        turn.on_text("Partial ans")
        turn.on_tool_call_delta(0, id="c1", name="read", arguments='{"half')
        raise error()
    window = store.load_window(app_id)
    assert window == [UserMessage(text="stream"), AiMessage(text="Partial ans")]
    assert store.memory(app_id).messages() == window
    row = store.history(app_id)[0]
    assert (row.status, row.text) == ("failed", f"Partial ans\n[failed] {error.__name__}")


def test_failure_before_any_output_writes_only_the_failed_display_row(
    store: MemoryStore, app_id: str
) -> None:
    store.append(app_id, [UserMessage(text="x")])
    with count_inserts(store) as inserts, pytest.raises(ValueError), store.collector(app_id):
        raise ValueError("provider down")
    assert (inserts.original, inserts.display) == (0, 1)
    assert store.history(app_id)[0].text == "[failed] ValueError: provider down"


def test_incomplete_call_at_turn_end_fails_the_turn(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="x")])
    with pytest.raises(IncompleteToolCallError), store.collector(app_id) as turn:
        turn.on_text("Calling")
        turn.on_tool_call_delta(0, id="c1", name="read", arguments='{"a": ')
    assert store.load_window(app_id)[-1] == AiMessage(text="Calling")
    assert store.history(app_id)[0].status == "failed"


def test_bad_calls_write_nothing_and_the_turn_stays_usable(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="x")])
    with count_inserts(store) as inserts, store.collector(app_id) as turn:
        turn.on_tool_call_delta(0, id="c1", name="read", arguments="{")
        with pytest.raises(StreamProtocolError):
            turn.on_tool_executed("unknown", "r")
        with pytest.raises(IncompleteToolCallError):
            turn.on_tool_executed("c1", "r")
        with pytest.raises(StreamProtocolError):
            turn.feed({"type": "mystery"})
        assert inserts.original == 0
        turn.on_tool_call_delta(0, arguments="}")
        turn.on_tool_executed("c1", "r")
        with pytest.raises(StreamProtocolError):
            turn.on_tool_executed("c1", "r")
        turn.on_text("ok")
    assert (inserts.original, inserts.display) == (2, 1)
    assert_valid(store.load_window(app_id))
    with pytest.raises(StreamProtocolError, match="closed"):
        turn.on_text("after the end")


@pytest.mark.parametrize(
    ("protocol", "objects"),
    [
        ("openai", False),
        ("openai", True),
        ("anthropic", False),
        ("anthropic", True),
        ("langchain4j", False),
    ],
)
def test_feed_protocols_through_the_store(
    store: MemoryStore, app_id: str, protocol: str, objects: bool
) -> None:
    store.append(app_id, [UserMessage(text="go")])
    with count_inserts(store) as inserts, store.collector(app_id) as turn:
        if protocol == "openai":
            chunks: list[Any] = OPENAI_STREAM
        elif protocol == "anthropic":
            chunks = ANTHROPIC_STREAM
        else:
            chunks = [
                {"type": "ai_response", "data": "Running."},
                {"type": "tool_request", "id": "t1", "name": "ls", "arguments": '{"d":'},
                {"type": "tool_request", "id": "t1", "name": "ls", "arguments": ' "."}'},
            ]
        for chunk in chunks:
            turn.feed(as_objects(chunk) if objects else chunk)
        for request in turn.tool_calls():
            if protocol == "langchain4j":
                turn.feed(
                    {
                        "type": "tool_executed",
                        "id": request.id,
                        "name": request.name,
                        "arguments": request.arguments,
                        "result": "done",
                    }
                )
            else:
                turn.on_tool_executed(request.id, "done")
        turn.feed({"type": "ai_response", "data": "All done."})
    seen = turn.turn_messages
    executed = sum(1 for m in seen if isinstance(m, ToolResult))
    assert (inserts.original, inserts.display) == (executed + 1, 1)
    window = store.load_window(app_id)
    assert window == [UserMessage(text="go"), *seen]
    assert window[-1] == AiMessage(text="All done.")
    assert_valid(window)


# -- a rejected tool result (issue 9, item 1) ---------------------------------------------------

LIMIT = 2000
BAD_RESULTS = {
    "nul": ("PK\x03\x04\x00\x00binary", InvalidMessageError),
    "oversized": ("x" * (LIMIT + 1), MessageTooLargeError),
    "lone-surrogate": ("bad \udc80 byte", InvalidMessageError),
}


def parallel_calls(turn: Any) -> None:
    turn.on_text("Reading and sending at once.")
    stream_args(turn, 0, "c1", "read_file", '{"path": "report.bin"}')
    stream_args(turn, 1, "c2", "send_email", '{"to": "ops@example.com"}')
    assert [r.id for r in turn.tool_calls()] == ["c1", "c2"]


@pytest.mark.parametrize("bad", sorted(BAD_RESULTS))
def test_rejected_result_changes_nothing_and_a_cleaned_retry_is_stored(
    make_store: StoreFactory, app_id: str, bad: str
) -> None:
    store = make_store(max_text_bytes=LIMIT)
    result, error = BAD_RESULTS[bad]
    store.append(app_id, [UserMessage(text="read the report, mail ops")])
    store.memory(app_id).messages()
    with count_inserts(store) as inserts, store.collector(app_id) as turn:
        parallel_calls(turn)
        with pytest.raises(error) as info:
            turn.on_tool_executed("c1", result)
        assert result not in str(info.value)  # the error names the call, not the content
        assert "c1" in str(info.value)
        assert inserts.original == 0 and original_count(store, app_id) == 1
        turn.on_tool_executed("c2", "sent")  # the sibling that ran: durable at once
        assert inserts.original == 1 and original_count(store, app_id) == 3
        turn.on_tool_executed("c1", "cleaned report")  # the retry is accepted
        assert inserts.original == 2
        turn.on_text("Done.")
    window = store.load_window(app_id)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "tool_result", "ai"]
    assert window[2] == ToolResult(id="c2", tool_name="send_email", text="sent")
    assert window[3] == ToolResult(id="c1", tool_name="read_file", text="cleaned report")
    assert window[4] == AiMessage(text="Done.")
    assert not any(is_synthetic(m) for m in window)
    assert_valid(window)
    assert store.memory(app_id).messages() == window
    row = store.history(app_id)[0]
    assert row.status == "ok"
    assert [line.endswith("-> ok") for line in row.text.splitlines()] == [
        False,
        True,
        True,
        False,
    ]


@pytest.mark.parametrize("bad", sorted(BAD_RESULTS))
def test_unretried_rejected_result_keeps_the_sibling_and_the_display_row_truthful(
    make_store: StoreFactory, app_id: str, bad: str
) -> None:
    store = make_store(max_text_bytes=LIMIT)
    result, error = BAD_RESULTS[bad]
    store.append(app_id, [UserMessage(text="read the report, mail ops")])
    store.memory(app_id).messages()
    with pytest.raises(error), store.collector(app_id) as turn:
        parallel_calls(turn)
        turn.on_tool_executed("c2", "sent")
        turn.on_tool_executed("c1", result)  # the app lets the error fail the turn
    window = store.load_window(app_id)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "tool_result"]
    assert isinstance(window[1], AiMessage) and window[1].text == "Reading and sending at once."
    assert [c.id for c in window[1].tool_requests] == ["c1", "c2"]
    assert window[2] == ToolResult(id="c2", tool_name="send_email", text="sent")
    assert is_synthetic(window[3]) and window[3].id == "c1"  # type: ignore[union-attr]
    assert_valid(window)
    assert store.memory(app_id).messages() == window
    row = store.history(app_id)[0]
    assert row.status == "failed"
    lines = row.text.splitlines()
    read_line = next(line for line in lines if "read_file" in line)
    send_line = next(line for line in lines if "send_email" in line)
    assert not read_line.endswith("-> ok")  # never stored: not shown as a success
    assert send_line.endswith("-> ok")
    assert lines[-1].startswith(f"[failed] {error.__name__}: ")
    assert result not in row.text


def test_rejected_result_left_unreported_at_a_normal_turn_end(
    make_store: StoreFactory, app_id: str
) -> None:
    """The app catches the rejection and ends the turn: the AI request and the sibling's
    result are stored, the loader answers the unreported call, the row claims no success."""
    store = make_store(max_text_bytes=LIMIT)
    store.append(app_id, [UserMessage(text="go")])
    with count_inserts(store) as inserts, store.collector(app_id) as turn:
        parallel_calls(turn)
        with pytest.raises(InvalidMessageError):
            turn.on_tool_executed("c1", "\x00")
        turn.on_tool_executed("c2", "sent")
    assert (inserts.original, inserts.display) == (1, 1)  # no flush re-sent a bad batch
    window = store.load_window(app_id)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "tool_result"]
    assert window[2] == ToolResult(id="c2", tool_name="send_email", text="sent")
    assert is_synthetic(window[3]) and window[3].id == "c1"  # type: ignore[union-attr]
    assert_valid(window)
    row = store.history(app_id)[0]
    assert row.status == "ok"
    lines = row.text.splitlines()
    assert not next(x for x in lines if "read_file" in x).endswith("-> ok")
    assert next(x for x in lines if "send_email" in x).endswith("-> ok")


@pytest.mark.parametrize("bad", sorted(BAD_RESULTS))
def test_truncate_stores_a_marked_result(make_store: StoreFactory, app_id: str, bad: str) -> None:
    store = make_store(max_text_bytes=LIMIT)
    result, _ = BAD_RESULTS[bad]
    store.append(app_id, [UserMessage(text="go")])
    with store.collector(app_id) as turn:
        parallel_calls(turn)
        turn.on_tool_executed("c1", result, truncate=True)
        turn.on_tool_executed("c2", "sent", truncate=True)  # a fitting result is unchanged
    window = store.load_window(app_id)
    stored = window[2]
    assert isinstance(stored, ToolResult) and stored.id == "c1" and not is_synthetic(stored)
    assert len(stored.text.encode("utf-8")) <= LIMIT
    assert "[memstore: " in stored.text
    if bad == "oversized":
        assert stored.text.endswith(f"[memstore: result truncated from {LIMIT + 1} bytes]")
    else:
        assert "\x00" not in stored.text and "\ufffd" in stored.text
    assert window[3] == ToolResult(id="c2", tool_name="send_email", text="sent")


@pytest.mark.parametrize("flag", ["true", 1])
def test_langchain4j_is_error_that_is_not_a_bool_is_rejected(
    store: MemoryStore, app_id: str, flag: object
) -> None:
    store.append(app_id, [UserMessage(text="go")])
    executed = {"type": "tool_executed", "id": "t1", "name": "rm", "arguments": "{}"}
    with count_inserts(store) as inserts, store.collector(app_id) as turn:
        with pytest.raises(StreamProtocolError, match="is_error"):
            turn.feed({**executed, "result": "permission denied", "is_error": flag})
        assert inserts.original == 0
        turn.feed({**executed, "result": "permission denied", "is_error": True})
    stored = store.load_window(app_id)[2]
    assert stored == ToolResult(id="t1", tool_name="rm", text="permission denied", is_error=True)
    assert store.history(app_id)[0].text.endswith("-> error: permission denied")


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (FileNotFoundError("no such file: rep\udcf3rt.txt\x00"), "rep\ufffdrt.txt\ufffd"),
        (_Unprintable(), "_Unprintable"),
    ],
)
def test_a_failure_whose_text_cannot_be_stored_keeps_the_streamed_text(
    store: MemoryStore, app_id: str, error: BaseException, shown: str
) -> None:
    store.append(app_id, [UserMessage(text="list files")])
    with pytest.raises(type(error)), store.collector(app_id) as turn:
        turn.on_text("Looking at the files")
        raise error
    assert store.load_window(app_id)[-1] == AiMessage(text="Looking at the files")
    row = store.history(app_id)[0]
    assert row.status == "failed" and row.text.startswith("Looking at the files\n[failed] ")
    assert shown in row.text


@pytest.mark.parametrize("purge", ["app", "user"])
def test_a_purge_during_a_turn_is_never_written_back(
    store: MemoryStore, app_id: str, purge: str
) -> None:
    """The turn's first call is flushed, then the app (or its user) is purged while the model
    still streams: the closing display row would quote the purged call's arguments, so
    nothing more of the turn is written."""
    from memstore.operations import purge_user

    if purge == "user" and not isinstance(store, MemoryStore):
        pytest.skip("purge by user is a synchronous operation")
    store.append(app_id, [UserMessage(text="write the file")], user_id="u-purged")
    with pytest.raises(UnknownToolCallError), store.collector(app_id, user_id="u-purged") as turn:
        turn.on_tool_call_delta(0, id="c1", name="write_file", arguments=ARGS_A)
        turn.on_tool_executed("c1", "written")  # flushed: the request and its result
        if purge == "app":
            store.purge(app_id)
        else:
            purge_user(store, "u-purged")
        turn.on_text("Done: a.txt now says héllo.")
    assert store.history(app_id) == []
    assert store.load_window(app_id, 50) == []
    assert store.memory(app_id).messages() == []
