"""The Claude Agent SDK session store's SQL (functions of a sync ``Connection``): the newest
row id of each of a list of apps or of one app below an id, rows by id, and the hard delete of
an app's rows by id.

Every statement selects by ``app_id`` equality (the ``(app_id, id)`` index) or by primary
key, never by an ``app_id`` range: a range over ``VARCHAR`` follows the column's collation
on PostgreSQL, which need not be byte order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.core.crypto import RowCipher
from memstore.core.rows import decode_row
from memstore.core.window import StoredMessage
from memstore.sql import generation
from memstore.sql.schema import original

IN_CHUNK = 500
"""Ids per ``IN (...)`` list."""

__all__ = ["IN_CHUNK", "delete_rows", "newest_below", "newest_ids", "rows_by_id"]


def _chunks(values: Sequence[object]) -> Iterator[list[object]]:
    for start in range(0, len(values), IN_CHUNK):
        yield list(values[start : start + IN_CHUNK])


def newest_ids(conn: Connection, app_ids: Sequence[str]) -> dict[str, int]:
    """The id of the newest live row of each app that has one (one grouped read per chunk of
    apps; each group is the top of its ``(app_id, id)`` index range)."""
    found: dict[str, int] = {}
    for chunk in _chunks(app_ids):
        query = (
            sa.select(original.c.app_id, sa.func.max(original.c.id))
            .where(original.c.app_id.in_(chunk), original.c.is_deleted == sa.false())
            .group_by(original.c.app_id)
        )
        for app_id, newest in conn.execute(query):
            found[app_id] = int(newest)
    return found


def newest_below(conn: Connection, app_id: str, below: int) -> int | None:
    """The id of the app's newest live row below ``below`` (``None``: there is none)."""
    query = sa.select(sa.func.max(original.c.id)).where(
        original.c.app_id == app_id, original.c.id < below, original.c.is_deleted == sa.false()
    )
    found = conn.execute(query).scalar()
    return None if found is None else int(found)


def rows_by_id(conn: Connection, ids: Sequence[int], cipher: RowCipher) -> dict[int, StoredMessage]:
    """The rows with these ids (primary-key lookups), decoded."""
    out: dict[int, StoredMessage] = {}
    for chunk in _chunks(ids):
        query = sa.select(original.c.id, original.c.app_id, original.c.payload).where(
            original.c.id.in_(chunk)
        )
        for row in conn.execute(query).all():
            message = decode_row(cipher, row.app_id, row.id, row.payload)
            out[row.id] = StoredMessage(row.id, message)
    return out


def delete_rows(conn: Connection, app_id: str, ids: Sequence[int]) -> int:
    """Hard-delete the app's rows with these ids in the caller's transaction (rows without a
    display row: opaque ones); the app's generation is raised first, as every writer does."""
    if not ids:
        return 0
    generation.bump(conn, app_id)
    deleted = 0
    for chunk in _chunks(ids):
        statement = original.delete().where(original.c.app_id == app_id, original.c.id.in_(chunk))
        deleted += conn.execute(statement).rowcount
    return deleted
