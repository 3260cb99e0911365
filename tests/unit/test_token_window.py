"""Property tests for token-bounded windows (select_window with a budget, the loader's reads,
the budget over a cached window, the oversize policy) and the token counters."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memstore.core.loader import RowRequest, window_steps
from memstore.core.tokens import (
    TRUNCATED_MARK,
    approximate_tokens,
    checked_counter,
    encoding_counter,
    message_texts,
    oversize_policy,
    truncate_results,
)
from memstore.core.validate import validate
from memstore.core.window import (
    StoredMessage,
    Window,
    entry_for,
    eviction_count,
    select_window,
    token_window,
)
from memstore.errors import InvalidInputError
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from tests.unit.test_window_properties import histories

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Counter = Callable[[Message], int]


@st.composite
def counters(draw: st.DrawFn) -> Counter:
    """A deterministic counter over a message's content, with random weights (zero allowed)."""
    per_byte = draw(st.integers(0, 12))
    overhead = draw(st.integers(0, 6))

    def count(message: Message) -> int:
        return per_byte * sum(len(t.encode()) for t in message_texts(message)) + overhead

    return count


def _units(messages: list[Message]) -> list[list[Message]]:
    """Split an edge-checked window into its units (a request's results follow it)."""
    units: list[list[Message]] = []
    for message in messages:
        if isinstance(message, ToolResult) and units:
            units[-1].append(message)
        else:
            units.append([message])
    return units


def _tokens(messages: list[Message], count: Counter) -> int:
    return sum(count(m) for m in messages)


def check_token_window(
    rows: list[StoredMessage],
    window: Window,
    max_messages: int,
    budget: int,
    count: Counter,
    start: bool,
) -> None:
    messages = window.messages
    assert validate(messages, "openai") == []
    if start and messages:
        problems = validate(messages, "anthropic")
        assert [v for v in problems if v.code != "empty_content"] == []
    assert not messages or not isinstance(messages[0], ToolResult)
    assert window.stats.tokens == _tokens(messages, count)

    # The same units as the message-bounded window, cut earlier: a suffix of it.
    unbudgeted = select_window(rows, max_messages).messages
    plain = select_window(rows, max_messages, max_tokens=budget, count_tokens=count)
    assert plain.messages == unbudgeted[len(unbudgeted) - len(plain.messages) :]
    if start:
        first_user = next(
            (i for i, m in enumerate(plain.messages) if isinstance(m, UserMessage)),
            len(plain.messages),
        )
        assert messages == plain.messages[first_user:]
    else:
        assert messages == plain.messages

    # It fits, unless its only unit alone does not.
    units = _units(plain.messages)
    used = _tokens(plain.messages, count)
    if plain.stats.oversize:
        assert len(units) == 1 and used > budget
    else:
        assert used <= budget
    # It is the largest such suffix: the next older unit would not fit.
    if len(plain.messages) < len(unbudgeted):
        older = _units(unbudgeted[: len(unbudgeted) - len(plain.messages)])[-1]
        assert used + _tokens(older, count) > budget


@PROPERTY
@given(histories(), st.integers(1, 60), st.integers(1, 400), counters(), st.booleans())
def test_token_window_is_valid_fits_and_is_the_largest_suffix(
    rows: list[StoredMessage], max_messages: int, budget: int, count: Counter, start: bool
) -> None:
    window = select_window(
        rows, max_messages, start_at_user=start, max_tokens=budget, count_tokens=count
    )
    assert not window.needs_older_rows
    check_token_window(rows, window, max_messages, budget, count, start)


def _fetch(rows: list[StoredMessage], request: RowRequest) -> list[StoredMessage]:
    older = [r for r in rows if request.before_id is None or r.id < request.before_id]
    return older[-request.limit :] if request.limit else []


def _run(steps: object, rows: list[StoredMessage]) -> tuple[Window, int]:
    reads = 0
    try:
        request = next(steps)  # type: ignore[call-overload]
        while True:
            reads += 1
            assert request.limit >= 1
            request = steps.send(_fetch(rows, request))  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value, reads


