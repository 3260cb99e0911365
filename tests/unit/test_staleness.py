"""The pure staleness decisions: poll schedule and which stamps a poll may clear."""

from __future__ import annotations

import math

import pytest

from memstore.core.staleness import PollSchedule, StaleMark, marks_to_clear, poll_interval


def test_poll_interval_is_half_the_bound_and_zero_turns_it_off() -> None:
    assert poll_interval(5) == 2.5
    assert poll_interval(0.2) == pytest.approx(0.1)
    assert poll_interval(0) == math.inf


def test_first_read_polls_then_once_per_interval() -> None:
    schedule = PollSchedule(4)
    assert schedule.enabled
    assert schedule.due(100.0)
    schedule.started(100.0)
    assert not schedule.due(101.9)
    assert schedule.due(102.0)
    schedule.started(102.5)
    assert not schedule.due(104.4)
    assert schedule.due(104.5)


def test_off_never_polls() -> None:
    schedule = PollSchedule(0)
    assert not schedule.enabled
    assert not schedule.due(0.0)
    assert not schedule.due(1e12)


def test_only_dropped_windows_are_cleared() -> None:
    marks = [StaleMark("a", 3, 10), StaleMark("b", 1, 11), StaleMark("c", 7, 12)]
    assert marks_to_clear(marks, ["b"]) == [marks[0], marks[2]]
    assert marks_to_clear(marks, []) == marks
    assert marks_to_clear(marks, ["a", "b", "c", "a"]) == []
