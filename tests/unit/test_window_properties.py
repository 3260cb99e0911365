"""Property tests for memstore.core.window: select_window, eviction_count, can_append_result.

Histories are random but realistic: parallel tool calls whose results arrive in any order,
late (after later user messages), twice, or never (a crash mid-tool), call ids sometimes
reused by a later turn, legacy orphan results, and arbitrary unicode text.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from memstore.core.validate import validate
from memstore.core.window import (
    KIND_REQUEST,
    KIND_RESULT,
    KIND_USER,
    StoredMessage,
    Window,
    can_append_result,
    entry_for,
    eviction_count,
    is_synthetic,
    select_window,
)
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)

PROPERTY = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

texts = st.text(max_size=12)
json_objects = st.dictionaries(
    st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=6), st.none()), max_size=3
).map(json.dumps)
# Shrinking goes towards the first entries, so the common cases come first.
ACTIONS = ["user", "ai_text", "tools", "user", "tools", "system", "flush", "orphan"]
FATES = ["now", "now", "now", "late", "missing", "dup_now", "dup_late"]


@st.composite
def histories(draw: st.DrawFn, max_steps: int = 30) -> list[StoredMessage]:
    """Chronological rows with strictly increasing ids."""
    messages: list[Message] = []
    pending: list[ToolResult] = []  # results that will be stored late
    requested: list[str] = []
    orphans = 0
    for _ in range(draw(st.integers(0, max_steps))):
        action = draw(st.sampled_from(ACTIONS))
        if action == "user":
            messages.append(UserMessage(text=draw(texts)))
        elif action == "system":
            messages.append(SystemMessage(text=draw(texts)))
        elif action == "ai_text":
            messages.append(AiMessage(text=draw(texts)))
        elif action == "orphan":
            orphans += 1
            messages.append(ToolResult(id=f"legacy_{orphans}", tool_name="old", text=draw(texts)))
        elif action == "flush":
            if pending:
                order = draw(st.permutations(pending))
                count = draw(st.integers(1, len(order)))
                messages.extend(order[:count])
                pending = list(order[count:])
        else:
            calls: list[ToolRequest] = []
            for _ in range(draw(st.integers(1, 4))):
                fresh = f"call_{len(requested)}"
                call_id = fresh
                if requested and draw(st.integers(0, 9)) == 9:  # a reused id, ~10%
                    call_id = draw(st.sampled_from(requested))
                if any(call.id == call_id for call in calls):
                    call_id = fresh
                requested.append(call_id)
                name = draw(st.sampled_from(["read", "write", "search"]))
                calls.append(ToolRequest(id=call_id, name=name, arguments=draw(json_objects)))
            text = draw(st.one_of(st.none(), texts))
            messages.append(AiMessage(text=text, tool_requests=calls))
            now: list[ToolResult] = []
            for call in calls:
                fate = draw(st.sampled_from(FATES))

                def make(call: ToolRequest = call) -> ToolResult:
                    return ToolResult(
                        id=call.id,
                        tool_name=call.name,
                        text=draw(texts),
                        is_error=draw(st.booleans()),
                    )

                if fate in ("now", "dup_now", "dup_late"):
                    now.append(make())
                if fate == "dup_now":
                    now.append(make())
                if fate in ("late", "dup_late"):
                    pending.append(make())
            messages.extend(draw(st.permutations(now)))
    store_the_rest: bool = bool(pending) and draw(st.booleans())
    if store_the_rest:
        messages.extend(draw(st.permutations(pending)))
    first = draw(st.integers(1, 10**12))
    gaps = draw(st.lists(st.integers(1, 10**6), min_size=len(messages), max_size=len(messages)))
    rows: list[StoredMessage] = []
    row_id = first
    for message, gap in zip(messages, gaps, strict=True):
        rows.append(StoredMessage(row_id, message))
        row_id += gap
    return rows


def _non_results(messages: list[Message]) -> list[Message]:
    return [m for m in messages if not isinstance(m, ToolResult)]


def _same(left: list[Message], right: list[Message]) -> bool:
    return len(left) == len(right) and all(a is b for a, b in zip(left, right, strict=True))


def check_window(rows: list[StoredMessage], window: Window, max_messages: int, start: bool) -> None:
    """Everything a window must satisfy, whatever the rows hold (``history_complete=True``)."""
    messages = window.messages
    history = [row.message for row in rows]
    assert not window.needs_older_rows

    # Sendable as is.
    assert validate(messages, "openai") == []
    if start and messages:
        problems = validate(messages, "anthropic")
        # Blank texts are the caller's data, not the window's doing.
        assert [v for v in problems if v.code != "empty_content"] == []
    assert not messages or not isinstance(messages[0], ToolResult)

    # Input messages only, and the non-result ones form a suffix of the history's.
    stored = {id(message) for message in history}
    assert all(is_synthetic(m) or id(m) in stored for m in messages)
    history_plain = _non_results(history)
    window_plain = _non_results(messages)
    assert _same(window_plain, history_plain[len(history_plain) - len(window_plain) :])

    # The newest non-result message is always kept (start_at_user may empty the window).
    if history_plain:
        newest = history_plain[-1]
        if not start or isinstance(newest, UserMessage):
            assert window_plain and window_plain[-1] is newest
        else:
            assert not messages or window_plain[-1] is newest
    if start and messages:
        assert isinstance(window_plain[0], UserMessage)

    # Size: at most max_messages, plus the rest of the oldest group when it was widened.
    oldest = messages[0] if messages else None
    widen = len(oldest.tool_requests) if isinstance(oldest, AiMessage) else 0
    assert len(messages) <= max_messages + widen

    # Each result in the window is the first stored result of its request after it, or a
    # synthetic error when none was stored; orphans and repeats never appear.
    row_of = {id(row.message): position for position, row in enumerate(rows)}
    synthetic: list[str] = []
    for position, message in enumerate(messages):
        if not isinstance(message, AiMessage) or not message.tool_requests:
            continue
        count = len(message.tool_requests)
        run = messages[position + 1 : position + 1 + count]
        by_id = {result.id: result for result in run if isinstance(result, ToolResult)}
        after = history[row_of[id(message)] + 1 :]
        for call in message.tool_requests:
            # A later request reusing the id would make the window ambiguous.
            assert not any(
                isinstance(m, AiMessage) and call.id in {c.id for c in m.tool_requests}
                for m in after
            )
            results = [m for m in after if isinstance(m, ToolResult) and m.id == call.id]
            answer = by_id[call.id]
            if results:
                assert answer is results[0]
            else:
                assert is_synthetic(answer)
                assert answer.is_error
                assert answer.tool_name == call.name
                synthetic.append(call.id)
    assert window.synthetic_call_ids == synthetic
    assert window.stats.interrupted_answered == len(synthetic)

    # A short window (without start_at_user) holds the whole history, or stops before a
    # group that reuses a call id of the window.
    if not start and len(messages) < max_messages and len(window_plain) < len(history_plain):
        before = history_plain[len(history_plain) - len(window_plain) - 1]
        assert isinstance(before, AiMessage)
        window_ids = {
            call.id for m in window_plain if isinstance(m, AiMessage) for call in m.tool_requests
        }
        assert window_ids & {call.id for call in before.tool_requests}


# --- select_window ---------------------------------------------------------------------------


@PROPERTY
@given(histories(), st.integers(1, 40), st.booleans())
def test_window_is_valid_and_faithful(
    rows: list[StoredMessage], max_messages: int, start: bool
) -> None:
    window = select_window(rows, max_messages, start_at_user=start)
    check_window(rows, window, max_messages, start)


@PROPERTY
@given(histories(), st.integers(1, 40))
def test_start_at_user_only_trims_the_front(rows: list[StoredMessage], max_messages: int) -> None:
    plain = select_window(rows, max_messages).messages
    trimmed = select_window(rows, max_messages, start_at_user=True).messages
    first_user = next((i for i, m in enumerate(plain) if isinstance(m, UserMessage)), len(plain))
    assert trimmed == plain[first_user:]


@PROPERTY
@given(histories(), st.integers(1, 40), st.booleans(), st.data())
def test_look_ahead_gives_the_same_window_or_asks_for_older_rows(
    rows: list[StoredMessage], max_messages: int, start: bool, data: st.DataObject
) -> None:
    assume(rows)
    newest = data.draw(st.integers(1, len(rows)), label="newest rows given")
    full = select_window(rows, max_messages, start_at_user=start)
    partial = select_window(
        rows[-newest:], max_messages, start_at_user=start, history_complete=False
    )
    if partial.needs_older_rows:
        retry = select_window(rows, max_messages, start_at_user=start, history_complete=True)
        check_window(rows, retry, max_messages, start)
    else:
        assert partial.messages == full.messages
        assert partial.synthetic_call_ids == full.synthetic_call_ids


@PROPERTY
@given(histories(), st.integers(1, 40), st.booleans())
def test_loader_loop_converges_to_the_full_window(
    rows: list[StoredMessage], max_messages: int, start: bool
) -> None:
    """The loader's protocol: newest rows with look-ahead, doubling while older rows are needed."""
    full = select_window(rows, max_messages, start_at_user=start)
    take = max_messages + 5
    while True:
        given_rows = rows[-take:]
        complete = len(given_rows) == len(rows)
        window = select_window(
            given_rows, max_messages, start_at_user=start, history_complete=complete
        )
        if not window.needs_older_rows:
            break
        assert not complete
        take *= 2
    assert window.messages == full.messages


