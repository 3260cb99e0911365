"""Operator statements: walking every app, statistics, purge by user, repairs.

Everything walks the tables in keyset pages, so memory stays flat on millions of rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memstore.core.crypto import PLAIN, RowCipher
from memstore.core.export import requested_call_ids
from memstore.core.rows import SUMMARY as SUMMARY_TYPE
from memstore.core.rows import TOOL_REQUEST, decode_row
from memstore.core.summary import summary_info
from memstore.core.window import StoredMessage
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import oldest_first_query, rows_to_messages
from memstore.sql.schema import adk_state, display, original, tool_executions
from memstore.sql.user_data import (
    apps_of_user,
    delete_unowned_executions,
    has_unowned_executions,
    user_scope,
)

APP_PAGE = 500
ROW_PAGE = 2000


def app_ids_page(after: str | None, page: int) -> sa.Select[Any]:
    """One keyset page of the app ids with rows in the original history, in byte order."""
    query = sa.select(original.c.app_id).distinct().order_by(original.c.app_id).limit(page)
    if after is not None:
        query = query.where(original.c.app_id > after)
    return query


def iter_app_ids(engine: Engine, page: int = APP_PAGE) -> Iterator[str]:
    """Every app id with rows in the original history, in byte order, page by page."""
    after: str | None = None
    while True:
        query = app_ids_page(after, page)
        with translated_errors("listing apps"), engine.connect() as conn:
            batch = list(conn.execute(query).scalars())
        yield from batch
        if len(batch) < page:
            return
        after = batch[-1]


def unknown_apps(engine: Engine, app_ids: list[str]) -> list[str]:
    """Those of ``app_ids`` with no row at all: no message in either history and no loop-guard
    record (a typo, most likely)."""
    unknown = []
    with translated_errors("looking up apps"), engine.connect() as conn:
        for app_id in app_ids:
            if not any(
                conn.execute(
                    sa.select(table.c.app_id).where(table.c.app_id == app_id).limit(1)
                ).first()
                is not None
                for table in (original, display, tool_executions)
            ):
                unknown.append(app_id)
    return unknown


def count_apps(engine: Engine) -> int:
    with translated_errors("counting apps"), engine.connect() as conn:
        query = sa.select(sa.func.count(sa.distinct(original.c.app_id)))
        return int(conn.execute(query).scalar() or 0)


def iter_history(
    engine: Engine, app_id: str, cipher: RowCipher, page: int = ROW_PAGE
) -> Iterator[StoredMessage]:
    """Every non-deleted original row of the app, in id order (texts opened by ``cipher``)."""
    after = -1
    while True:
        query = oldest_first_query(app_id, after, page)
        with translated_errors("reading history"), engine.connect() as conn:
            rows = list(conn.execute(query))
        yield from rows_to_messages(reversed(rows), app_id, cipher)
        if len(rows) < page:
            return
        after = rows[-1].id


@dataclass(frozen=True, slots=True)
class RowCounts:
    original_rows: int
    display_rows: int
    tool_executions: int = 0
    """Loop-guard records."""


def counts_for(
    engine: Engine, *, app_id: str | None = None, user_id: str | None = None
) -> RowCounts:
    """Rows (deleted ones included) a purge of ``app_id`` or ``user_id`` would remove (for a
    user: the rows and records carrying the user id; summaries and records with no user id
    that the purge also removes are not counted)."""
    with translated_errors("counting rows"), engine.connect() as conn:
        return RowCounts(
            *(
                _count(conn, table, app_id, user_id)
                for table in (original, display, tool_executions)
            )
        )


def _count(conn: Any, table: sa.Table, app_id: str | None, user_id: str | None) -> int:
    match = table.c.app_id == app_id if app_id is not None else user_scope(table, str(user_id))
    query = sa.select(sa.func.count()).select_from(table).where(match)
    return int(conn.execute(query).scalar() or 0)


PURGE_USER_PASSES = 8
"""Transactions :func:`purge_user` runs at most: each one catches the apps the user wrote to
while the previous one ran (in practice the second finds nothing)."""


def purge_user(
    engine: Engine, user_id: str, cipher: RowCipher = PLAIN
) -> tuple[RowCounts, list[str]]:
    """Hard-delete everything of ``user_id`` that :mod:`memstore.sql.user_data` lists: the
    rows written with the user id in both histories, the compaction summaries that cover any
    of them (a summary is written from the user's messages but carries no user id; the other
    users' messages it covers stay), the user's loop-guard records (and those with no user id
    that the user's rows request or answer), and the user's Google ADK ``user:`` and session
    state; return the counts and every app a row was deleted from (their cached windows must
    go).

    Each transaction lists the user's apps, locks them (the generation bump: writers to them
    wait) and deletes the user's rows of those apps only, so the apps returned are exactly
    the apps rows were deleted from, even when the user writes to a new app meanwhile; a
    next transaction takes those rows."""
    originals = displays = executions = 0
    apps: set[str] = set()
    with translated_errors("purging a user"):
        for _ in range(PURGE_USER_PASSES):
            with engine.begin() as conn:
                touched = apps_of_user(conn, user_id)
                if not touched:
                    break
                for app_id in touched:
                    generation.bump(conn, app_id)
                for app_id in touched:
                    if has_unowned_executions(conn, app_id):
                        requested = _requested_calls(conn, app_id, user_id, cipher)
                        executions += delete_unowned_executions(conn, app_id, user_id, requested)
                executions += conn.execute(
                    tool_executions.delete().where(user_scope(tool_executions, user_id))
                ).rowcount
                summaries = [
                    row_id
                    for app_id in touched
                    for row_id in _summaries_covering(conn, app_id, user_id, cipher)
                ]
                if summaries:
                    originals += conn.execute(
                        original.delete().where(original.c.id.in_(summaries))
                    ).rowcount
                originals += conn.execute(
                    original.delete().where(
                        original.c.user_id == user_id, original.c.app_id.in_(touched)
                    )
                ).rowcount
                displays += conn.execute(
                    display.delete().where(
                        display.c.user_id == user_id, display.c.app_id.in_(touched)
                    )
                ).rowcount
            apps.update(touched)
        with engine.begin() as conn:
            # the Google ADK adapter's user and session state of the user (its app state,
            # shared by every user, stays)
            conn.execute(adk_state.delete().where(user_scope(adk_state, user_id)))
    return RowCounts(originals, displays, executions), sorted(apps)


def _requested_calls(conn: Connection, app_id: str, user_id: str, cipher: RowCipher) -> list[str]:
    """The call ids the user's tool-request rows in the app request."""
    rows = conn.execute(
        sa.select(original.c.id, original.c.payload).where(
            original.c.app_id == app_id,
            original.c.user_id == user_id,
            original.c.message_type == TOOL_REQUEST,
        )
    )
    return [
        call_id
        for row in rows
        for call_id in requested_call_ids(decode_row(cipher, app_id, row.id, row.payload))
    ]


def _summaries_covering(
    conn: Connection, app_id: str, user_id: str, cipher: RowCipher
) -> list[int]:
    """The ids of the app's summary rows whose covered range holds a row of ``user_id``."""
    first = conn.execute(
        sa.select(sa.func.min(original.c.id)).where(
            original.c.app_id == app_id, original.c.user_id == user_id
        )
    ).scalar()
    if first is None:
        return []
    candidates = conn.execute(
        sa.select(original.c.id, original.c.payload).where(
            original.c.app_id == app_id,
            original.c.message_type == SUMMARY_TYPE,
            original.c.id > first,
        )
    ).all()
    doomed: list[int] = []
    for row in candidates:
        info = summary_info(decode_row(cipher, app_id, row.id, row.payload))
        if info is None:
            continue
        covered = conn.execute(
            sa.select(original.c.id)
            .where(
                original.c.app_id == app_id,
                original.c.user_id == user_id,
                original.c.id.between(info.first_id, info.last_id),
            )
            .limit(1)
        ).first()
        if covered is not None:
            doomed.append(row.id)
    return doomed


@dataclass(frozen=True, slots=True)
class Stats:
    apps: int
    original_rows: int
    display_rows: int
    rows_by_type: dict[str, int]
    oldest_id: int | None
    newest_id: int | None


def stats(engine: Engine) -> Stats:
    with translated_errors("reading statistics"), engine.connect() as conn:
        by_type = {
            row.message_type: int(row.n)
            for row in conn.execute(
                sa.select(original.c.message_type, sa.func.count().label("n"))
                .where(original.c.is_deleted == sa.false())
                .group_by(original.c.message_type)
            )
        }
        displays = conn.execute(
            sa.select(sa.func.count()).where(display.c.is_deleted == sa.false())
        ).scalar()
        bounds = conn.execute(
            sa.select(sa.func.min(original.c.id), sa.func.max(original.c.id)).where(
                original.c.is_deleted == sa.false()
            )
        ).one()
    return Stats(
        apps=count_apps(engine),
        original_rows=sum(by_type.values()),
        display_rows=int(displays or 0),
        rows_by_type=by_type,
        oldest_id=bounds[0],
        newest_id=bounds[1],
    )
