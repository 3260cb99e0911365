"""The adapters' SQL reads and the pop, each a function of a sync ``Connection`` (the async
path runs the same function through ``AsyncConnection.run_sync``; see
:mod:`memstore.adapters._history`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.core.crypto import RowCipher
from memstore.core.display import ToolFormatter, display_drafts
from memstore.core.loader import RowRequest
from memstore.core.rows import decode_row, encode_payload, message_type, open_content, seal_original
from memstore.core.summary import is_summary
from memstore.core.window import StoredMessage
from memstore.messages import Message
from memstore.sql import generation
from memstore.sql.queries import (
    in_app,
    latest_summary_query,
    newest_rows_query,
    oldest_first_query,
    rows_to_messages,
    window_rows_statement,
)
from memstore.sql.schema import display, original

Shrink = Callable[[Message], "Message | Literal[False] | None"]
"""Given a row's message, what a pop leaves of the row: ``None`` deletes it, a message replaces
it (part of the row was popped), ``False`` skips it (not the caller's; look at older rows)."""

POP_SCAN_ROWS = 16
"""Rows a pop reads per page while looking for the newest row it does not skip."""

DISPLAY_SCAN_ROWS = 16
"""Display rows newer than a popped row that are checked for the one it alone produced."""


def history_page(
    conn: Connection, app_id: str, after: int, page: int, cipher: RowCipher
) -> list[StoredMessage]:
    """One keyset page of the app's rows with ids above ``after``, chronological."""
    query = oldest_first_query(app_id, after, page)
    return rows_to_messages(reversed(conn.execute(query).all()), app_id, cipher)


def read_newest(
    conn: Connection, app_id: str, limit: int, before_id: int | None, cipher: RowCipher
) -> list[StoredMessage]:
    statement, params = window_rows_statement(app_id, RowRequest(limit, before_id))
    return rows_to_messages(conn.execute(statement, params), app_id, cipher)


def read_newest_and_summary(
    conn: Connection, app_id: str, limit: int, cipher: RowCipher
) -> tuple[list[StoredMessage], StoredMessage | None]:
    """The app's ``limit`` newest rows (summaries left out) and its newest summary row, in
    one statement (the loader's ``UNION ALL`` read)."""
    statement, params = window_rows_statement(app_id, RowRequest(limit, summary=True))
    found = rows_to_messages(conn.execute(statement, params), app_id, cipher)
    summaries = [row for row in found if is_summary(row.message)]
    rows = [row for row in found if not is_summary(row.message)]
    return rows, summaries[-1] if summaries else None


def read_latest_summary(conn: Connection, app_id: str, cipher: RowCipher) -> StoredMessage | None:
    """The app's newest summary row (a compaction's), if any."""
    query = latest_summary_query(app_id, payload=True)
    rows = rows_to_messages(conn.execute(query), app_id, cipher)
    return rows[-1] if rows else None


@dataclass(frozen=True, slots=True)
class PopAttempt:
    done: bool
    """False when another writer changed the newest row first (retry in a new transaction)."""
    popped: StoredMessage | None = None


def pop_newest(
    conn: Connection,
    app_id: str,
    shrink: Shrink,
    formatters: Mapping[str, ToolFormatter],
    cipher: RowCipher,
) -> PopAttempt:
    """Pop the newest row of the app that ``shrink`` does not skip, in the caller's transaction.

    No row lock: two poppers may read the same newest row, and the conditional DELETE/UPDATE
    lets exactly one of them win (rowcount 1); the other retries in a fresh transaction (a
    fresh snapshot on MySQL's repeatable read). ``SELECT ... FOR UPDATE`` would make the loser
    on PostgreSQL see no row at all and wrongly report an empty session.
    """
    # First, as every writer does: the generation row is the first lock a change of the app's
    # history takes, so a pop and a purge of the same app cannot deadlock.
    generation.bump(conn, app_id)
    before: int | None = None
    while True:
        page = conn.execute(newest_rows_query(app_id, RowRequest(POP_SCAN_ROWS, before))).all()
        for newest in page:  # newest first
            row = StoredMessage(newest.id, decode_row(cipher, app_id, newest.id, newest.payload))
            remaining = shrink(row.message)
            if remaining is False:
                continue
            if remaining is None:
                deleted = conn.execute(original.delete().where(original.c.id == row.id)).rowcount
                if deleted != 1:
                    return PopAttempt(done=False)
                _delete_own_display_row(conn, app_id, row, formatters, cipher)
                return PopAttempt(done=True, popped=row)
            changed = conn.execute(
                original.update()
                .where(original.c.id == row.id, original.c.is_deleted == sa.false())
                .where(original.c.payload == newest.payload)
                .values(
                    payload=seal_original(
                        cipher,
                        {"id": row.id, "app_id": app_id, "payload": encode_payload(remaining)},
                    )["payload"],
                    message_type=message_type(remaining),
                    updated_at=datetime.now(timezone.utc),
                )
            ).rowcount
            if changed != 1:
                return PopAttempt(done=False)
            return PopAttempt(done=True, popped=row)
        if len(page) < POP_SCAN_ROWS:
            return PopAttempt(done=True)
        before = page[-1].id


def _delete_own_display_row(
    conn: Connection,
    app_id: str,
    row: StoredMessage,
    formatters: Mapping[str, ToolFormatter],
    cipher: RowCipher,
) -> None:
    """Delete the display row the popped message alone produced, if there is one.

    A batch's display rows get ids right after its original rows, so the row written for the
    popped (newest) message is the oldest newer display row with exactly the role and text the
    message alone displays as. A display row that also summarizes other messages (an AI reply
    with tool lines) does not match and stays: it is what a person saw.
    """
    drafts = display_drafts([row.message], formatters)
    if len(drafts) != 1:
        return
    draft = drafts[0]
    candidates = conn.execute(
        sa.select(display.c.id, display.c.role, display.c.content)
        .where(in_app(display, app_id), display.c.id > row.id, display.c.is_deleted == sa.false())
        .order_by(display.c.app_id, display.c.id)
        .limit(DISPLAY_SCAN_ROWS)
    ).all()
    for candidate in candidates:
        if candidate.role == draft.role and (
            open_content(cipher, app_id, candidate.id, candidate.content) == draft.content
        ):
            conn.execute(display.delete().where(display.c.id == candidate.id))
            return
