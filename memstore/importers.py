"""Importers from the stores users run today. Each reads the other store's tables (or dump)
directly and converts its records with the matching codec, so an imported app reads back
through that framework's adapter exactly like one it wrote.

Sources (:data:`SOURCES`, the names ``memstore import --from`` takes):

* ``openai-agents-sqlite``: the OpenAI Agents SDK's ``SQLiteSession`` file
  (:func:`agents_sqlite_sessions`);
* ``openai-agents-sql``: its ``SQLAlchemySession`` tables on any database
  (:func:`agents_sql_sessions`);
* ``langchain-sql``: langchain-community's ``SQLChatMessageHistory`` table
  (:func:`langchain_sql_sessions`);
* ``langchain4j-json``: LangChain4j's ``ChatMessageSerializer`` JSON, one memory or a
  ``ChatMemoryStore`` dump (:func:`langchain4j_json_sessions`).

A reader yields ``(session_id, items)`` per session, one session in memory at a time;
:func:`convert` turns a session's items into canonical messages (the whole source can be
converted, and so checked, before anything is written); :func:`import_session` writes one
session as one app (``app_prefix + session_id``) in one transaction. A session whose app
already has rows is skipped, so an interrupted import is resumed by running it again. Legacy
records that break the rules (results without a call, calls without a result) are imported as
the adapter stores them (a result without a call is kept opaque, out of model windows; an
unanswered call is answered at read time by the loader) and counted per session.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from memstore.core.display import display_drafts
from memstore.core.id_order import newest_of
from memstore.core.inputs import normalize_app_id
from memstore.core.rows import display_row, original_row, seal_display, seal_original
from memstore.core.validate import validate
from memstore.errors import InvalidInputError, InvalidMessageError
from memstore.messages import Message
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import in_app, newest_id_query
from memstore.sql.schema import display, original
from memstore.store import MemoryStore


class ImportSourceError(InvalidInputError):
    """The source of an import cannot be read: missing file, not the expected tables, an item
    that is not JSON or that its framework cannot read. Names the session and row, never the
    item's text."""


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
    """One record of a source session: its row id (its position for a JSON source), the
    record as the source stores it (parsed JSON) and its timestamp (the time it was read
    when the source keeps none)."""

    row_id: int
    item: Any
    created_at: datetime


Session = tuple[str, list[SourceItem]]


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


def _plain_name(table: str) -> str:
    if not table.replace("_", "").isalnum():
        raise ImportSourceError(f"{table!r} is not a plain table name")
    return table


def agents_sqlite_sessions(
    path: str | Path,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
) -> Iterator[Session]:
    """Each session of an Agents SDK ``SQLiteSession`` file with its items, oldest first.
    The file is opened read-only; one session is held in memory at a time."""
    if not Path(path).is_file():
        raise ImportSourceError(f"no SQLite file at {str(path)!r}")
    _plain_name(sessions_table)
    messages_table = _plain_name(messages_table)
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
    """A session's ``(id, data, created_at)`` rows as items, oldest first (``created_at``
    ``None``: the source keeps no time, the item is stamped with the time it was read)."""
    items: list[SourceItem] = []
    for row_id, data, created in rows:
        try:
            item = json.loads(data)
        except (TypeError, ValueError):
            raise ImportSourceError(
                f"session {session_id!r} row {row_id}: the item is not JSON"
            ) from None
        items.append(SourceItem(row_id, item, _stamp(created)))
    return items


