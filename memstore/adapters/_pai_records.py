"""The SQL steps of the pydantic-ai conversation store (each on a sync ``Connection``, in the
caller's transaction): the records in ``pydantic_ai_conversations``, the entry locations in
``pydantic_ai_entries``, and the moves of rows between a conversation's app and its archives
(see :mod:`memstore.adapters.pydantic_ai`).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from memstore.extras import missing_extra

try:
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
    )
except ImportError as error:
    raise missing_extra(__name__, "pydantic-ai", error) from error

from memstore.adapters._history import insert_messages
from memstore.adapters._pai_convert import entry_to_messages
from memstore.core.crypto import ORIGINAL_PAYLOAD, RowCipher, is_sealed
from memstore.core.id_order import newest_of
from memstore.core.rows import open_payload
from memstore.messages import Message
from memstore.sql import generation
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import newest_id_query
from memstore.sql.schema import conversation_entries as entries_table
from memstore.sql.schema import conversations as records_table
from memstore.sql.schema import original
from memstore.store import MemoryStore

ARCHIVE_PREFIX = "pydantic-ai-branch-"
"""Prefix of the apps holding the rows of histories a conversation left."""


RECORD = TypeAdapter(ConversationRecord)


@dataclass(frozen=True, slots=True)
class Location:
    app_id: str
    entry_id: str
    parent_id: str | None
    depth: int
    first_row: int
    last_row: int
    row_count: int


def _location(row: Any) -> Location:
    return Location(
        row.app_id,
        row.entry_id,
        row.parent_id,
        row.depth,
        row.first_row,
        row.last_row,
        row.row_count,
    )


def locate(conn: Connection, entry_id: str, app_id: str | None = None) -> Location | None:
    """Where ``entry_id`` lives: in ``app_id``, or else in an app holding a whole path."""
    query = sa.select(entries_table).where(entries_table.c.entry_id == entry_id)
    if app_id is not None:
        query = query.where(entries_table.c.app_id == app_id)
    found = [_location(row) for row in conn.execute(query)]
    for location in found:
        if starts_at_root(conn, location.app_id):
            return location
    return found[0] if found else None


def starts_at_root(conn: Connection, app_id: str) -> bool:
    query = sa.select(entries_table.c.entry_id).where(
        entries_table.c.app_id == app_id, entries_table.c.depth == 0
    )
    return conn.execute(query.limit(1)).first() is not None


def app_tip(conn: Connection, app_id: str) -> Location | None:
    query = (
        sa.select(entries_table)
        .where(entries_table.c.app_id == app_id)
        .order_by(entries_table.c.depth.desc())
        .limit(1)
    )
    row = conn.execute(query).first()
    return None if row is None else _location(row)


def entry_rows(conn: Connection, location: Location) -> list[Any]:
    query = (
        sa.select(original)
        .where(
            original.c.app_id == location.app_id,
            original.c.id >= location.first_row,
            original.c.id <= location.last_row,
            original.c.is_deleted == sa.false(),
        )
        .order_by(original.c.id)
    )
    return list(conn.execute(query))


def load_record(conn: Connection, conversation_id: str) -> ConversationRecord | None:
    query = sa.select(records_table.c.record).where(
        records_table.c.conversation_id == conversation_id
    )
    text = conn.execute(query).scalar()
    return None if text is None else RECORD.validate_json(text)


def _record_values(record: ConversationRecord) -> dict[str, Any]:
    return {
        "scope": record.scope,
        "revision": record.revision,
        "head_id": record.head_id,
        "record": RECORD.dump_json(record).decode(),
        "updated_at": record.updated_at,
    }


def swap_record(conn: Connection, record: ConversationRecord, expected: str | None) -> None:
    """Compare-and-swap the record on its revision; raise ``ConversationConflict`` otherwise."""
    conversation_id = record.conversation_id
    if expected is None:
        exists = conn.execute(
            sa.select(records_table.c.revision).where(
                records_table.c.conversation_id == conversation_id
            )
        ).first()
        if exists is not None:
            raise ConversationConflict(conversation_id)
        try:
            with conn.begin_nested():
                conn.execute(
                    records_table.insert().values(
                        conversation_id=conversation_id, **_record_values(record)
                    )
                )
        except IntegrityError as error:  # a concurrent first save of the same id won
            raise ConversationConflict(conversation_id) from error
        return
    # The title and metadata are ``write_details``'s: a save keeps the stored ones.
    replace_record(
        conn,
        conversation_id,
        expected,
        lambda stored: dataclasses.replace(
            record, **{key: getattr(stored, key) for key in DETAILS}
        ),
    )


DETAILS = tuple(
    key for key in ("title", "metadata") if key in ConversationRecord.__dataclass_fields__
)
"""The record fields ``write_details`` writes (none before pydantic-ai-slim 2.78)."""

_SWAP_TRIES = 8


def replace_record(
    conn: Connection,
    conversation_id: str,
    expected_revision: str,
    change: Callable[[ConversationRecord], ConversationRecord],
) -> ConversationRecord:
    """Replace the stored record of ``expected_revision`` with ``change(stored)``.

    The update compares the whole stored record too, so a concurrent ``write_details`` (which
    keeps the revision) is never undone: the change is made again on what it wrote.

    Raises:
        ConversationConflict: no record of ``expected_revision`` is stored.
    """
    for _ in range(_SWAP_TRIES):
        text = conn.execute(
            sa.select(records_table.c.record)
            .where(
                records_table.c.conversation_id == conversation_id,
                records_table.c.revision == expected_revision,
            )
            .with_for_update()
        ).scalar()
        if text is None:
            break
        updated = change(RECORD.validate_json(text))
        changed = conn.execute(
            records_table.update()
            .where(
                records_table.c.conversation_id == conversation_id,
                records_table.c.revision == expected_revision,
                records_table.c.record == text,
            )
            .values(**_record_values(updated))
        ).rowcount
        if changed == 1:
            return updated
    raise ConversationConflict(conversation_id)


def _archive_after(conn: Connection, app_id: str, depth: int, cipher: RowCipher) -> None:
    """Move the app's entries deeper than ``depth`` (and their rows) to a new archive app."""
    moved = conn.execute(
        sa.select(sa.func.min(entries_table.c.first_row)).where(
            entries_table.c.app_id == app_id, entries_table.c.depth > depth
        )
    ).scalar()
    if moved is None:
        return
    generation.bump(conn, app_id)  # the app's history changes: cached windows must see it
    archive = f"{ARCHIVE_PREFIX}{uuid.uuid4().hex}"
    if cipher.enabled:  # a sealed payload is bound to its app: seal it again for the archive
        rows = conn.execute(
            sa.select(original.c.id, original.c.payload).where(
                original.c.app_id == app_id, original.c.id >= moved
            )
        ).all()
        for row in rows:
            conn.execute(
                original.update()
                .where(original.c.id == row.id)
                .values(
                    app_id=archive, payload=_moved_payload(cipher, row, app_id, archive, row.id)
                )
            )
    else:
        conn.execute(
            original.update()
            .where(original.c.app_id == app_id, original.c.id >= moved)
            .values(app_id=archive)
        )
    conn.execute(
        entries_table.update()
        .where(entries_table.c.app_id == app_id, entries_table.c.depth > depth)
        .values(app_id=archive)
    )


