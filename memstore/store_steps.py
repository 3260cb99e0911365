"""The step machinery the stores' decision modules are written with (the one-source rule of
docs/contributing.md): the step and step-generator types, each runner's way of doing a step
(:func:`call`, :func:`acall`, for :func:`memstore.core.steps.drive` and
:func:`~memstore.core.steps.adrive`), the table of engine calls a step makes on either store,
and the ``with`` / ``async with`` protocol both stores and both collectors end through."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from functools import partial
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")
ScopeT = TypeVar("ScopeT", bound="Scoped")
AsyncScopeT = TypeVar("AsyncScopeT", bound="AsyncScoped")

IO = Callable[[], Any]
"""One step: an I/O call on the store's backends (its result, or an awaitable of it)."""

Steps = Generator[IO, Any, T]
"""An operation's decisions: yields steps, gets their results, returns the result."""


def call(step: IO) -> Any:
    """The synchronous runner's step."""
    return step()


async def acall(step: IO) -> Any:
    """The asynchronous runner's step (a synchronous call inside is simply returned)."""
    result = step()
    return await result if inspect.isawaitable(result) else result


class Scoped:
    """A ``with`` block whose end is :meth:`_leave` (given the block's exception, if any):
    the sync store closes, the sync collector completes or fails its turn."""

    def __enter__(self: ScopeT) -> ScopeT:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave(exc)

    def _leave(self, exc: BaseException | None) -> None:
        raise NotImplementedError


class AsyncScoped:
    """:class:`Scoped` for ``async with``: the end is the coroutine :meth:`_aleave`."""

    async def __aenter__(self: AsyncScopeT) -> AsyncScopeT:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._aleave(exc)

    async def _aleave(self, exc: BaseException | None) -> None:
        raise NotImplementedError


class EngineCalls(NamedTuple):
    """The lease and stale-window statements of one store, bound to its engine: the sync
    functions of :mod:`memstore.sql.leases` and :mod:`memstore.sql.staleness` for a
    ``MemoryStore``, their ``a``-prefixed coroutine functions for an ``AsyncMemoryStore``, so
    one step serves both (see :func:`bound_calls`)."""

    claim: Callable[..., Any]
    renew: Callable[..., Any]
    release: Callable[..., Any]
    stamp: Callable[..., Any]
    pending: Callable[..., Any]
    clear: Callable[..., Any]


def bound_calls(engine: object, *functions: Callable[..., Any]) -> EngineCalls:
    """:class:`EngineCalls` of ``functions`` (in its field order), each bound to ``engine``."""
    return EngineCalls(*(partial(function, engine) for function in functions))