def _sql_sessions(
    url: str, table: str, data_column: str, stamp_column: str | None, what: str
) -> Iterator[Session]:
    """Each session of a ``(id, session_id, DATA[, STAMP])`` table at ``url`` (an async
    driver in the URL is swapped for its sync twin), oldest row first."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from memstore.sql.engine import sync_url

    columns = ["id", "session_id", data_column] + ([stamp_column] if stamp_column else [])
    source = sa.table(_plain_name(table), *(sa.column(_plain_name(name)) for name in columns))
    stamp = source.c[stamp_column] if stamp_column else sa.null()
    try:
        engine = sa.create_engine(sync_url(make_url(url)))
    except (ArgumentError, ImportError, ValueError) as error:
        raise ImportSourceError(f"cannot open the source URL ({type(error).__name__})") from None
    try:
        try:
            connection = engine.connect()
        except SQLAlchemyError as error:  # a host, database or password that does not answer
            raise ImportSourceError(
                f"cannot connect to the source ({type(error).__name__})"
            ) from None
        with connection as conn:
            try:
                session_ids = list(
                    conn.execute(
                        sa.select(source.c.session_id).distinct().order_by(source.c.session_id)
                    ).scalars()
                )
            except SQLAlchemyError as error:
                raise ImportSourceError(f"no {what} there ({type(error).__name__})") from None
            for session_id in session_ids:
                query = (
                    sa.select(source.c.id, source.c[data_column], stamp)
                    .where(source.c.session_id == session_id)
                    .order_by(source.c.id)
                )
                yield str(session_id), _source_items(session_id, conn.execute(query))
    finally:
        engine.dispose()


def agents_sql_sessions(
    url: str,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
) -> Iterator[Session]:
    """Each session of the Agents SDK's ``SQLAlchemySession`` tables at ``url`` (an async
    driver in the URL is swapped for its sync twin), oldest item first."""
    _plain_name(sessions_table)
    return _sql_sessions(
        url, messages_table, "message_data", "created_at", "Agents SDK session tables"
    )


def langchain_sql_sessions(url: str, *, table: str = "message_store") -> Iterator[Session]:
    """Each session of a langchain-community ``SQLChatMessageHistory`` table at ``url``
    (columns ``id``, ``session_id``, ``message``: the JSON of ``message_to_dict``), oldest
    row first. The table keeps no time: each item is stamped with the time it was read."""
    return _sql_sessions(url, table, "message", None, f"SQLChatMessageHistory table {table!r}")


def langchain4j_json_sessions(path: str | Path, *, app_id: str | None = None) -> Iterator[Session]:
    """The memories of a LangChain4j JSON file: one ``ChatMessageSerializer.messagesToJson``
    array (one memory, whose session id is ``app_id``), or an object mapping memory ids to
    such arrays (or to their JSON text, as a ``ChatMemoryStore`` keeps them). Items carry
    their position as row id and the time they were read (the format keeps no time)."""
    file = Path(path)
    if not file.is_file():
        raise ImportSourceError(f"no file at {str(path)!r}")
    try:
        data = json.loads(file.read_bytes())
    except ValueError:
        raise ImportSourceError("the file is not JSON") from None
    if isinstance(data, list):
        if app_id is None:
            raise ImportSourceError("the file holds one memory (a JSON array): name its app id")
        memories: dict[str, Any] = {app_id: data}
    elif isinstance(data, dict):
        if app_id is not None:
            raise ImportSourceError(
                "the file maps memory ids to messages: each memory id names its app, "
                "so no app id is taken"
            )
        memories = data
    else:
        raise ImportSourceError(
            f"expected a JSON array of messages or an object of memories, got {type(data).__name__}"
        )
    for memory_id, value in memories.items():
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ImportSourceError(f"memory {memory_id!r}: its text is not JSON") from None
        if value is None:
            value = []
        if not isinstance(value, list):
            raise ImportSourceError(f"memory {memory_id!r}: expected a JSON array of messages")
        yield memory_id, [SourceItem(i, entry, _stamp(None)) for i, entry in enumerate(value)]


# -- conversion: a session's items -> canonical messages -------------------------------------------


def _agents_messages(session_id: str, items: list[SourceItem]) -> list[Message]:
    from memstore.adapters.openai_agents import item_to_message

    return [item_to_message(source.item) for source in items]


def _langchain_messages(session_id: str, items: list[SourceItem]) -> list[Message]:
    from memstore.adapters.langchain import record_to_canonical  # needs the langchain extra

    out: list[Message] = []
    for source in items:
        try:
            out.append(record_to_canonical(source.item))
        except (InvalidMessageError, KeyError, TypeError, ValueError) as error:
            raise ImportSourceError(
                f"session {session_id!r} row {source.row_id}: langchain cannot read the "
                f"message ({type(error).__name__})"
            ) from None
    return out


def _langchain4j_messages(session_id: str, items: list[SourceItem]) -> list[Message]:
    from memstore.errors import FormatConversionError
    from memstore.formats.langchain4j import from_langchain4j

    try:
        return from_langchain4j([source.item for source in items])
    except FormatConversionError as error:
        raise ImportSourceError(
            f"memory {session_id!r} message {error.index}: {error.detail}"
        ) from None


Reader = Callable[..., Iterator[Session]]
Converter = Callable[[str, list[SourceItem]], list[Message]]


@dataclass(frozen=True, slots=True)
class Source:
    """An import source: how its sessions are read and how its items become messages."""

    read: Reader
    """``read(FILE, **options)``: the sessions, one at a time."""
    convert: Converter


SOURCES: dict[str, Source] = {
    "openai-agents-sqlite": Source(agents_sqlite_sessions, _agents_messages),
    "openai-agents-sql": Source(agents_sql_sessions, _agents_messages),
    "langchain-sql": Source(langchain_sql_sessions, _langchain_messages),
    "langchain4j-json": Source(langchain4j_json_sessions, _langchain4j_messages),
}
"""The importers by their ``memstore import --from`` name."""


def convert(source: str, session_id: str, items: list[SourceItem]) -> list[Message]:
    """The canonical messages of one session of ``source``, before the import's fixes (a
    result without a call is still a ``ToolResult``). Raises :class:`ImportSourceError` for
    an item the source's codec cannot read."""
    return SOURCES[source].convert(session_id, items)