def test_look_ahead_does_not_ask_for_older_rows_when_the_window_is_full() -> None:
    rows = [
        StoredMessage(1, UserMessage(text="old")),
        StoredMessage(2, UserMessage(text="a")),
        StoredMessage(3, AiMessage(text="b")),
    ]
    window = select_window(rows[1:], 2, history_complete=False)
    assert not window.needs_older_rows
    assert window.messages == [rows[1].message, rows[2].message]


def test_look_ahead_asks_for_older_rows_for_a_result_of_an_older_request() -> None:
    request = AiMessage(text=None, tool_requests=[ToolRequest(id="c", name="t", arguments="{}")])
    rows = [
        StoredMessage(1, request),
        StoredMessage(2, UserMessage(text="meanwhile")),
        StoredMessage(3, ToolResult(id="c", tool_name="t", text="late")),
    ]
    window = select_window(rows[1:], 1, history_complete=False)
    assert window.needs_older_rows


def test_look_ahead_asks_for_older_rows_when_rows_run_out() -> None:
    request = AiMessage(text=None, tool_requests=[ToolRequest(id="c", name="t", arguments="{}")])
    answer = ToolResult(id="c", tool_name="t", text="ok")
    rows = [
        StoredMessage(1, UserMessage(text="first")),
        StoredMessage(2, request),
        StoredMessage(3, answer),
        StoredMessage(4, answer.model_copy(update={"text": "repeated"})),
    ]
    # Three rows but only two messages: a duplicate result takes a row and gives nothing.
    partial = select_window(rows[1:], 3, history_complete=False)
    assert partial.needs_older_rows
    full = select_window(rows, 3)
    assert full.messages == [rows[0].message, request, answer]