@PROPERTY
@given(
    histories(max_steps=60),
    st.one_of(st.none(), st.integers(1, 60)),
    st.integers(1, 400),
    counters(),
    st.booleans(),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_loader_reads_bounded_pages_until_the_budget_is_full(
    rows: list[StoredMessage],
    max_messages: int | None,
    budget: int,
    count: Counter,
    start: bool,
    lookahead: int,
    widen: int,
) -> None:
    """Tiny pages force every path (more pages, the last widening read); the window equals
    the one chosen over the whole history."""
    steps = window_steps(
        max_messages,
        start_at_user=start,
        max_tokens=budget,
        count_tokens=count,
        lookahead=lookahead,
        widen_limit=widen,
    )
    window, _ = _run(steps, rows)
    limit = max_messages or 100_000
    full = select_window(rows, limit, start_at_user=start, max_tokens=budget, count_tokens=count)
    if window.messages != full.messages:
        # Only the bounded last read may miss a request older than it (as without a budget).
        assert max_messages is not None
        assert len(rows) > max_messages + lookahead + widen
    else:
        assert window.stats.tokens == full.stats.tokens


def test_large_messages_need_one_read() -> None:
    rows = [StoredMessage(i + 1, UserMessage(text="x" * 300)) for i in range(500)]
    window, reads = _run(
        window_steps(None, start_at_user=False, max_tokens=2000, count_tokens=approximate_tokens),
        rows,
    )
    assert reads == 1
    assert len(window.messages) == 2000 // approximate_tokens(rows[0].message)


def test_small_messages_read_more_bounded_pages() -> None:
    rows = [StoredMessage(i + 1, UserMessage(text="x")) for i in range(5000)]
    steps = window_steps(None, start_at_user=False, max_tokens=4000, count_tokens=lambda m: 1)
    window, reads = _run(steps, rows)
    assert len(window.messages) == 4000
    assert 1 < reads <= 4


@PROPERTY
@given(histories(), st.integers(1, 60), st.integers(1, 400), counters(), st.booleans())
def test_budget_over_a_cached_window_equals_the_budgeted_rebuild(
    rows: list[StoredMessage], max_messages: int, budget: int, count: Counter, start: bool
) -> None:
    cached = select_window(rows, max_messages, start_at_user=start).messages
    rebuilt = select_window(
        rows, max_messages, start_at_user=start, max_tokens=budget, count_tokens=count
    )
    assume(cached)
    served = token_window(cached, budget, count, start_at_user=start)
    assert served.messages == rebuilt.messages


# --- oversize ---------------------------------------------------------------------------------


def _big_group(sizes: list[int]) -> list[Message]:
    calls = [ToolRequest(id=f"c{i}", name="read", arguments="{}") for i in range(len(sizes))]
    results: list[Message] = [
        ToolResult(id=f"c{i}", tool_name="read", text="r" * size) for i, size in enumerate(sizes)
    ]
    return [AiMessage(tool_requests=calls), *results]


@PROPERTY
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=5), st.integers(1, 2000))
def test_truncate_results_cuts_the_largest_results_and_never_removes_one(
    sizes: list[int], budget: int
) -> None:
    group = _big_group(sizes)
    cut, how_many = truncate_results(group, budget, approximate_tokens)
    assert validate(cut, "openai") == []
    assert [type(m) for m in cut] == [type(m) for m in group]
    assert [m.id for m in cut[1:]] == [m.id for m in group[1:]]  # type: ignore[union-attr]
    changed = [m for m in cut if m.metadata.get(TRUNCATED_MARK) is not None]
    assert len(changed) == how_many
    for message in changed:
        assert isinstance(message, ToolResult)
        assert "[memstore: truncated to fit the token budget" in message.text
    minimum = _tokens(truncate_results(group, 0, approximate_tokens)[0], approximate_tokens)
    total = _tokens(cut, approximate_tokens)
    assert total <= budget or total == minimum
    if _tokens(group, approximate_tokens) <= budget:
        assert cut == group and how_many == 0


def test_oversize_policy_is_checked() -> None:
    assert oversize_policy("keep") == "keep"
    assert oversize_policy("truncate-results") == "truncate-results"
    with pytest.raises(InvalidInputError):
        oversize_policy("drop")


# --- counters ---------------------------------------------------------------------------------


def test_the_default_counter_counts_bytes_per_three_plus_overheads() -> None:
    assert approximate_tokens(UserMessage(text="")) == 4
    assert approximate_tokens(UserMessage(text="abcdef")) == 6
    assert approximate_tokens(UserMessage(text="日本")) == 6  # 6 UTF-8 bytes
    call = ToolRequest(id="c1", name="abc", arguments="{}")  # 5 bytes -> 2
    assert approximate_tokens(AiMessage(tool_requests=[call])) == 2 + 4 + 8
    result = ToolResult(id="c1", tool_name="abc", text="x" * 9, metadata={"big": "y" * 999})
    assert approximate_tokens(result) == 4 + 4  # metadata is not sent to a model


class WordEncoding:
    """Looks like a tokenizer: one token per whitespace-separated word."""

    def encode(self, text: str) -> list[str]:
        return text.split()


class SpecialAwareEncoding:
    """Looks like tiktoken: rejects special tokens unless told otherwise."""

    def encode(self, text: str, *, disallowed_special: object = "all") -> list[int]:
        if disallowed_special == "all" and "<|endoftext|>" in text:
            raise ValueError("special token")
        return list(range(len(text)))


def test_encoding_counter_uses_the_given_tokenizer() -> None:
    count = encoding_counter(WordEncoding())
    assert count(UserMessage(text="one two three")) == 3 + 4
    call = ToolRequest(id="c1", name="search", arguments='{"q": "x"}')
    assert count(AiMessage(text="ok", tool_requests=[call])) == 1 + 1 + 2 + 4 + 8
    special = encoding_counter(SpecialAwareEncoding(), message_overhead=0)
    assert special(UserMessage(text="<|endoftext|>")) == 13


def test_encoding_counter_rejects_a_non_tokenizer() -> None:
    with pytest.raises(InvalidInputError):
        encoding_counter(object())


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None])
def test_a_counter_returning_garbage_is_an_input_error(bad: object) -> None:
    count = checked_counter(lambda message: bad)  # type: ignore[arg-type, return-value]
    with pytest.raises(InvalidInputError):
        count(UserMessage(text="hi"))


# --- the cache's append trim by tokens ----------------------------------------------------------


@PROPERTY
@given(histories(), st.integers(1, 60), st.integers(1, 400), counters(), st.booleans())
def test_token_eviction_matches_a_budgeted_rebuild_from_sql(
    rows: list[StoredMessage], max_messages: int, budget: int, count: Counter, start: bool
) -> None:
    cached = select_window(rows, 10**6).messages  # a cache window that grew past its limits
    kinds = [entry_for(m).kind for m in cached]
    drop = eviction_count(
        kinds,
        max_messages,
        start_at_user=start,
        tokens=[count(m) for m in cached],
        max_tokens=budget,
    )
    rebuilt = select_window(
        rows, max_messages, start_at_user=start, max_tokens=budget, count_tokens=count
    )
    assert cached[drop:] == rebuilt.messages
