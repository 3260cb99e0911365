"""The database half of a health check: one connection, ``SELECT 1``, the schema revision and
(for a leasing store that holds no lease) the lease rows."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection, Engine

from memstore.core.leases import LeaseRow
from memstore.sql.engine import translated_errors
from memstore.sql.leases import _rows_query, _to_rows

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


@dataclass(frozen=True, slots=True)
class DatabaseProbe:
    """What one probe read; ``leases`` only when asked for (``None`` otherwise)."""

    dialect: str
    revision: str | None
    leases: list[LeaseRow] | None


@functools.lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    from memstore.sql.migrate import alembic_config

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str | None:
    """The newest revision this installation ships (the scripts are read once per process)."""
    return _scripts().get_current_head()


def known_revision(revision: str) -> bool:
    """True when this installation ships ``revision``."""
    try:
        return _scripts().get_revision(revision) is not None
    except CommandError:
        return False


def _probe(connection: Connection, with_leases: bool) -> DatabaseProbe:
    connection.execute(sa.text("SELECT 1"))
    revision = MigrationContext.configure(connection).get_current_revision()
    leases = None
    if with_leases and revision is not None and revision == head_revision():
        leases = _to_rows(connection.execute(_rows_query(connection.dialect)))
    return DatabaseProbe(connection.dialect.name, revision, leases)


def probe(engine: Engine, *, with_leases: bool = False) -> DatabaseProbe:
    """Connect, run ``SELECT 1``, read the schema revision (and the lease rows)."""
    with translated_errors("checking health"), engine.connect() as connection:
        return _probe(connection, with_leases)


async def aprobe(engine: AsyncEngine, *, with_leases: bool = False) -> DatabaseProbe:
    """:func:`probe` on an async engine."""
    with translated_errors("checking health"):
        async with engine.connect() as connection:
            return await connection.run_sync(_probe, with_leases)