def test_window_starts_after_a_group_whose_call_id_is_reused() -> None:
    def turn(text: str) -> list[Message]:
        return [
            UserMessage(text=text),
            AiMessage(
                text=None, tool_requests=[ToolRequest(id="call_0", name="t", arguments="{}")]
            ),
            ToolResult(id="call_0", tool_name="t", text=text),
        ]

    history = turn("one") + turn("two")
    rows = [StoredMessage(i + 1, m) for i, m in enumerate(history)]
    window = select_window(rows, 10)
    assert window.messages == history[3:]
    assert validate(window.messages, "anthropic") == []


# --- eviction_count --------------------------------------------------------------------------


def _kinds(messages: list[Message]) -> list[str]:
    return [entry_for(message).kind for message in messages]


def check_eviction(kinds: list[str], max_messages: int, start: bool) -> int:
    """Check the rule on a cached window's kinds (valid windows never start with a result)."""
    drop = eviction_count(kinds, max_messages, start_at_user=start)
    plain = eviction_count(kinds, max_messages, start_at_user=False)
    excess = max(0, len(kinds) - max_messages)
    assert 0 <= plain <= drop <= len(kinds)
    rest = kinds[drop:]
    assert not rest or rest[0] != KIND_RESULT
    # Without start_at_user: the newest max_messages entries, plus the start of the group the
    # limit falls in (kept whole); nothing more, nothing less.
    assert plain <= excess
    assert all(kind == KIND_RESULT for kind in kinds[plain + 1 : excess + 1])
    assert excess == 0 or plain == excess or kinds[excess] == KIND_RESULT
    if all(kind != KIND_RESULT for kind in kinds[excess : excess + 1]):
        assert len(kinds) - plain <= max_messages
    # With start_at_user: then on to the first user message, or empty.
    if start:
        assert not rest or rest[0] == KIND_USER
        assert KIND_USER not in kinds[plain:drop]
    else:
        assert drop == plain
    return drop


