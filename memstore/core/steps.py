"""Drivers for sans-I/O steps: one source for each sync/async pair.

An operation whose sync and async forms would differ only by ``await`` is written once, as a
generator that decides and yields the I/O it needs (a step); a driver does each step and sends
its result back, or throws its exception in, so the generator's ``try``/``except`` see I/O
failures exactly as straight-line code would. :func:`drive` runs the steps with a synchronous
``do``, :func:`adrive` with an asynchronous one; the generator's return value is the result.

>>> def steps():
...     total = yield "two"
...     try:
...         yield "boom"
...     except KeyError:
...         total += 1
...     return total
>>> def do(step):
...     if step == "boom":
...         raise KeyError(step)
...     return 2
>>> drive(steps(), do)
3
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

S = TypeVar("S")
R = TypeVar("R")


def _advance(
    steps: Generator[S, Any, R], outcome: Any, failure: BaseException | None
) -> tuple[bool, Any]:
    """Hand the last step's outcome (or failure) to the generator: ``(True, result)`` when it
    returned, else ``(False, next step)``."""
    try:
        return False, steps.send(outcome) if failure is None else steps.throw(failure)
    except StopIteration as done:
        return True, done.value


def drive(steps: Generator[S, Any, R], do: Callable[[S], Any]) -> R:
    """Run ``steps`` to the end, doing each step with ``do``."""
    outcome: Any = None
    failure: BaseException | None = None
    while True:
        finished, value = _advance(steps, outcome, failure)
        if finished:
            return value  # type: ignore[no-any-return]
        try:
            outcome, failure = do(value), None
        except BaseException as error:  # handed to the generator, which decides
            outcome, failure = None, error


async def adrive(steps: Generator[S, Any, R], do: Callable[[S], Awaitable[Any]]) -> R:
    """:func:`drive` with an asynchronous ``do`` (a cancellation is thrown in like any
    other exception; a generator that catches it must re-raise it)."""
    outcome: Any = None
    failure: BaseException | None = None
    while True:
        finished, value = _advance(steps, outcome, failure)
        if finished:
            return value  # type: ignore[no-any-return]
        try:
            outcome, failure = await do(value), None
        except BaseException as error:
            outcome, failure = None, error
