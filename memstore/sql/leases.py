"""The ``worker_leases`` table: statements and their sync and async runners, nothing else.

Time is always the database's: every expiry is computed and compared in SQL from the
database's own clock (:func:`db_now_ms`). Each write runs in a transaction whose first
statement writes (SQLite then waits for the write lock instead of failing on a stale read
snapshot); which id to claim is decided by :mod:`memstore.core.leases` from a separate read,
and the write's own conditions (the primary key, the epoch, the expiry) make it a
compare-and-set: it changes nothing when another process got there first.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine

from memstore.core.leases import ClaimChoice, LeaseRow, choose_worker_id, soonest_expiry
from memstore.errors import IdCollisionError, WorkerIdsExhaustedError
from memstore.sql.engine import translated_errors
from memstore.sql.schema import MAX_HOLDER_CHARS, worker_leases

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

CLAIM_ATTEMPTS = 50
"""How many ids a claim tries before giving up: each failed attempt means another process
claimed the chosen id between the read and the write."""


def holder_description() -> str:
    """``hostname:pid`` of this process, as the ``holder`` column shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"[:MAX_HOLDER_CHARS]


def db_now_ms(dialect: Dialect) -> Any:
    """The database's current time in Unix milliseconds, as a SQL expression."""
    if dialect.name == "postgresql":
        sql = "CAST(EXTRACT(EPOCH FROM CLOCK_TIMESTAMP()) * 1000 AS BIGINT)"
    elif dialect.name in ("mysql", "mariadb"):
        sql = "CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(3)) * 1000 AS SIGNED)"
    else:
        sql = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
    return sa.literal_column(sql, type_=sa.BigInteger())


@dataclass(frozen=True, slots=True)
class Claimed:
    """A lease just claimed: the id, its epoch and the previous holders' newest millisecond."""

    worker_id: int
    epoch: int
    last_ms: int


def _rows_query(dialect: Dialect) -> Any:
    t = worker_leases.c
    return sa.select(
        t.worker_id, t.holder, t.epoch, t.expires_at_ms, t.last_ms, db_now_ms(dialect)
    ).order_by(t.worker_id)