def _moved_payload(cipher: RowCipher, row: Any, from_app: str, to_app: str, new_id: int) -> str:
    """A row's stored payload for its copy under ``to_app``/``new_id``: opened and sealed
    again when encryption is on (a sealed value is bound to its app and id)."""
    if not cipher.enabled and not is_sealed(row.payload):
        return str(row.payload)
    plain = open_payload(cipher, from_app, row.id, row.payload)
    return cipher.seal(plain, ORIGINAL_PAYLOAD, to_app, new_id)


def _copy_entry(conn: Connection, store: MemoryStore, source: Location, app_id: str) -> None:
    rows = entry_rows(conn, source)
    generation.bump(conn, app_id)  # locks the app, so the copies get ids above its newest
    newest = newest_of(*conn.execute(newest_id_query(app_id)).one())
    ids = store._issue_ids(len(rows), newest)
    now = datetime.now(timezone.utc)
    conn.execute(
        original.insert(),
        [
            {
                "id": new_id,
                "app_id": app_id,
                "user_id": row.user_id,
                "message_type": row.message_type,
                "tool_call_id": row.tool_call_id,
                "payload": _moved_payload(store.cipher, row, source.app_id, app_id, new_id),
                "created_at": row.created_at,
                "updated_at": now,
                "is_deleted": False,
            }
            for new_id, row in zip(ids, rows, strict=True)
        ],
    )
    conn.execute(
        entries_table.insert().values(
            app_id=app_id,
            entry_id=source.entry_id,
            owner=app_id,
            parent_id=source.parent_id,
            depth=source.depth,
            first_row=ids[0],
            last_row=ids[-1],
            row_count=len(ids),
        )
    )


def move_head(
    conn: Connection, store: MemoryStore, app_id: str, base: str | None, conversation_id: str
) -> None:
    """Make the app hold exactly the path ending at entry ``base``.

    The rows after the last entry that path shares with the app go to an archive app; the
    entries of the path that the app lacks are copied in from where they live.
    """
    missing: list[Location] = []
    junction: Location | None = None
    current = base
    while current is not None:
        junction = locate(conn, current, app_id)
        if junction is not None:
            break
        location = locate(conn, current)
        if location is None:  # released by a concurrent delete or rewrite
            raise ConversationConflict(conversation_id)
        missing.append(location)
        current = location.parent_id
    _archive_after(conn, app_id, -1 if junction is None else junction.depth, store.cipher)
    for location in reversed(missing):
        _copy_entry(conn, store, location, app_id)


def append_entries(
    conn: Connection,
    store: MemoryStore,
    app_id: str,
    new_entries: Sequence[ConversationEntry],
    depth: int,
) -> tuple[list[Any], GenerationStep | None]:
    """Insert the rows (both histories) and locations of ``new_entries``; the cache entries
    and the write's generation step."""
    per_entry = [entry_to_messages(entry) for entry in new_entries]
    batch: list[Message] = [message for rows in per_entry for message in rows]
    row_ids, cache_entries, step = insert_messages(conn, store, app_id, batch, None)
    position = 0
    locations = []
    for offset, (entry, rows) in enumerate(zip(new_entries, per_entry, strict=True)):
        ids = row_ids[position : position + len(rows)]
        position += len(rows)
        locations.append(
            {
                "app_id": app_id,
                "entry_id": entry.id,
                "owner": app_id,
                "parent_id": entry.parent_id,
                "depth": depth + offset,
                "first_row": ids[0],
                "last_row": ids[-1],
                "row_count": len(ids),
            }
        )
    conn.execute(entries_table.insert(), locations)
    return cache_entries, step
