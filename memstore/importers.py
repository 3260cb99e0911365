"""Importers from the stores users run today. Each reads the other store's tables directly and
converts rows with the matching adapter's codec, so an imported app reads back through that
adapter exactly like one it wrote.

So far: the OpenAI Agents SDK's ``SQLiteSession`` file (``--from openai-agents-sqlite``) and
its ``SQLAlchemySession`` tables on any database (``--from openai-agents-sql``).

A session becomes one app (``app_prefix + session_id``), written in one transaction with its
original timestamps; a session whose app already has rows is skipped, so an interrupted import
is resumed by running it again. Legacy items that break the rules (results without a call,
calls without a result) are imported as the adapter stores them (a result without a call is
kept opaque, out of model windows; an unanswered call is answered at read time by the loader)
and counted per session.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from memstore.core.display import display_drafts
from memstore.core.id_order import newest_of
from memstore.core.inputs import normalize_app_id
from memstore.core.rows import display_row, original_row
from memstore.core.validate import validate
from memstore.errors import InvalidInputError
from memstore.messages import Message
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.repository import in_app, newest_id_query
from memstore.sql.schema import display, original
from memstore.store import MemoryStore


class ImportSourceError(InvalidInputError):
    """The source of an import cannot be read: missing file, not the expected tables, an item
    that is not JSON. Names the session and row, never the item's text."""


@dataclass
class SessionImport:
    """What happened to one source session."""

    session_id: str
    app_id: str
    messages: int = 0
    skipped: bool = False
    """True when the app already had rows (imported before): nothing was written."""
    findings: dict[str, int] = field(default_factory=dict)
    """Rule breaks found in the source items (``orphan_result``, ``unanswered_request``...)."""


@dataclass(frozen=True, slots=True)
class SourceItem:
    row_id: int
    item: dict[str, Any]
    created_at: datetime


def _stamp(value: object) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return datetime.now(timezone.utc)
        return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed
    return datetime.now(timezone.utc)


def agents_sqlite_sessions(
    path: str | Path,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
) -> Iterator[tuple[str, list[SourceItem]]]:
    """Each session of an Agents SDK ``SQLiteSession`` file with its items, oldest first.
    The file is opened read-only; one session is held in memory at a time."""
    if not Path(path).is_file():
        raise ImportSourceError(f"no SQLite file at {str(path)!r}")
    for table in (sessions_table, messages_table):
        if not table.replace("_", "").isalnum():
            raise ImportSourceError(f"{table!r} is not a plain table name")
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        try:
            session_ids = [
                row[0]
                for row in conn.execute(
                    f"SELECT DISTINCT session_id FROM {messages_table} ORDER BY session_id"
                )
            ]
        except sqlite3.DatabaseError as error:
            raise ImportSourceError(
                f"not an Agents SDK session file ({type(error).__name__})"
            ) from None
        for session_id in session_ids:
            query = (
                f"SELECT id, message_data, created_at FROM {messages_table} "
                "WHERE session_id = ? ORDER BY id"
            )
            yield str(session_id), _source_items(session_id, conn.execute(query, (session_id,)))
    finally:
        conn.close()


def _source_items(session_id: object, rows: Iterable[Any]) -> list[SourceItem]:
    """A session's ``(id, message_data, created_at)`` rows as items, oldest first."""
    items: list[SourceItem] = []
    for row_id, data, created in rows:
        try:
            item = json.loads(data)
        except ValueError:
            raise ImportSourceError(
                f"session {session_id!r} row {row_id}: the item is not JSON"
            ) from None
        items.append(SourceItem(row_id, item, _stamp(created)))
    return items


def agents_sql_sessions(
    url: str,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
) -> Iterator[tuple[str, list[SourceItem]]]:
    """Each session of the Agents SDK's ``SQLAlchemySession`` tables at ``url`` (an async
    driver in the URL is swapped for its sync twin), oldest item first."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from memstore.adapters._history import _sync_url

    messages = sa.table(
        messages_table,
        sa.column("id"),
        sa.column("session_id"),
        sa.column("message_data"),
        sa.column("created_at"),
    )
    try:
        engine = sa.create_engine(_sync_url(make_url(url)))
    except (ArgumentError, ImportError, ValueError) as error:
        raise ImportSourceError(f"cannot open the source URL ({type(error).__name__})") from None
    try:
        with engine.connect() as conn:
            try:
                session_ids = list(
                    conn.execute(
                        sa.select(messages.c.session_id).distinct().order_by(messages.c.session_id)
                    ).scalars()
                )
            except SQLAlchemyError as error:
                raise ImportSourceError(
                    f"no Agents SDK session tables there ({type(error).__name__})"
                ) from None
            for session_id in session_ids:
                query = (
                    sa.select(messages.c.id, messages.c.message_data, messages.c.created_at)
                    .where(messages.c.session_id == session_id)
                    .order_by(messages.c.id)
                )
                yield str(session_id), _source_items(session_id, conn.execute(query))
    finally:
        engine.dispose()


def import_agents_session(
    store: MemoryStore, app_id: str, session_id: str, items: list[SourceItem]
) -> SessionImport:
    """Write one session's items as the app's history (skipped when the app has rows)."""
    from memstore.adapters._history import resolve_results
    from memstore.adapters.openai_agents import item_to_message

    app = normalize_app_id(app_id)
    report = SessionImport(session_id, app)
    raw = [item_to_message(source.item) for source in items]  # type: ignore[arg-type]
    report.findings = dict(Counter(v.code for v in validate(raw, "openai")))
    messages: list[Message] = resolve_results(raw, {})
    report.messages = len(messages)
    store._ensure_lease()  # before the transaction: a lease renewal never waits on its locks
    with translated_errors("importing a session"), store.engine.begin() as conn:
        generation.bump(conn, app)  # locks the app: a racing import or write waits
        taken = conn.execute(sa.select(original.c.id).where(in_app(original, app)).limit(1))
        if taken.first() is not None:
            report.skipped = True
            return report
        drafts = display_drafts(messages, store.formatters)
        newest = newest_of(*conn.execute(newest_id_query(app)).one())
        ids = store._issue_ids(len(messages) + len(drafts), newest)
        rows = [
            original_row(row_id, app, None, message, source.created_at)
            for row_id, message, source in zip(ids[: len(messages)], messages, items, strict=True)
        ]
        last = items[-1].created_at if items else datetime.now(timezone.utc)
        shown = [
            display_row(row_id, app, None, draft, last)
            for row_id, draft in zip(ids[len(messages) :], drafts, strict=True)
        ]
        if rows:
            conn.execute(original.insert(), rows)
        if shown:
            conn.execute(display.insert(), shown)
    store._cache_update(lambda: store.cache.invalidate(app))  # stamped if Redis skipped it
    return report
