"""The per-app generation counter (``chat_app_generation``): statements only.

A write raises the counter inside its own transaction, under the row's lock, so the value
before it is always the value after it minus one; an app without a row is at generation 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect

from memstore.sql.runners import Steps, arun_steps, run_steps
from memstore.sql.schema import app_generation

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True, slots=True)
class GenerationStep:
    """What one committed write did to the app's generation."""

    before: int
    after: int


def bump_statement(dialect: Dialect, app_id: str | sa.BindParameter[str]) -> Any:
    """``generation + 1``, or a new row at 1 (an upsert in each database's own syntax)."""
    raised = {"generation": app_generation.c.generation + 1}
    if dialect.name in ("mysql", "mariadb"):
        stmt = mysql.insert(app_generation).values(app_id=app_id, generation=1)
        return stmt.on_duplicate_key_update(**raised)
    module: Any = postgresql if dialect.name == "postgresql" else sqlite
    stmt = module.insert(app_generation).values(app_id=app_id, generation=1)
    return stmt.on_conflict_do_update(index_elements=[app_generation.c.app_id], set_=raised)


def generation_query(app_id: str) -> sa.Select[Any]:
    return sa.select(app_generation.c.generation).where(app_generation.c.app_id == app_id)


def returns_generation(dialect: Dialect) -> bool:
    """Whether the upsert can return the new value itself (``RETURNING``: PostgreSQL, and
    SQLite from 3.35), saving the ``SELECT`` after it."""
    return dialect.name == "postgresql" or (
        dialect.name == "sqlite" and tuple(dialect.server_version_info or ()) >= (3, 35)
    )


_BUMPS: dict[str, tuple[Any, bool]] = {}


def _prepared_bump(dialect: Dialect) -> tuple[Any, bool]:
    """The dialect's upsert with the app id bound as ``:gen_app``, built once per dialect
    (with ``RETURNING`` where it can), and whether it returns the new value."""
    cached = _BUMPS.get(dialect.name)
    if cached is None:
        statement = bump_statement(dialect, sa.bindparam("gen_app", type_=sa.String))
        returning = returns_generation(dialect)
        if returning:
            statement = statement.returning(app_generation.c.generation)
        cached = _BUMPS[dialect.name] = (statement, returning)
    return cached


def bump_steps(dialect: Dialect, app_id: str) -> Steps[GenerationStep]:
    """Raise the app's generation in the caller's transaction (statement steps:
    :mod:`memstore.sql.runners`)."""
    statement, returning = _prepared_bump(dialect)
    bumped = yield statement, {"gen_app": app_id}
    if returning:
        after = int(bumped.scalar_one())
    else:
        after = int((yield generation_query(app_id), None).scalar_one())
    return GenerationStep(after - 1, after)


def bump(conn: Connection, app_id: str) -> GenerationStep:
    """Raise the app's generation in the caller's transaction."""
    return run_steps(conn, bump_steps(conn.dialect, app_id))


async def abump(conn: AsyncConnection, app_id: str) -> GenerationStep:
    """:func:`bump` on an async connection."""
    return await arun_steps(conn, bump_steps(conn.dialect, app_id))


def read(conn: Connection, app_id: str) -> int:
    """The app's generation now (0 when it never had a write)."""
    return int(conn.execute(generation_query(app_id)).scalar() or 0)


async def aread(conn: AsyncConnection, app_id: str) -> int:
    """:func:`read` on an async connection."""
    return int((await conn.execute(generation_query(app_id))).scalar() or 0)