def _to_rows(result: Any) -> list[LeaseRow]:
    return [
        LeaseRow(int(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in result
    ]


def _raised_last_ms(last_ms: int) -> Any:
    column = worker_leases.c.last_ms
    return sa.case((column < last_ms, sa.literal(last_ms, sa.BigInteger())), else_=column)


def _claim_statement(dialect: Dialect, choice: ClaimChoice, holder: str, ttl_ms: int) -> Any:
    now = db_now_ms(dialect)
    if choice.epoch is None:
        return sa.insert(worker_leases).values(
            worker_id=choice.worker_id,
            holder=holder,
            epoch=1,
            expires_at_ms=now + ttl_ms,
            last_ms=0,
        )
    t = worker_leases.c
    return (
        sa.update(worker_leases)
        .where(t.worker_id == choice.worker_id, t.epoch == choice.epoch, t.expires_at_ms <= now)
        .values(holder=holder, epoch=t.epoch + 1, expires_at_ms=now + ttl_ms)
    )


def _state_query(worker_id: int) -> Any:
    t = worker_leases.c
    return sa.select(t.epoch, t.last_ms).where(t.worker_id == worker_id)


def _renew_statement(
    dialect: Dialect, worker_id: int, epoch: int, ttl_ms: int, last_ms: int
) -> Any:
    t = worker_leases.c
    return (
        sa.update(worker_leases)
        .where(t.worker_id == worker_id, t.epoch == epoch)
        .values(expires_at_ms=db_now_ms(dialect) + ttl_ms, last_ms=_raised_last_ms(last_ms))
    )


def _release_statement(dialect: Dialect, worker_id: int, epoch: int, last_ms: int) -> Any:
    t = worker_leases.c
    return (
        sa.update(worker_leases)
        .where(t.worker_id == worker_id, t.epoch == epoch)
        .values(expires_at_ms=db_now_ms(dialect), last_ms=_raised_last_ms(last_ms))
    )


def _exhausted(rows: list[LeaseRow]) -> WorkerIdsExhaustedError:
    seconds = soonest_expiry(rows)
    return WorkerIdsExhaustedError(
        f"all 1024 worker ids are leased; the soonest lease expires in {seconds:.1f} s",
        soonest_expiry_seconds=seconds,
    )


def _claimed(state: Any, choice: ClaimChoice, expected_epoch: int) -> Claimed | None:
    if state is None or int(state[0]) != expected_epoch:
        return None
    return Claimed(choice.worker_id, int(state[0]), int(state[1]))


# -- sync --------------------------------------------------------------------------------------


def read_leases(engine: Engine) -> list[LeaseRow]:
    """Every lease row, with the database's time of the read."""
    with translated_errors("reading worker leases"), engine.connect() as conn:
        return _to_rows(conn.execute(_rows_query(conn.dialect)))


def _try_claim(conn: Connection, choice: ClaimChoice, holder: str, ttl_ms: int) -> Claimed | None:
    result = conn.execute(_claim_statement(conn.dialect, choice, holder, ttl_ms))
    if choice.epoch is not None and result.rowcount != 1:
        return None
    expected = 1 if choice.epoch is None else choice.epoch + 1
    return _claimed(conn.execute(_state_query(choice.worker_id)).first(), choice, expected)


def claim(engine: Engine, ttl_seconds: int, holder: str | None = None) -> Claimed:
    """Lease the lowest free worker id. Raises
    :class:`~memstore.errors.WorkerIdsExhaustedError` when all are held."""
    who = holder or holder_description()
    rows: list[LeaseRow] = []
    for _ in range(CLAIM_ATTEMPTS):
        rows = read_leases(engine)
        try:
            choice = choose_worker_id(rows)
        except LookupError:
            raise _exhausted(rows) from None
        try:
            with translated_errors("claiming a worker id"), engine.begin() as conn:
                claimed = _try_claim(conn, choice, who, ttl_seconds * 1000)
        except IdCollisionError:
            claimed = None  # another process inserted the same id first
        if claimed is not None:
            return claimed
    raise _exhausted(rows)


def renew(engine: Engine, worker_id: int, epoch: int, ttl_seconds: int, last_ms: int) -> bool:
    """Extend the lease (and record ``last_ms``); False when another process claimed it."""
    with translated_errors("renewing a worker lease"), engine.begin() as conn:
        conn.execute(_renew_statement(conn.dialect, worker_id, epoch, ttl_seconds * 1000, last_ms))
        state = conn.execute(_state_query(worker_id)).first()
    return state is not None and int(state[0]) == epoch


def release(engine: Engine, worker_id: int, epoch: int, last_ms: int) -> None:
    """End the lease now, recording ``last_ms`` for the next holder (no-op if fenced off)."""
    with translated_errors("releasing a worker lease"), engine.begin() as conn:
        conn.execute(_release_statement(conn.dialect, worker_id, epoch, last_ms))


# -- async -------------------------------------------------------------------------------------


async def aread_leases(engine: AsyncEngine) -> list[LeaseRow]:
    """:func:`read_leases` on an async engine."""
    with translated_errors("reading worker leases"):
        async with engine.connect() as conn:
            return _to_rows(await conn.execute(_rows_query(conn.dialect)))


async def _atry_claim(
    conn: AsyncConnection, choice: ClaimChoice, holder: str, ttl_ms: int
) -> Claimed | None:
    result = await conn.execute(_claim_statement(conn.dialect, choice, holder, ttl_ms))
    if choice.epoch is not None and result.rowcount != 1:
        return None
    expected = 1 if choice.epoch is None else choice.epoch + 1
    state = (await conn.execute(_state_query(choice.worker_id))).first()
    return _claimed(state, choice, expected)


async def aclaim(engine: AsyncEngine, ttl_seconds: int, holder: str | None = None) -> Claimed:
    """:func:`claim` on an async engine."""
    who = holder or holder_description()
    rows: list[LeaseRow] = []
    for _ in range(CLAIM_ATTEMPTS):
        rows = await aread_leases(engine)
        try:
            choice = choose_worker_id(rows)
        except LookupError:
            raise _exhausted(rows) from None
        try:
            with translated_errors("claiming a worker id"):
                async with engine.begin() as conn:
                    claimed = await _atry_claim(conn, choice, who, ttl_seconds * 1000)
        except IdCollisionError:
            claimed = None
        if claimed is not None:
            return claimed
    raise _exhausted(rows)


async def arenew(
    engine: AsyncEngine, worker_id: int, epoch: int, ttl_seconds: int, last_ms: int
) -> bool:
    """:func:`renew` on an async engine."""
    with translated_errors("renewing a worker lease"):
        async with engine.begin() as conn:
            await conn.execute(
                _renew_statement(conn.dialect, worker_id, epoch, ttl_seconds * 1000, last_ms)
            )
            state = (await conn.execute(_state_query(worker_id))).first()
    return state is not None and int(state[0]) == epoch


async def arelease(engine: AsyncEngine, worker_id: int, epoch: int, last_ms: int) -> None:
    """:func:`release` on an async engine. (``connect`` then ``begin`` rather than
    ``engine.begin()``, an async generator: a store released while its event loop shuts down
    runs this where the loop takes no new async generators.)"""
    with translated_errors("releasing a worker lease"):
        async with engine.connect() as conn, conn.begin():
            await conn.execute(_release_statement(conn.dialect, worker_id, epoch, last_ms))
