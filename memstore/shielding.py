"""Finish what was started: an awaited write that its caller's cancellation cannot split.

A write cancelled between its commit and its cache update leaves the cached window behind
SQL; a collector whose flush is cancelled after the commit would write the batch again.
:func:`finish` runs the write to its end, then lets the cancellation through::

    ids = await finish(store_write())   # a cancelled caller waits for the write, then is cancelled
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def finish(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile, then re-raise
    the cancellation (the result is lost to the caller, the work is done). An error of the
    awaitable is raised as usual. When the event loop itself ends meanwhile, the inner task is
    cancelled too and the outcome is unknown."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError as error:
            if task.done():
                raise
            cancelled = cancelled or error
    if cancelled is not None:
        raise cancelled
    return result
