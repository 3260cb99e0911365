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
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

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
        ConversationStore,
    )
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
except ImportError as error:
    raise missing_extra(__name__, "pydantic-ai", error) from error

from memstore.adapters._history import (
    Store,
    StoreAccess,
    _newest_rows,
    app_transaction,
    distinct_requests,
    insert_messages,
    opaque,
)
from memstore.core.check import REPAIR_MARK
from memstore.core.crypto import ORIGINAL_PAYLOAD, RowCipher, is_sealed
from memstore.core.id_order import newest_of
from memstore.core.inputs import normalize_app_id
from memstore.core.loader import RowRequest, run_steps, window_steps
from memstore.core.reasoning import (
    ANTHROPIC,
    OPENAI,
    REASONING_CONTENT,
    REDACTED_THINKING,
    RESPONSES_REASONING,
    THINKING,
    placed_before,
    responses_reasoning,
)
from memstore.core.rows import open_payload
from memstore.core.window import StoredMessage, Window, is_synthetic, select_window
from memstore.messages import (
    AiMessage,
    Message,
    Reasoning,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.shielding import finish
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import newest_id_query, purge_statements, rows_to_messages
from memstore.sql.schema import conversation_entries as entries_table
from memstore.sql.schema import conversations as records_table
from memstore.sql.schema import original
from memstore.store import MemoryStore

if TYPE_CHECKING:  # pydantic-ai-slim >= 2.78: titles and metadata (``update``)
    from pydantic_ai.conversation_store import ConversationDetails

PYDANTIC_AI_KEY = "pydantic_ai"
"""The ``metadata`` key holding a row's pydantic-ai parts and its message's other fields."""

ARCHIVE_PREFIX = "pydantic-ai-branch-"
"""Prefix of the apps holding the rows of histories a conversation left."""

INTERRUPTED_ENTRY_PREFIX = "memstore-interrupted-"
"""Entry id prefix of the synthetic returns of calls whose return was never stored."""

__all__ = [
    "PYDANTIC_AI_KEY",
    "MemstoreConversationStore",
    "entry_to_messages",
    "messages_to_entries",
    "real_entry_id",
]

T = TypeVar("T")

_WHOLE = 2**31
"""A window size no history reaches: the edge check over every row of a path."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)
_RECORD = TypeAdapter(ConversationRecord)


# -- pydantic-ai messages <-> canonical rows -------------------------------------------------------


def _arguments(part: ToolCallPart) -> str:
    """The call's arguments: the model's string as sent, else canonical JSON."""
    args = part.args
    if isinstance(args, str):
        return args
    if args is None or isinstance(args, dict):
        return json.dumps(args or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return part.args_as_json_str()


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return "".join(item if isinstance(item, str) else f"[{item.kind}]" for item in part.content)


def _thinking(part: ThinkingPart) -> Reasoning | None:
    """The part pydantic-ai replays to its provider, as memstore keeps it; ``None`` for thinking
    no provider takes back (no signature, another provider: it stays in the metadata copy).
    A Responses reasoning item spread over several parts (one per summary) is merged by the
    caller."""
    if part.provider_name == ANTHROPIC and part.signature:
        if part.id == REDACTED_THINKING:
            return Reasoning(provider=ANTHROPIC, kind=REDACTED_THINKING, signature=part.signature)
        return Reasoning(
            provider=ANTHROPIC, kind=THINKING, text=part.content, signature=part.signature
        )
    if part.provider_name == OPENAI and part.id == REASONING_CONTENT and part.content:
        return Reasoning(provider=OPENAI, kind=REASONING_CONTENT, text=part.content)
    if part.provider_name == OPENAI and part.id and part.id.startswith("rs_"):
        item: dict[str, Any] = {"summary": []}
        if part.content:
            item["summary"] = [{"type": "summary_text", "text": part.content}]
        raw = (part.provider_details or {}).get("raw_content")
        if isinstance(raw, list) and all(isinstance(text, str) for text in raw):
            item["content"] = [{"type": "reasoning_text", "text": text} for text in raw]
        texts = [part.content] if part.content else []
        return responses_reasoning(part.id, texts, part.signature, item)
    return None


def _merged(first: Reasoning, more: Reasoning) -> Reasoning:
    """One Responses reasoning item from two of its parts (the next summary of the same id)."""
    summary = [*first.extra.get("summary", ()), *more.extra.get("summary", ())]
    texts = [entry["text"] for entry in summary]
    return responses_reasoning(
        first.id or "",
        texts,
        first.signature or more.signature,
        {**more.extra, **first.extra, "summary": summary},
    )


def _reasoning(message: ModelResponse, calls: list[ToolRequest]) -> list[Reasoning]:
    """The response's thinking, in order; a part after text or a call is placed before the
    next call (the order pydantic-ai replays the parts in)."""
    out: list[Reasoning] = []
    unplaced: list[int] = []
    """Positions in ``out`` of parts after text or a call, waiting for the next call."""
    seen_output = False
    call_ids = {call.id for call in calls}
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            found = _thinking(part)
            if found is None:
                continue
            previous = out[-1] if out else None
            if (
                previous is not None
                and found.kind == previous.kind == RESPONSES_REASONING
                and found.id == previous.id
            ):
                out[-1] = _merged(previous, found)
                continue
            out.append(found)
            if seen_output:
                unplaced.append(len(out) - 1)
        elif isinstance(part, (TextPart, ToolCallPart)):
            if isinstance(part, ToolCallPart) and part.tool_call_id in call_ids:
                for position in unplaced:
                    out[position] = placed_before([out[position]], part.tool_call_id)[0]
                unplaced = []
            seen_output = True
    return out


def _response_row(message: ModelResponse, meta: Callable[[list[int]], dict[str, Any]]) -> Message:
    texts = [part.content for part in message.parts if isinstance(part, TextPart)]
    calls = distinct_requests(
        ToolRequest(id=part.tool_call_id, name=part.tool_name, arguments=_arguments(part))
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.part_kind == "tool-call"
    )
    every = meta(list(range(len(message.parts))))
    text = "".join(texts) if texts else None
    if calls or text:
        return AiMessage(
            text=text, tool_requests=calls, reasoning=_reasoning(message, calls), metadata=every
        )
    return opaque(every)


def _request_row(part: object, metadata: dict[str, Any]) -> Message:
    if isinstance(part, ToolReturnPart):
        return ToolResult(
            id=part.tool_call_id,
            tool_name=part.tool_name,
            text=part.model_response_str(),
            is_error=part.outcome != "success",
            metadata=metadata,
        )
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:
        return ToolResult(
            id=part.tool_call_id,
            tool_name=part.tool_name,
            text=part.model_response(),
            is_error=True,
            metadata=metadata,
        )
    if isinstance(part, UserPromptPart):
        return UserMessage(text=_user_text(part), metadata=metadata)
    if isinstance(part, SystemPromptPart):
        return SystemMessage(text=part.content, metadata=metadata)
    return opaque(metadata)


def entry_to_messages(entry: ConversationEntry) -> list[Message]:
    """The canonical rows of one entry, each carrying its parts in ``metadata``."""
    data = _MESSAGE.dump_python(entry.message, mode="json")
    parts: list[Any] = data.pop("parts")
    head = {"entry": entry.id, "parent": entry.parent_id, "message": data}

    def meta(indexes: list[int]) -> dict[str, Any]:
        return {PYDANTIC_AI_KEY: {**head, "parts": [[i, parts[i]] for i in indexes]}}

    message = entry.message
    if isinstance(message, ModelResponse):
        return [_response_row(message, meta)]
    rows = [_request_row(part, meta([i])) for i, part in enumerate(message.parts)]
    return rows or [opaque(meta([]))]


@dataclass
class _Building:
    entry_id: str
    parent_id: str | None
    message: dict[str, Any]
    parts: dict[int, Any]


def _interrupted(
    results: list[ToolResult], previous: ConversationEntry | None
) -> ConversationEntry:
    # Stamped with the previous message's time, so every read builds an equal message (a
    # save compares the loaded messages with a fresh read).
    stamp = previous.message.timestamp if previous is not None else None
    stamp = stamp or _EPOCH
    parts = [
        ToolReturnPart(
            tool_name=result.tool_name, content=result.text, tool_call_id=result.id, timestamp=stamp
        )
        for result in results
    ]
    parent_id = previous.id if previous is not None else None
    return ConversationEntry(
        id=f"{INTERRUPTED_ENTRY_PREFIX}{parent_id or ''}",
        parent_id=parent_id,
        message=ModelRequest(parts=list(parts), timestamp=stamp),
    )


def real_entry_id(entry_id: str | None) -> str | None:
    """The stored entry a (possibly synthetic) entry id stands for: a synthetic entry is not
    stored, so a history continuing from it continues from the entry before it."""
    if entry_id is not None and entry_id.startswith(INTERRUPTED_ENTRY_PREFIX):
        return entry_id[len(INTERRUPTED_ENTRY_PREFIX) :] or None
    return entry_id


def messages_to_entries(
    messages: Sequence[Message], *, synthesize: bool = True
) -> list[ConversationEntry]:
    """Regroup a window's rows into entries (the rows of one entry form its message).

    Rows written by other means than this adapter are skipped. With ``synthesize``, the
    synthetic interrupted results of one tool group (and the answers ``memstore check
    --repair`` stored for its calls) become one ``ModelRequest`` entry of their own (id
    ``memstore-interrupted-<previous entry id>``), unless they answer calls of the newest
    response (a paused run may still be waiting on those calls); results for calls this
    adapter did not write are skipped like their calls.
    """
    pending: list[_Building | list[ToolResult]] = []
    called: set[str] = set()
    """Call ids of this adapter's responses: only those get a synthetic return."""
    for message in messages:
        data = message.metadata.get(PYDANTIC_AI_KEY)
        if isinstance(data, dict):
            if isinstance(message, AiMessage):
                called.update(call.id for call in message.tool_requests)
            parts = {index: part for index, part in data["parts"]}
            earlier = next(
                (
                    item
                    for item in reversed(pending[-2:])
                    if isinstance(item, _Building) and item.entry_id == data["entry"]
                ),
                None,
            )
            if earlier is not None:  # rows of one entry, maybe split by synthetic results
                earlier.parts.update(parts)
            else:
                pending.append(_Building(data["entry"], data["parent"], data["message"], parts))
        elif (
            synthesize
            and isinstance(message, ToolResult)
            and message.id in called
            and (is_synthetic(message) or REPAIR_MARK in message.metadata)
        ):
            if pending and isinstance(pending[-1], list):
                pending[-1].append(message)
            else:
                pending.append([message])
    if pending and isinstance(pending[-1], list):
        pending.pop()  # calls of the newest response: maybe deferred, never answered here
    out: list[ConversationEntry] = []
    for item in pending:
        if isinstance(item, list):
            out.append(_interrupted(item, out[-1] if out else None))
            continue
        body = {**item.message, "parts": [item.parts[i] for i in sorted(item.parts)]}
        out.append(
            ConversationEntry(
                id=item.entry_id, parent_id=item.parent_id, message=_MESSAGE.validate_python(body)
            )
        )
    return out


# -- SQL steps (sync Connection, one transaction per write) ----------------------------------------


@dataclass(frozen=True, slots=True)
class _Location:
    app_id: str
    entry_id: str
    parent_id: str | None
    depth: int
    first_row: int
    last_row: int
    row_count: int


def _location(row: Any) -> _Location:
    return _Location(
        row.app_id,
        row.entry_id,
        row.parent_id,
        row.depth,
        row.first_row,
        row.last_row,
        row.row_count,
    )


def _locate(conn: Connection, entry_id: str, app_id: str | None = None) -> _Location | None:
    """Where ``entry_id`` lives: in ``app_id``, or else in an app holding a whole path."""
    query = sa.select(entries_table).where(entries_table.c.entry_id == entry_id)
    if app_id is not None:
        query = query.where(entries_table.c.app_id == app_id)
    found = [_location(row) for row in conn.execute(query)]
    for location in found:
        if _starts_at_root(conn, location.app_id):
            return location
    return found[0] if found else None


def _starts_at_root(conn: Connection, app_id: str) -> bool:
    query = sa.select(entries_table.c.entry_id).where(
        entries_table.c.app_id == app_id, entries_table.c.depth == 0
    )
    return conn.execute(query.limit(1)).first() is not None


def _app_tip(conn: Connection, app_id: str) -> _Location | None:
    query = (
        sa.select(entries_table)
        .where(entries_table.c.app_id == app_id)
        .order_by(entries_table.c.depth.desc())
        .limit(1)
    )
    row = conn.execute(query).first()
    return None if row is None else _location(row)


def _entry_rows(conn: Connection, location: _Location) -> list[Any]:
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


def _read_record(conn: Connection, conversation_id: str) -> ConversationRecord | None:
    query = sa.select(records_table.c.record).where(
        records_table.c.conversation_id == conversation_id
    )
    text = conn.execute(query).scalar()
    return None if text is None else _RECORD.validate_json(text)


def _record_values(record: ConversationRecord) -> dict[str, Any]:
    return {
        "scope": record.scope,
        "revision": record.revision,
        "head_id": record.head_id,
        "record": _RECORD.dump_json(record).decode(),
        "updated_at": record.updated_at,
    }


def _swap_record(conn: Connection, record: ConversationRecord, expected: str | None) -> None:
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
    _replace_record(
        conn,
        conversation_id,
        expected,
        lambda stored: dataclasses.replace(
            record, **{key: getattr(stored, key) for key in _DETAILS}
        ),
    )


_DETAILS = tuple(
    key for key in ("title", "metadata") if key in ConversationRecord.__dataclass_fields__
)
"""The record fields ``write_details`` writes (none before pydantic-ai-slim 2.78)."""

_SWAP_TRIES = 8


def _replace_record(
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
        updated = change(_RECORD.validate_json(text))
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


def _copy_entry(conn: Connection, store: MemoryStore, source: _Location, app_id: str) -> None:
    rows = _entry_rows(conn, source)
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


def _move_head(
    conn: Connection, store: MemoryStore, app_id: str, base: str | None, conversation_id: str
) -> None:
    """Make the app hold exactly the path ending at entry ``base``.

    The rows after the last entry that path shares with the app go to an archive app; the
    entries of the path that the app lacks are copied in from where they live.
    """
    missing: list[_Location] = []
    junction: _Location | None = None
    current = base
    while current is not None:
        junction = _locate(conn, current, app_id)
        if junction is not None:
            break
        location = _locate(conn, current)
        if location is None:  # released by a concurrent delete or rewrite
            raise ConversationConflict(conversation_id)
        missing.append(location)
        current = location.parent_id
    _archive_after(conn, app_id, -1 if junction is None else junction.depth, store.cipher)
    for location in reversed(missing):
        _copy_entry(conn, store, location, app_id)


def _append_entries(
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
            return _read_record(conn, conversation_id)

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
            return [_RECORD.validate_json(text) for text in conn.execute(query).scalars()]

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
            _swap_record(conn, record, expected_revision)
            tip = _app_tip(conn, app_id)
            moved = base != (tip.entry_id if tip is not None else None)
            if moved:
                _move_head(conn, store, app_id, base, record.conversation_id)
                tip = _app_tip(conn, app_id)
            if new_entries:
                depth = 0 if tip is None else tip.depth + 1
                cache_entries, step = _append_entries(conn, store, app_id, new_entries, depth)
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
        unknown = sorted(set(details) - set(_DETAILS)) + sorted(set(expected) - set(_DETAILS))
        if unknown:
            raise NotImplementedError(f"a conversation record has no {unknown[0]!r} to write")

        def change(stored: ConversationRecord) -> ConversationRecord:
            if any(getattr(stored, key) != value for key, value in expected.items()):
                raise ConversationConflict(conversation_id)
            return dataclasses.replace(stored, **details)

        with translated_errors("updating a conversation"), self._sync().engine.begin() as conn:
            return _replace_record(conn, conversation_id, expected_revision, change)

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
            location = _locate(conn, entry_id)
            if location is None:
                raise KeyError(entry_id)
            rows = rows_to_messages(_entry_rows(conn, location), location.app_id, store.cipher)
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
            head = _locate(conn, head_id)
            if head is None:
                raise KeyError(head_id)
            if not _starts_at_root(conn, head.app_id):
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
                    rows = _newest_rows(conn, head.app_id, size, bound, store.cipher)
                    return select_window(rows, _WHOLE, history_complete=True)

                def fetch(request: RowRequest) -> list[StoredMessage]:
                    before = bound if request.before_id is None else min(request.before_id, bound)
                    return _newest_rows(conn, head.app_id, request.limit, before, store.cipher)

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
        conn: Connection, head: _Location, limit: int | None, cipher: RowCipher
    ) -> list[ConversationEntry]:
        """A history whose start lives elsewhere (an archived branch): parent by parent."""
        path: list[_Location] = []
        location: _Location | None = head
        while location is not None and (limit is None or len(path) < limit):
            path.append(location)
            parent = location.parent_id
            location = None if parent is None else _locate(conn, parent)
            if parent is not None and location is None:
                raise KeyError(parent)
        rows: list[StoredMessage] = []
        for step in reversed(path):
            rows.extend(rows_to_messages(_entry_rows(conn, step), step.app_id, cipher))
        window = select_window(rows, _WHOLE, history_complete=True)
        return messages_to_entries(window.messages, synthesize=limit is not None)
