"""The sans-I/O drivers: a step's result is sent back, its exception thrown in (the generator
may handle it or not), and the sync and async drivers behave alike, cancellation included."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from memstore.core.steps import adrive, drive


def steps(log: list[str]) -> Generator[str, Any, str]:
    first = yield "read"
    try:
        yield "fail"
    except KeyError:
        log.append("handled")
    try:
        yield "cancel"
    except BaseException as error:
        log.append(f"cleanup after {type(error).__name__}")
        yield "record"
        raise
    return f"done with {first}"


def do(step: str) -> Any:
    if step == "fail":
        raise KeyError(step)
    if step == "cancel":
        raise asyncio.CancelledError
    return step.upper()


async def ado(step: str) -> Any:
    await asyncio.sleep(0)
    return do(step)


def test_results_go_back_and_exceptions_are_thrown_in() -> None:
    log: list[str] = []
    with pytest.raises(asyncio.CancelledError):
        drive(steps(log), do)
    assert log == ["handled", "cleanup after CancelledError"]


def test_the_async_driver_behaves_alike() -> None:
    log: list[str] = []
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(adrive(steps(log), ado))
    assert log == ["handled", "cleanup after CancelledError"]


def test_the_return_value_is_the_result() -> None:
    def short() -> Generator[str, Any, str]:
        value = yield "read"
        return f"got {value}"

    assert drive(short(), do) == "got READ"
    assert asyncio.run(adrive(short(), ado)) == "got READ"


def test_an_unhandled_step_failure_propagates_with_its_type() -> None:
    def unguarded() -> Generator[str, Any, None]:
        yield "fail"

    with pytest.raises(KeyError):
        drive(unguarded(), do)
    with pytest.raises(KeyError):
        asyncio.run(adrive(unguarded(), ado))
