"""The SQL steps of the Google ADK session service (each on a sync ``Connection``, in the
caller's transaction): the app, user and session state rows of ``adk_state``, and the time
range a summary covers (see :mod:`memstore.adapters.google_adk`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.extras import needs_extra

with needs_extra(__name__, "google-adk"):
    from google.adk.sessions import _session_util

from memstore.adapters._adk_convert import event_stamp, stamp_bounds
from memstore.core.rows import SUMMARY
from memstore.core.summary import SummaryInfo
from memstore.sql.queries import in_app, newest_first, rows_to_messages
from memstore.sql.schema import adk_state, original
from memstore.store import MemoryStore

_STAMP_SCAN = 16
"""Rows read at each end of a covered range for the timestamp of an event of this adapter."""


def covered_bounds(
    conn: Connection, store: MemoryStore, app_id: str, info: SummaryInfo
) -> tuple[float, float]:
    """The first and last event timestamps in a summary's covered range, read from the
    rows at both ends of it (a summary row or a row written by other means has none)."""
    where = (
        in_app(original, app_id),
        original.c.is_deleted == sa.false(),
        original.c.message_type != SUMMARY,
        original.c.id >= info.first_id,
        original.c.id <= info.last_id,
    )
    columns = (original.c.id, original.c.payload)
    oldest = sa.select(*columns).where(*where).order_by(original.c.app_id, original.c.id)
    newest = sa.select(*columns).where(*where).order_by(*newest_first(original))
    head = rows_to_messages(conn.execute(oldest.limit(_STAMP_SCAN)), app_id, store.cipher)
    tail = rows_to_messages(conn.execute(newest.limit(_STAMP_SCAN)), app_id, store.cipher)
    return stamp_bounds([event_stamp(row.message) for row in head + tail])


# -- state rows ------------------------------------------------------------------------------------


def state_key(scope: str, app_name: str, user_id: str = "", session_id: str = "") -> Any:
    return sa.and_(
        adk_state.c.scope == scope,
        adk_state.c.app_name == app_name,
        adk_state.c.user_id == user_id,
        adk_state.c.session_id == session_id,
    )


def state_of(conn: Connection, scope: str, *key: str) -> dict[str, Any]:
    text = conn.execute(sa.select(adk_state.c.state).where(state_key(scope, *key))).scalar()
    return {} if text is None else dict(json.loads(text))


def merge_state(conn: Connection, scope: str, delta: dict[str, Any], *key: str) -> None:
    """Apply ``delta`` to the app or user state row (created when missing).

    The row is first made to exist (an insert that does nothing when it is there), then read
    with a row lock (``FOR UPDATE``; SQLite's write lock serializes anyway), so concurrent
    appends in one app or for one user merge one after the other and no key is lost. Creating
    the row before locking it takes one lock per row, in one order: no gap locks, no
    shared-to-exclusive upgrade, so no deadlock between concurrent first writers (InnoDB)."""
    if not delta:
        return  # nothing to merge: no row, no lock
    now = datetime.now(timezone.utc)
    conn.execute(_create_if_missing(conn, scope, now, *key))
    row = conn.execute(
        sa.select(adk_state.c.state, adk_state.c.revision)
        .where(state_key(scope, *key))
        .with_for_update()
    ).one()
    merged = {**json.loads(row.state), **delta}
    conn.execute(
        adk_state.update()
        .where(state_key(scope, *key))
        .values(state=json.dumps(merged), revision=row.revision + 1, updated_at=now)
    )


def _create_if_missing(conn: Connection, scope: str, now: datetime, *key: str) -> Any:
    """An insert of the empty state row that does nothing when the row exists."""
    values = {
        "scope": scope,
        "app_name": key[0],
        "user_id": key[1] if len(key) > 1 else "",
        "session_id": "",
        "state": "{}",
        "revision": 0,
        "updated_at": now,
    }
    if conn.dialect.name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        statement = mysql.insert(adk_state).values(values)
        # a no-op update: it takes the row's exclusive lock, as the locking read would
        return statement.on_duplicate_key_update(revision=adk_state.c.revision)
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(adk_state).values(values).on_conflict_do_nothing()
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(adk_state).values(values).on_conflict_do_nothing()


def update_stamp(value: datetime) -> float:
    if value.tzinfo is None:  # MySQL DATETIME comes back naive (stored as UTC)
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def json_state(state: dict[str, Any]) -> dict[str, Any]:
    """State in the JSON form ADK's ``DatabaseSessionService`` stores (ISO datetimes, decimals
    as strings, sets as lists; a value pydantic cannot convert by its ``str()``)."""
    return dict(json.loads(json.dumps(_session_util.make_json_safe_state(state), default=str)))
