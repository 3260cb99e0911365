"""Where a person's data lives: the one inventory that purge, export and erase by user read.

Every table of :data:`memstore.sql.schema.metadata` is listed exactly once, either in
:data:`USER_DATA` (how a user's rows in it are found) or in :data:`NO_USER_DATA` (why it holds
none); a unit test fails when a new table is in neither, so a table cannot be forgotten by one
of the three. The cache's key families are listed in :data:`CACHE_KEYS`: every one of them is
per app, so a purge by user drops the cached keys of each app it deleted rows from.

Rows are found by their ``user_id`` column. Two kinds of data carry no user id and are found
through the user's rows instead:

- a compaction summary (``message_type`` ``summary``) is written from many users' messages;
  it goes when its covered range holds a row of the user (``admin.purge_user``);
- a loop-guard record written before migration ``0009``, or by a caller that named no user,
  has ``user_id`` NULL; it belongs to the user whose rows request or answer its
  ``tool_call_id`` in its app. Purge deletes it when the user's rows name that call id (even
  when another user's rows name it too: erasure wins over an idempotency record); export lists
  it only when no other user's rows name it.

Data written with no user id at all (``append`` without ``user_id``, the pydantic-ai
adapter, which has no notion of a user) is reached by purge by app only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.sql.schema import (
    adk_state,
    app_generation,
    conversation_entries,
    conversations,
    display,
    original,
    tool_executions,
    worker_leases,
)


@dataclass(frozen=True, slots=True)
class UserData:
    """A table holding users' data and how one user's rows are found in it."""

    table: sa.Table
    found_by: str


USER_DATA: tuple[UserData, ...] = (
    UserData(original, "user_id column; summaries by the user's rows in their covered range"),
    UserData(display, "user_id column"),
    UserData(tool_executions, "user_id column; NULL user_id by tool_call_id (see module doc)"),
    UserData(adk_state, "user_id column, scopes 'user' and 'session' (app state is shared)"),
)
"""The tables a purge by user deletes from and an export by user reads."""

NO_USER_DATA: dict[str, str] = {
    app_generation.name: "a per-app counter and stale stamp: no text, no user id",
    worker_leases.name: "snowflake worker leases of processes: no app, no user",
    conversations.name: (
        "pydantic-ai conversation records: no user id (the adapter has none); removed with "
        "their app by purge by app"
    ),
    conversation_entries.name: "pointers (row id ranges) into the original history: no text",
}
"""The tables that hold no user-attributable data, and why."""

CACHE_KEYS: dict[str, str] = {
    "window": "the app's window of messages",
    "interrupted": "the call ids the window answers as interrupted",
    "heads": "the window entries' kinds, call ids and token counts",
    "version": "a counter: no text",
    "origin": "the Redis replication id the window was stored on: no text",
    "generation": "the SQL generation the window reflects: no text",
}
"""The cache's key families (``memstore:{app}:<family>`` in Redis), all per app: a purge of
the app, or of a user with rows in the app, deletes every one of them (the in-process cache
drops its entry)."""


def user_scope(table: sa.Table, user_id: str) -> sa.ColumnElement[bool]:
    """The rows of ``table`` (one of :data:`USER_DATA`) written with ``user_id``."""
    if table is adk_state:
        return sa.and_(adk_state.c.user_id == user_id, adk_state.c.scope.in_(("user", "session")))
    return table.c.user_id == user_id


def apps_of_user(conn: Connection, user_id: str) -> list[str]:
    """Every app with a history row or a loop-guard record of ``user_id``, sorted."""
    found: set[str] = set()
    for table in (original, display, tool_executions):
        query = sa.select(table.c.app_id).where(table.c.user_id == user_id).distinct()
        found.update(conn.execute(query).scalars())
    return sorted(found)


def _user_call_ids(app_id: str, user_id: str) -> sa.Select[Any]:
    """The call ids the user's tool-result rows in the app answer."""
    return sa.select(original.c.tool_call_id).where(
        original.c.app_id == app_id,
        original.c.user_id == user_id,
        original.c.tool_call_id.is_not(None),
    )


def delete_unowned_executions(
    conn: Connection, app_id: str, user_id: str, requested: Sequence[str]
) -> int:
    """Delete the app's loop-guard records with no user id whose call id the user's rows
    request (``requested``) or answer; return how many went. Run it before the user's
    history rows are deleted."""
    unowned = sa.and_(tool_executions.c.app_id == app_id, tool_executions.c.user_id.is_(None))
    matches = [tool_executions.c.tool_call_id.in_(_user_call_ids(app_id, user_id))]
    if requested:
        matches.append(tool_executions.c.tool_call_id.in_(list(requested)))
    statement = tool_executions.delete().where(unowned, sa.or_(*matches))
    return int(conn.execute(statement).rowcount or 0)


def has_unowned_executions(conn: Connection, app_id: str) -> bool:
    """Whether the app has a loop-guard record with no user id."""
    unowned = sa.and_(tool_executions.c.app_id == app_id, tool_executions.c.user_id.is_(None))
    return (
        conn.execute(sa.select(tool_executions.c.app_id).where(unowned).limit(1)).first()
        is not None
    )


def execution_position(row: Mapping[Any, Any]) -> tuple[str, str]:
    """Where a keyset page of :func:`user_executions_page` ends."""
    return (row["app_id"], row["idempotency_key"])


def executions_by_key(condition: sa.ColumnElement[bool], limit: int) -> sa.Select[Any]:
    """The loop-guard records that meet ``condition`` in primary-key order (app id, key),
    ``limit`` at most: a keyset page."""
    return (
        sa.select(tool_executions)
        .where(condition)
        .order_by(tool_executions.c.app_id, tool_executions.c.idempotency_key)
        .limit(limit)
    )


def user_executions_page(user_id: str, limit: int, after: tuple[str, str] | None) -> sa.Select[Any]:
    """One keyset page of the loop-guard records of ``user_id``, by (app id, key)."""
    query = executions_by_key(tool_executions.c.user_id == user_id, limit)
    if after is not None:
        app_id, key = after
        query = query.where(
            sa.or_(
                tool_executions.c.app_id > app_id,
                sa.and_(
                    tool_executions.c.app_id == app_id, tool_executions.c.idempotency_key > key
                ),
            )
        )
    return query


def unowned_executions_of(app_id: str, user_id: str, call_ids: Sequence[str]) -> sa.Select[Any]:
    """The app's loop-guard records with no user id whose call id is one of the user's
    ``call_ids`` and appears in no other user's row (an export lists nobody else's data)."""
    others = sa.select(original.c.tool_call_id).where(
        original.c.app_id == app_id,
        original.c.tool_call_id.in_(list(call_ids)),
        sa.or_(original.c.user_id != user_id, original.c.user_id.is_(None)),
    )
    return (
        sa.select(tool_executions)
        .where(
            tool_executions.c.app_id == app_id,
            tool_executions.c.user_id.is_(None),
            tool_executions.c.tool_call_id.in_(list(call_ids)),
            tool_executions.c.tool_call_id.not_in(others),
        )
        .order_by(tool_executions.c.idempotency_key)
    )
