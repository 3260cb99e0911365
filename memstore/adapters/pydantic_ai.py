"""pydantic-ai conversation store on memstore: ``pip install 'memstore[pydantic-ai]'``.

The one-line switch (instead of ``InMemoryConversationStore()``)::

    conversations = MemstoreConversationStore(store)     # a MemoryStore or an AsyncMemoryStore
    conversation = await conversations.load("chat-42", limit=20) or Conversation(
        conversation_id="chat-42")
    result = await agent.run("What's the weather?", conversation=conversation)
    await conversations.save(result)

The conversation id is the app id. Every stored message (a pydantic-ai *entry*) becomes rows of
the original history, so the window, the loader's edge check, ``memstore check`` and the display
history see the conversation like any other:

* a ``ModelResponse`` -> one AI row: its text parts joined as the text, each ``ToolCallPart`` a
  tool request (``args`` as the string the model sent, or canonical JSON when the framework holds
  a dict); the ``ThinkingPart`` parts that a provider takes back become the row's
  :class:`~memstore.messages.Reasoning` parts, in place (Anthropic thinking with its signature
  and redacted thinking, OpenAI Responses reasoning items, one per item id with its summaries
  and ``encrypted_content``, and ``reasoning_content``), so a window rebuilt from SQL sends
  them with their calls; other thinking stays in the metadata copy only. A response with
  neither text nor calls (only thinking, say) is an opaque row;
* a ``ModelRequest`` -> one row per part: a ``ToolReturnPart`` is a tool result, a
  ``ToolReturnPart`` whose ``outcome`` is not ``success`` (a retry, a failure) and a
  legacy ``RetryPromptPart`` for a tool are error results, a ``UserPromptPart`` a user message, a
  ``SystemPromptPart`` a system message, any other part an opaque row.

Each row carries its parts exactly as pydantic-ai serializes them (and the message's own fields:
timestamps, run ids, usage, model name, instructions...) in ``metadata["pydantic_ai"]``, so
``load`` returns messages equal to the ones saved.

``load(conversation_id, limit=k)`` is one bounded read of the edge-checked window of the newest
rows holding the last ``k`` messages (memstore's loader): it never starts inside a tool exchange,
so it may hold more than ``k`` messages, and its first message may be a ``ModelRequest`` without
the tool returns that answered calls left outside the window. In a window, a call whose return
was never stored (a run that died mid-tool) gets a synthetic error return (one ``ModelRequest``
per tool group, never stored), except in the newest response, whose calls a paused run may still
be waiting on (deferred tools). ``load`` without a limit returns the history exactly as stored.

The records (revision, usage, scope, head, branches, deferred tool requests) live in the
``pydantic_ai_conversations`` table and the entry locations in ``pydantic_ai_entries`` (migration
0003). The app of a conversation always holds exactly the rows of its current history: a save or
``branch`` that leaves the history moves the rows it leaves to an archive app
(``pydantic-ai-branch-<hex>``), and a fork or a switch back to a branch copies the rows of the new
path into the app. ``delete`` removes the record, the entry locations, the rows of the app and of
its archives (both histories) and their cached windows; the forks keep their own copies.

All work runs in a worker thread on a synchronous store (an ``AsyncMemoryStore``'s twin, see
:mod:`memstore.adapters._history`), one transaction per write.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.extras import needs_extra

with needs_extra(__name__, "pydantic-ai"):
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )

from memstore.adapters._history import Store, StoreAccess, app_transaction
from memstore.adapters._pai_convert import (
    INTERRUPTED_ENTRY_PREFIX,
    PYDANTIC_AI_KEY,
    entry_to_messages,
    messages_to_entries,
    real_entry_id,
)
from memstore.adapters._pai_records import (
    ARCHIVE_PREFIX,
    DETAILS,
    RECORD,
    Location,
    app_tip,
    append_entries,
    entry_rows,
    load_record,
    locate,
    move_head,
    replace_record,
    starts_at_root,
    swap_record,
)
from memstore.adapters._row_steps import read_newest
from memstore.core.crypto import RowCipher
from memstore.core.inputs import normalize_app_id
from memstore.core.loader import RowRequest, run_steps, window_steps
from memstore.core.window import StoredMessage, Window, is_synthetic, select_window
from memstore.shielding import finish
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import purge_statements, rows_to_messages
from memstore.sql.schema import conversation_entries as entries_table
from memstore.sql.schema import conversations as records_table
from memstore.store import MemoryStore

if TYPE_CHECKING:  # pydantic-ai-slim >= 2.78: titles and metadata (``update``)
    from pydantic_ai.conversation_store import ConversationDetails

__all__ = [
    "ARCHIVE_PREFIX",
    "INTERRUPTED_ENTRY_PREFIX",
    "PYDANTIC_AI_KEY",
    "MemstoreConversationStore",
    "entry_to_messages",
    "messages_to_entries",
    "real_entry_id",
]

T = TypeVar("T")

_WHOLE = 2**31
"""A window size no history reaches: the edge check over every row of a path."""

# -- the store -------------------------------------------------------------------------------------


class MemstoreConversationStore(ConversationStore):
    """pydantic-ai's ``ConversationStore`` on a memstore store.

    Args:
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`
            (migrated to head: the records need migration 0003).

    Example::

        conversations = MemstoreConversationStore(store)
        conversation = await conversations.load("chat-42", limit=20)
        result = await agent.run("hi", conversation=conversation)
        await conversations.save(result)
    """

    def __init__(self, store: Store) -> None:
        self._access = StoreAccess(store)

    @property
    def store(self) -> Store:
        return self._access.store

    def _sync(self) -> MemoryStore:
        return self._access.sync_store()

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(function, *args)

    async def _write(self, function: Callable[..., T], *args: Any) -> T:
        return await finish(asyncio.to_thread(function, *args))

    # -- records ---------------------------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The stored record of the conversation, or ``None``."""
        return await self._run(self._read_record_sync, conversation_id)

    def _read_record_sync(self, conversation_id: str) -> ConversationRecord | None:
        with translated_errors("reading a conversation"), self._sync().engine.connect() as conn:
            return load_record(conn, conversation_id)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """The records (of ``scope``), most recently saved first, at most ``limit``."""
        return await self._run(self._read_records_sync, scope, limit)

    def _read_records_sync(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        query = sa.select(records_table.c.record).order_by(records_table.c.updated_at.desc())
        if scope is not None:
            query = query.where(records_table.c.scope == scope)
        if limit is not None:
            query = query.limit(limit)
        with translated_errors("listing conversations"), self._sync().engine.connect() as conn:
            return [RECORD.validate_json(text) for text in conn.execute(query).scalars()]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Store the record and its new entries in one transaction, if the revision matches.

        Raises:
            ConversationConflict: the stored revision is not ``expected_revision`` (nothing is
                written), or the head entry no longer exists.
        """
        await self._write(self._write_record_sync, record, list(new_entries), expected_revision)

    def _write_record_sync(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        store = self._sync()
        app_id = normalize_app_id(record.conversation_id, what="conversation_id")
        if new_entries:  # a history continuing from a synthetic entry continues before it
            first = new_entries[0]
            first = dataclasses.replace(first, parent_id=real_entry_id(first.parent_id))
            new_entries = [first, *new_entries[1:]]
        record = dataclasses.replace(
            record,
            head_id=real_entry_id(record.head_id),
            forked_at=real_entry_id(record.forked_at),
        )
        base = new_entries[0].parent_id if new_entries else record.head_id
        cache_entries: list[Any] = []
        step: GenerationStep | None = None
        store._ensure_lease()  # before the transaction: a lease renewal never waits on its locks
        with app_transaction(store, app_id, "saving a conversation") as conn:
            swap_record(conn, record, expected_revision)
            tip = app_tip(conn, app_id)
            moved = base != (tip.entry_id if tip is not None else None)
            if moved:
                move_head(conn, store, app_id, base, record.conversation_id)
                tip = app_tip(conn, app_id)
            if new_entries:
                depth = 0 if tip is None else tip.depth + 1
                cache_entries, step = append_entries(conn, store, app_id, new_entries, depth)
        # through the store: an update Redis skipped stamps the app (bounded staleness)
        if moved:
            store._cache_update(lambda: store.cache.invalidate(app_id))
        else:
            store._cache_append(app_id, cache_entries, step)

    async def write_details(
        self,
        conversation_id: str,
        details: ConversationDetails,
        *,
        expected_revision: str,
        expected: ConversationDetails | None = None,
    ) -> ConversationRecord:
        """Replace the record's ``title`` or ``metadata`` (the keys of ``details``), keeping its
        revision and ``updated_at``, if it still has ``expected_revision`` and the ``expected``
        values; a save keeps what this writes.

        Raises:
            ConversationConflict: no record with ``expected_revision`` and the ``expected``
                values is stored (nothing is written).
        """
        return await self._write(
            self._write_details_sync,
            conversation_id,
            dict(details),
            expected_revision,
            dict(expected or {}),
        )

    def _write_details_sync(
        self,
        conversation_id: str,
        details: dict[str, Any],
        expected_revision: str,
        expected: dict[str, Any],
    ) -> ConversationRecord:
        unknown = sorted(set(details) - set(DETAILS)) + sorted(set(expected) - set(DETAILS))
        if unknown:
            raise NotImplementedError(f"a conversation record has no {unknown[0]!r} to write")

        def change(stored: ConversationRecord) -> ConversationRecord:
            if any(getattr(stored, key) != value for key, value in expected.items()):
                raise ConversationConflict(conversation_id)
            return dataclasses.replace(stored, **details)

        with translated_errors("updating a conversation"), self._sync().engine.begin() as conn:
            return replace_record(conn, conversation_id, expected_revision, change)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record, its entry locations, and the rows of its app and archives.

        Both histories and the cached windows of those apps are purged; forks keep their own
        copies of the entries they share.
        """
        await self._write(self._delete_record_sync, conversation_id, expected_revision)

    def _delete_record_sync(self, conversation_id: str, expected_revision: str) -> None:
        store = self._sync()
        apps = {conversation_id}
        try:
            self._delete_rows(store, conversation_id, expected_revision, apps)
        finally:
            # also when the delete failed: its commit may have gone through with the reply
            # lost, and a window must never keep serving deleted text
            for app_id in sorted(apps):
                store._cache_update(partial(store.cache.purge, app_id))

    @staticmethod
    def _delete_rows(
        store: MemoryStore, conversation_id: str, expected_revision: str, apps: set[str]
    ) -> None:
        """Delete the record and every row it owns in one transaction, adding to ``apps``
        the apps rows were deleted from."""
        with translated_errors("deleting a conversation"), store.engine.begin() as conn:
            deleted = conn.execute(
                records_table.delete().where(
                    records_table.c.conversation_id == conversation_id,
                    records_table.c.revision == expected_revision,
                )
            ).rowcount
            if deleted != 1:
                raise ConversationConflict(conversation_id)
            apps.update(
                conn.execute(
                    sa.select(entries_table.c.app_id)
                    .where(entries_table.c.owner == conversation_id)
                    .distinct()
                ).scalars()
            )
            conn.execute(entries_table.delete().where(entries_table.c.owner == conversation_id))
            for app_id in sorted(apps):
                generation.bump(conn, app_id)  # in-process windows of other processes see it
                for statement in purge_statements(app_id):
                    conn.execute(statement)

    # -- entries ---------------------------------------------------------------------------------

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry with this id; ``KeyError`` when no conversation holds it."""
        return await self._run(self._read_entry_sync, entry_id)

    def _read_entry_sync(self, entry_id: str) -> ConversationEntry:
        store = self._sync()
        with translated_errors("reading an entry"), store.engine.connect() as conn:
            location = locate(conn, entry_id)
            if location is None:
                raise KeyError(entry_id)
            rows = rows_to_messages(entry_rows(conn, location), location.app_id, store.cipher)
        found = messages_to_entries([row.message for row in rows], synthesize=False)
        if len(found) != 1:
            raise KeyError(entry_id)
        return found[0]

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The history ending at ``head_id``: with ``limit``, the edge-checked window of rows
        holding its last ``limit`` entries, read in one bounded query (two when a tool group
        reaches further back), else the whole history."""
        if head_id is None or limit == 0:
            return []
        return await self._run(self._read_history_sync, head_id, limit)

    def _read_history_sync(self, head_id: str, limit: int | None) -> list[ConversationEntry]:
        store = self._sync()
        with translated_errors("reading a conversation"), store.engine.connect() as conn:
            head = locate(conn, head_id)
            if head is None:
                raise KeyError(head_id)
            if not starts_at_root(conn, head.app_id):
                return self._walk_history(conn, head, limit, store.cipher)
            lowest = 0 if limit is None else max(0, head.depth - limit + 1)
            total, first_row = conn.execute(
                sa.select(
                    sa.func.sum(entries_table.c.row_count), sa.func.min(entries_table.c.first_row)
                ).where(
                    entries_table.c.app_id == head.app_id,
                    entries_table.c.depth >= lowest,
                    entries_table.c.depth <= head.depth,
                )
            ).one()
            wanted = int(total or 1)
            bound = head.last_row + 1

            def read(size: int) -> Window:
                if lowest == 0:  # the whole path: every row, edge-checked as one window
                    rows = read_newest(conn, head.app_id, size, bound, store.cipher)
                    return select_window(rows, _WHOLE, history_complete=True)

                def fetch(request: RowRequest) -> list[StoredMessage]:
                    before = bound if request.before_id is None else min(request.before_id, bound)
                    return read_newest(conn, head.app_id, request.limit, before, store.cipher)

                return run_steps(window_steps(size, start_at_user=False), fetch)

            # A window of ``wanted`` messages can miss the path's oldest rows: rows this
            # adapter did not write may sit between them (the store's own appends, another
            # adapter, ``memstore check --repair`` answers), and the synthetic returns the edge
            # check adds count as messages. Read again with room for those until no more turn
            # up (one read when there are none).
            room = 0
            while True:
                window = read(wanted + room)
                extra = sum(
                    1
                    for message, row_id in zip(window.messages, window.ids, strict=False)
                    if is_synthetic(message)
                    or (row_id >= (first_row or 0) and PYDANTIC_AI_KEY not in message.metadata)
                )
                if extra <= room:
                    break
                room = extra
        return messages_to_entries(window.messages, synthesize=limit is not None)

    @staticmethod
    def _walk_history(
        conn: Connection, head: Location, limit: int | None, cipher: RowCipher
    ) -> list[ConversationEntry]:
        """A history whose start lives elsewhere (an archived branch): parent by parent."""
        path: list[Location] = []
        location: Location | None = head
        while location is not None and (limit is None or len(path) < limit):
            path.append(location)
            parent = location.parent_id
            location = None if parent is None else locate(conn, parent)
            if parent is not None and location is None:
                raise KeyError(parent)
        rows: list[StoredMessage] = []
        for step in reversed(path):
            rows.extend(rows_to_messages(entry_rows(conn, step), step.app_id, cipher))
        window = select_window(rows, _WHOLE, history_complete=True)
        return messages_to_entries(window.messages, synthesize=limit is not None)