valid_kinds = st.lists(st.sampled_from("USART"), max_size=60).filter(
    lambda kinds: not kinds or kinds[0] != KIND_RESULT
)


@PROPERTY
@given(valid_kinds, st.integers(1, 40), st.booleans())
def test_eviction_on_any_kinds(kinds: list[str], max_messages: int, start: bool) -> None:
    check_eviction(kinds, max_messages, start)


@PROPERTY
@given(histories(), st.integers(1, 40), st.booleans())
def test_eviction_matches_a_rebuild_from_sql(
    rows: list[StoredMessage], max_messages: int, start: bool
) -> None:
    cached = select_window(rows, 10**6).messages  # a cache window that grew past its limit
    drop = check_eviction(_kinds(cached), max_messages, start)
    assert validate(cached[drop:], "openai") == []
    assert cached[drop:] == select_window(rows, max_messages, start_at_user=start).messages


# --- can_append_result -----------------------------------------------------------------------


def _entries(messages: list[Message]) -> list[tuple[str, tuple[str, ...]]]:
    return [(entry.kind, entry.call_ids) for entry in map(entry_for, messages)]


def _expected_decision(messages: list[Message], call_id: str) -> str:
    tail = len(messages)
    while tail and isinstance(messages[tail - 1], ToolResult):
        tail -= 1
    if any(isinstance(m, ToolResult) and m.id == call_id for m in messages[tail:]):
        return "skip"
    opener = messages[tail - 1] if tail else None
    if isinstance(opener, AiMessage) and call_id in {c.id for c in opener.tool_requests}:
        return "append"
    return "invalidate"


@PROPERTY
@given(histories(), st.data())
def test_can_append_result_keeps_an_open_group_valid(
    rows: list[StoredMessage], data: st.DataObject
) -> None:
    cached = list(select_window(rows, 1000).messages)
    # Open the last group: drop some of its trailing results, as if they were still running.
    missing: list[ToolResult] = []
    tail = len(cached)
    while tail and isinstance(cached[tail - 1], ToolResult):
        tail -= 1
    if tail < len(cached):
        run = cached[tail:]
        keep = data.draw(st.integers(0, len(run)), label="results already in")
        cached, missing = (
            cached[: tail + keep],
            [r for r in run[keep:] if isinstance(r, ToolResult)],
        )

    known = sorted({i for m in cached for i in entry_for(m).call_ids} | {"call_new"})
    for call_id in known:
        assert can_append_result(_entries(cached), call_id) == _expected_decision(cached, call_id)

    # Results for the open group arrive in any order, some twice: appends keep it valid.
    arrivals = data.draw(st.permutations(missing), label="arrival order")
    for result in arrivals:
        assert can_append_result(_entries(cached), result.id) == "append"
        cached.append(result)
        if data.draw(st.booleans(), label="repeat"):
            assert can_append_result(_entries(cached), result.id) == "skip"
    assert validate(cached, "openai") == []


@example(
    entries=[(KIND_USER, ()), (KIND_REQUEST, ("a", "b")), (KIND_RESULT, ("b",))],
    call_id="a",
).via("open group")
@PROPERTY
@given(
    st.lists(
        st.tuples(
            st.sampled_from("USART"), st.lists(st.sampled_from("abc"), min_size=1, max_size=3)
        ).map(lambda kind_ids: (kind_ids[0], tuple(kind_ids[1]) if kind_ids[0] in "RT" else ())),
        max_size=8,
    ),
    st.sampled_from("abcd"),
)
def test_can_append_result_decision(
    entries: list[tuple[str, tuple[str, ...]]], call_id: str
) -> None:
    entries = [(k, ids[:1]) if k == KIND_RESULT else (k, ids) for k, ids in entries]
    decision = can_append_result(entries, call_id)
    tail = len(entries)
    while tail and entries[tail - 1][0] == KIND_RESULT:
        tail -= 1
    answered = {ids[0] for _, ids in entries[tail:]}
    if call_id in answered:
        assert decision == "skip"
    elif tail and entries[tail - 1][0] == KIND_REQUEST and call_id in entries[tail - 1][1]:
        assert decision == "append"
    else:
        assert decision == "invalidate"
