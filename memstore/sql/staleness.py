"""Stale-window stamps on ``chat_app_generation`` (``stale_at_ms``): statements and their sync
and async runners, nothing else. The decisions are in :mod:`memstore.core.staleness`.

A stamp is the database's time (:func:`memstore.sql.leases.db_now_ms`), so no process's clock
matters. Stamping an app that has no generation row yet creates it at generation 0, which is
the generation such an app has anyway. Pending stamps are found through the
``ix_chat_app_generation_stale_at_ms`` index: a poll reads nothing when no stamp is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect, Engine

from memstore.core.staleness import StaleMark
from memstore.sql.engine import translated_errors
from memstore.sql.leases import db_now_ms
from memstore.sql.schema import app_generation

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

MAX_MARKS_PER_POLL = 10_000
"""Most stamps one poll reads (oldest first); the rest wait for the next poll."""


def stamp_statement(dialect: Dialect, app_id: str) -> Any:
    """Set the app's stamp to the database's time now (creating its row at generation 0)."""
    now = db_now_ms(dialect)
    if dialect.name in ("mysql", "mariadb"):
        stmt = mysql.insert(app_generation).values(app_id=app_id, generation=0, stale_at_ms=now)
        return stmt.on_duplicate_key_update(stale_at_ms=now)
    module: Any = postgresql if dialect.name == "postgresql" else sqlite
    stmt = module.insert(app_generation).values(app_id=app_id, generation=0, stale_at_ms=now)
    return stmt.on_conflict_do_update(
        index_elements=[app_generation.c.app_id], set_={"stale_at_ms": now}
    )


def pending_query() -> sa.Select[Any]:
    """The stamped apps, oldest stamp first."""
    t = app_generation.c
    return (
        sa.select(t.app_id, t.generation, t.stale_at_ms)
        .where(t.stale_at_ms.is_not(None))
        .order_by(t.stale_at_ms)
        .limit(MAX_MARKS_PER_POLL)
    )


def clear_statement(mark: StaleMark) -> sa.Update:
    """Clear a stamp only if neither the stamp nor the app's generation changed since it was
    read: a change made after the poll keeps its own stamp."""
    t = app_generation.c
    return (
        sa.update(app_generation)
        .where(
            t.app_id == mark.app_id,
            t.generation == mark.generation,
            t.stale_at_ms == mark.stale_at_ms,
        )
        .values(stale_at_ms=None)
    )


def _marks(rows: Iterable[Any]) -> list[StaleMark]:
    return [StaleMark(str(r[0]), int(r[1]), int(r[2])) for r in rows]


# -- sync --------------------------------------------------------------------------------------


def stamp(engine: Engine, app_ids: Iterable[str]) -> None:
    """Stamp the apps, in one transaction (in app-id order: two stampers never deadlock)."""
    with translated_errors("stamping stale windows"), engine.begin() as conn:
        for app_id in sorted(set(app_ids)):
            conn.execute(stamp_statement(conn.dialect, app_id))


def pending(engine: Engine) -> list[StaleMark]:
    """The stamps set now."""
    with translated_errors("reading stale-window stamps"), engine.connect() as conn:
        return _marks(conn.execute(pending_query()))


def clear(engine: Engine, marks: Sequence[StaleMark]) -> None:
    """Clear the marks (each only if unchanged since it was read)."""
    if not marks:
        return
    with translated_errors("clearing stale-window stamps"), engine.begin() as conn:
        for mark in sorted(marks, key=lambda m: m.app_id):
            conn.execute(clear_statement(mark))


# -- async -------------------------------------------------------------------------------------


async def astamp(engine: AsyncEngine, app_ids: Iterable[str]) -> None:
    """:func:`stamp` on an async engine."""
    with translated_errors("stamping stale windows"):
        async with engine.begin() as conn:
            for app_id in sorted(set(app_ids)):
                await conn.execute(stamp_statement(conn.dialect, app_id))


async def apending(engine: AsyncEngine) -> list[StaleMark]:
    """:func:`pending` on an async engine."""
    with translated_errors("reading stale-window stamps"):
        async with engine.connect() as conn:
            return _marks(await conn.execute(pending_query()))


async def aclear(engine: AsyncEngine, marks: Sequence[StaleMark]) -> None:
    """:func:`clear` on an async engine."""
    if not marks:
        return
    with translated_errors("clearing stale-window stamps"):
        async with engine.begin() as conn:
            for mark in sorted(marks, key=lambda m: m.app_id):
                await conn.execute(clear_statement(mark))
