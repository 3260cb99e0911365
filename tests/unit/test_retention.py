"""The prune decision (pure): prefixes that never split a tool group, in clean batches."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.core.retention import PruneRow, RetentionRule, plan_prune
from memstore.core.window import (
    KIND_AI,
    KIND_REQUEST,
    KIND_RESULT,
    KIND_USER,
    requests_of_results,
)
from memstore.errors import InvalidRetentionError

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@st.composite
def row_lists(draw: st.DrawFn) -> list[PruneRow]:
    """Chronological rows: plain messages, tool groups, late and missing results."""
    rows: list[PruneRow] = []
    open_calls: list[str] = []
    age = draw(st.integers(min_value=0, max_value=100))
    for n in range(draw(st.integers(min_value=0, max_value=40))):
        age = max(0, age - draw(st.integers(min_value=0, max_value=5)))
        when = NOW - timedelta(days=age)
        choice = draw(st.sampled_from(["user", "ai", "request", "result", "result"]))
        if choice == "request":
            calls = tuple(f"c{n}-{i}" for i in range(draw(st.integers(1, 3))))
            open_calls.extend(calls)
            rows.append(PruneRow(n, KIND_REQUEST, calls, when))
        elif choice == "result" and open_calls:
            call = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            rows.append(PruneRow(n, KIND_RESULT, (call,), when))
        else:
            rows.append(PruneRow(n, KIND_USER if choice == "user" else KIND_AI, (), when))
    return rows


def split_groups(rows: list[PruneRow], drop: int) -> bool:
    binds = requests_of_results([(r.kind, r.call_ids) for r in rows])
    return any(b is not None and b < drop <= i for i, b in enumerate(binds))


@given(rows=row_lists(), older=st.integers(0, 120), keep=st.one_of(st.none(), st.integers(1, 30)))
def test_a_prune_never_splits_a_group_and_batches_end_cleanly(
    rows: list[PruneRow], older: int, keep: int | None
) -> None:
    rule = RetentionRule(timedelta(days=older), keep)
    plan = plan_prune(rows, rule, NOW, batch_rows=3)
    assert not split_groups(rows, plan.drop)
    kept = rows[plan.drop :]
    if plan.drop and kept:
        assert kept[0].kind != KIND_RESULT
    # every batch boundary is itself a clean cut, so an interrupted prune leaves valid rows
    end = 0
    for batch in plan.batches:
        assert rows[end].id == batch.first_id
        end += batch.rows
        assert rows[end - 1].id == batch.last_id
        assert not split_groups(rows, end)
    assert end == plan.drop
    # nothing younger than the cutoff goes unless its group was older
    cutoff = NOW - timedelta(days=older)
    plain = [r for r in rows[: plan.drop] if r.created_at >= cutoff]
    if keep is None:
        assert all(r.kind == KIND_RESULT for r in plain)


@given(rows=row_lists(), keep=st.integers(1, 30))
def test_keep_last_keeps_at_least_n_and_is_exact_without_tools(
    rows: list[PruneRow], keep: int
) -> None:
    plan = plan_prune(rows, RetentionRule(keep_last=keep), NOW)
    assert len(rows) - plan.drop >= min(keep, len(rows))
    plain = [r for r in rows if r.kind in (KIND_USER, KIND_AI)]
    assert plan_prune(plain, RetentionRule(keep_last=keep), NOW).drop == max(0, len(plain) - keep)


def test_a_late_result_keeps_its_request() -> None:
    at = NOW - timedelta(days=200)
    rows = [
        PruneRow(1, KIND_USER, (), at),
        PruneRow(2, KIND_REQUEST, ("x",), at),
        PruneRow(3, KIND_USER, (), at),
        PruneRow(4, KIND_USER, (), at),
        PruneRow(5, KIND_RESULT, ("x",), NOW),
    ]
    assert plan_prune(rows, RetentionRule(keep_last=2), NOW).drop == 1
    assert plan_prune(rows, RetentionRule(timedelta(days=90)), NOW).drop == 1


def test_an_orphan_at_the_head_goes_with_the_prefix() -> None:
    at = NOW - timedelta(days=200)
    rows = [
        PruneRow(1, KIND_USER, (), at),
        PruneRow(2, KIND_RESULT, ("gone",), NOW),
        PruneRow(3, KIND_USER, (), NOW),
    ]
    plan = plan_prune(rows, RetentionRule(timedelta(days=90)), NOW)
    assert (plan.drop, plan.first_kept_id) == (2, 3)
    assert plan_prune(rows, RetentionRule(timedelta(days=300)), NOW).drop == 0


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"older_than": timedelta(seconds=-1)}, {"keep_last": 0}, {"keep_last": True}],
)
def test_bad_rules_are_typed_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidRetentionError):
        RetentionRule(**kwargs)  # type: ignore[arg-type]
