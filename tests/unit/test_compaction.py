"""Property tests for compaction's pure half: the cut (``compaction_cut``), the plan
(``plan_compaction``) and windows opened by a summary (the loader, ``token_window`` and the
cache's ``eviction_count``)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memstore.core.compaction import compaction_cut, over_threshold, plan_compaction
from memstore.core.loader import RowRequest, run_steps, window_steps
from memstore.core.summary import is_summary, stored_summary, summary_info
from memstore.core.validate import validate
from memstore.core.window import (
    KIND_RESULT,
    KIND_SUMMARY,
    StoredMessage,
    entry_for,
    eviction_count,
    select_window,
    summary_prefix,
    token_window,
)
from memstore.messages import Message, UserMessage
from tests.unit.test_token_window import counters
from tests.unit.test_window_properties import histories

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Counter = Callable[[Message], int]
bounds = st.none() | st.integers(0, 60)


def _unit_starts(kinds: list[str]) -> list[int]:
    return [i for i, kind in enumerate(kinds) if i == 0 or kind != KIND_RESULT]


@PROPERTY
@given(histories(), counters(), bounds, bounds)
def test_the_cut_is_a_unit_boundary_keeps_the_newest_unit_and_is_the_largest_fit(
    rows: list[StoredMessage],
    count: Counter,
    keep_tokens: int | None,
    keep_messages: int | None,
) -> None:
    window = select_window(rows, 1000).messages
    assume(window)
    kinds = [entry_for(m).kind for m in window]
    tokens = [count(m) for m in window]
    cut = compaction_cut(kinds, tokens, keep_tokens, keep_messages)
    starts = _unit_starts(kinds)
    assert cut in starts  # never inside a tool group
    assert cut <= starts[-1]  # the newest unit always stays
    kept_tokens, kept_messages = sum(tokens[cut:]), len(kinds) - cut
    if cut < starts[-1]:  # more than the newest unit: every bound holds
        assert keep_tokens is None or kept_tokens <= keep_tokens
        assert keep_messages is None or kept_messages <= keep_messages
    if cut > 0:  # the next older unit would break a bound
        previous = max(s for s in starts if s < cut)
        assert (keep_tokens is not None and sum(tokens[previous:]) > keep_tokens) or (
            keep_messages is not None and len(kinds) - previous > keep_messages
        )


def fetcher(rows: list[StoredMessage]) -> Callable[[RowRequest], list[StoredMessage]]:
    """The SQL reads of the loader over ``rows`` (chronological, summary rows included)."""

    def fetch(request: RowRequest) -> list[StoredMessage]:
        found = [r for r in rows if is_summary(r.message)][-1:] if request.summary else []
        picked = [
            r
            for r in rows
            if not is_summary(r.message)
            and (request.before_id is None or r.id < request.before_id)
            and (request.after_id is None or r.id > request.after_id)
        ]
        return sorted(
            [*(picked[-request.limit :] if request.limit else []), *found], key=lambda r: r.id
        )

    return fetch


def load(rows: list[StoredMessage], max_messages: int | None = 1000, **kw: object) -> list[Message]:
    steps = window_steps(max_messages, start_at_user=False, summaries="system", **kw)  # type: ignore[arg-type]
    return run_steps(steps, fetcher(rows)).messages


def compact(
    rows: list[StoredMessage], count: Counter, keep_messages: int | None, text: str
) -> tuple[list[StoredMessage], list[Message] | None, list[Message]]:
    """One compaction over ``rows``: the rows after it, what the summarizer got, the kept part."""
    window = run_steps(window_steps(1000, start_at_user=False, summaries="system"), fetcher(rows))
    plan = plan_compaction(window, count, None, keep_messages)
    if plan is None:
        return rows, None, window.messages
    kept = window.messages[len(window.messages) - plan.kept_messages :]
    summary = StoredMessage(rows[-1].id + 1, stored_summary(text, plan.info))
    return [*rows, summary], plan.inputs, kept


@PROPERTY
@given(histories(), counters(), st.lists(st.integers(0, 12), min_size=1, max_size=3))
def test_windows_after_compactions_are_the_latest_summary_and_the_kept_part(
    rows: list[StoredMessage], count: Counter, keeps: list[int]
) -> None:
    assume(rows)
    raw = select_window(rows, 1000).messages
    previous_text: str | None = None
    for number, keep in enumerate(keeps):
        rows, inputs, kept = compact(rows, count, keep, f"summary {number}")
        loaded = run_steps(
            window_steps(1000, start_at_user=False, summaries="system"), fetcher(rows)
        )
        window = loaded.messages
        if inputs is None:
            continue
        if previous_text is not None:  # summaries chain
            assert is_summary(inputs[0]) and inputs[0].text == previous_text
        previous_text = f"summary {number}"
        assert is_summary(window[0]) and window[0].text == previous_text
        assert sum(is_summary(m) for m in window) == 1
        tail = window[1:]
        assert tail == [m for m in kept if m in tail] and tail[-1] == kept[-1]
        assert validate(window, "openai") == []
        # the summary adds no Anthropic violation to those of its tail (e.g. empty texts)
        tail_codes = {v.code for v in validate(tail, "anthropic")}
        assert {v.code for v in validate(window, "anthropic")} <= tail_codes
        info = summary_info(window[0])
        assert info is not None
        assert all(row_id > info.last_id for row_id in loaded.ids[1:])
        assert loaded.ids[0] == rows[-1].id  # the summary row opens the window
    # the originals are untouched: the raw window is the same
    assert select_window([r for r in rows if not is_summary(r.message)], 1000).messages == raw


@PROPERTY
@given(histories(), counters(), st.integers(1, 30), st.integers(1, 400))
def test_a_summary_counts_toward_both_bounds_in_every_window_path(
    rows: list[StoredMessage], count: Counter, max_messages: int, budget: int
) -> None:
    assume(rows)
    rows, inputs, _ = compact(rows, count, 2, "so far")
    assume(inputs is not None)
    full = load(rows)
    assert is_summary(full[0])
    bounded = load(rows, max_messages)
    assert bounded[0] == full[0] and full[len(full) - len(bounded) + 1 :] == bounded[1:]
    by_tokens = load(rows, None, max_tokens=budget, count_tokens=count)
    cached = token_window(full, budget, count).messages
    assert by_tokens == cached  # the cached window's budget matches a read from SQL
    assert is_summary(cached[0])
    # the cache's trim keeps the summary and agrees with the budget over the same entries
    kinds = [entry_for(m).kind for m in full]
    assert kinds[0] == KIND_SUMMARY and summary_prefix(kinds) == 1
    drop = eviction_count(
        kinds,
        len(full) + 5,
        start_at_user=False,
        tokens=[count(m) for m in full],
        max_tokens=budget,
    )
    assert [full[0], *full[1 + drop :]] == cached


def test_over_threshold() -> None:
    messages = [UserMessage(text="x")] * 5
    assert over_threshold(messages, lambda m: 10, 49)
    assert not over_threshold(messages, lambda m: 10, 50)
