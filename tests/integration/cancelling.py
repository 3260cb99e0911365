"""Cancel a coroutine at each of its await points in turn, and the checks that follow.

:func:`cancel_at` runs an operation as a task and cancels it while it is suspended at its
``step``-th await point (the ``step``-th time it gave the loop back); a sweep over ``step = 1,
2, ...`` until the operation completes before it is cancelled reaches every await point it has.
Which point a step lands on can shift between runs (a thread that answers early makes an await
return without suspending), so a sweep covers each point at least once, not in a fixed order.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from memstore.sql.engine import make_engine, sync_url


class Counted:
    """Awaits ``awaitable`` and counts the times it suspends (yields to the loop)."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable
        self.steps = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self.awaitable.__await__()
        send, value = True, None
        while True:
            try:
                yielded = inner.send(value) if send else inner.throw(value)
            except StopIteration as stop:
                return stop.value
            self.steps += 1
            try:
                value, send = (yield yielded), True
            except BaseException as error:  # cancellation included: handed to the operation
                value, send = error, False


async def cancel_at(operation: Callable[[], Awaitable[Any]], step: int) -> bool:
    """Run ``operation()`` and cancel it while it waits at its ``step``-th await point; True
    when it completed before (it was not cancelled). An error it raises is raised here."""
    counted = Counted(operation())

    async def run() -> Any:
        return await counted

    task = asyncio.ensure_future(run())
    while not task.done() and counted.steps < step:
        await asyncio.sleep(0)
    if task.done():
        task.result()
        return True
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return False
    return True  # it finished its work despite the cancellation, and said so


def writable_within(url: str, app_id: str, seconds: float = 1.0) -> bool:
    """Whether another connection can take the write locks an operation on ``app_id`` could
    have left behind, within ``seconds``: SQLite's database write lock; on PostgreSQL and
    MariaDB the rows of the app, its generation row and every lease row."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        connection = sqlite3.connect(parsed.database or "", timeout=seconds)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            connection.close()
    engine = sa.create_engine(sync_url(parsed), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            if parsed.get_backend_name() == "postgresql":
                conn.exec_driver_sql(f"SET lock_timeout = '{int(seconds * 1000)}ms'")
            else:
                wait = max(1, int(seconds))
                conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {wait}")
            try:
                for statement in (
                    "UPDATE worker_leases SET holder = holder",
                    "UPDATE chat_app_generation SET generation = generation WHERE app_id = :app",
                    "UPDATE chat_history_original SET is_deleted = is_deleted WHERE app_id = :app",
                    "UPDATE chat_history SET is_deleted = is_deleted WHERE app_id = :app",
                ):
                    conn.execute(sa.text(statement), {"app": app_id})
            except sa.exc.OperationalError:
                return False
            finally:
                conn.rollback()
        return True
    finally:
        engine.dispose()


def wait_writable(url: str, app_id: str, seconds: float = 1.0) -> float:
    """Seconds it took another connection to get the write locks; raises after ``seconds``."""
    started = time.monotonic()
    assert writable_within(url, app_id, seconds), "the database stayed locked"
    return time.monotonic() - started


def truth_engine(url: str) -> sa.Engine:
    """A plain synchronous engine on the same database, for reading what was committed."""
    return make_engine(url)