def _has_rows(conn: sa.Connection, app: str) -> bool:
    query = sa.select(original.c.id).where(in_app(original, app)).limit(1)
    return conn.execute(query).first() is not None


def import_session(
    store: MemoryStore, source: str, app_id: str, session_id: str, items: list[SourceItem]
) -> SessionImport:
    """Write one session's items as the app's history (skipped when the app has rows)."""
    from memstore.adapters._history import resolve_results

    app = normalize_app_id(app_id)
    report = SessionImport(session_id, app)
    with translated_errors("importing a session"), store.engine.connect() as conn:
        report.skipped = _has_rows(conn, app)  # a rerun skips imported sessions without a write
    if report.skipped:
        return report
    raw = convert(source, session_id, items)
    report.findings = dict(Counter(v.code for v in validate(raw, "openai")))
    messages: list[Message] = resolve_results(raw, {})
    report.messages = len(messages)
    store._ensure_lease()  # before the transaction: a lease renewal never waits on its locks
    with translated_errors("importing a session"), store.engine.begin() as conn:
        generation.bump(conn, app)  # locks the app: a racing import or write waits
        if _has_rows(conn, app):
            report.skipped = True
            return report
        drafts = display_drafts(messages, store.formatters)
        newest = newest_of(*conn.execute(newest_id_query(app)).one())
        ids = store._issue_ids(len(messages) + len(drafts), newest)
        rows = [
            seal_original(store.cipher, original_row(row_id, app, None, message, source.created_at))
            for row_id, message, source in zip(ids[: len(messages)], messages, items, strict=True)
        ]
        last = items[-1].created_at if items else datetime.now(timezone.utc)
        shown = [
            seal_display(store.cipher, display_row(row_id, app, None, draft, last))
            for row_id, draft in zip(ids[len(messages) :], drafts, strict=True)
        ]
        if rows:
            conn.execute(original.insert(), rows)
        if shown:
            conn.execute(display.insert(), shown)
    store._cache_update(lambda: store.cache.invalidate(app))  # stamped if Redis skipped it
    return report
