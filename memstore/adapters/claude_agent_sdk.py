"""Claude Agent SDK session store on memstore: ``pip install 'memstore[claude-agent-sdk]'``.

The one-line switch (the SDK mirrors every transcript line to the store, and resumes from it)::

    options = ClaudeAgentOptions(session_store=MemstoreSessionStore(store))

Every method of the SDK's ``SessionStore`` protocol is implemented: ``append``, ``load``,
``list_sessions``, ``list_session_summaries``, ``delete`` and ``list_subkeys``.

**Apps.** Each key ``(project_key, session_id, subpath)`` is one memstore app::

    claude:<project_key>:<session_id>               the main transcript
    claude:<project_key>:<session_id>:<subpath>     a sub-agent transcript

(``claude`` is the ``namespace`` argument.) In each part, ``%``, ``:``, ``~`` and characters
that are not printable are written as ``%XX`` of their UTF-8 bytes (other Unicode stays as it
is), so the id decodes back (:func:`parse_app_id`). A part longer than its share of the
128-character app id limit (project key 36, session id 37, subpath 36 characters after
escaping; the namespace at most 16) is cut and ends in ``~`` and 16 hex digits of its
SHA-256; such an id does not decode, and the listing rows keep the full session id and
subpath. Two listing apps hold what exists: ``claude:<project_key>`` one row per session,
``claude:<project_key>:<session_id>:`` (an empty subpath) one row per sub-agent transcript.
Listing reads those rows, then the newest row id of each listed app in one grouped read by
app id (no scan of app id ranges, whose order follows the database's collation).

**Rows.** Each entry is one row of the original history, the entry itself (exactly as
given, JSON) in ``metadata["claude_agent_sdk_entry"]``, so ``load`` returns entries deep-equal
to what was appended. The row is what the rest of memstore understands of the entry:

* a ``user`` line whose ``message.content`` is text (or text blocks) -> ``UserMessage``;
* a ``user`` line holding one ``tool_result`` block -> ``ToolResult`` (the tool name taken
  from its request; a result whose request is not in the transcript is stored opaquely);
* an ``assistant`` line with text and ``tool_use`` blocks -> ``AiMessage`` with its text and
  tool requests (the ``input`` as JSON arguments); thinking blocks are not part of it;
* anything else (summaries, titles, attachments, system lines, thinking-only lines) -> an
  opaque row: an empty ``SystemMessage`` carrying the entry (no display row).

Entries whose ``uuid`` is among the session's newest rows (as many as the batch holds) are left
out, so a batch sent again after it landed is stored once. The last row of each batch also
carries the key (``claude_agent_sdk_key``) and, for a main transcript, the SDK's folded
session summary (``claude_agent_sdk_summary``, folded with ``fold_session_summary`` from the
newest summary stored; the write checks under the app's lock that no row came in between,
else it starts again). ``mtime`` is the time of the app's newest row (its snowflake id's
milliseconds).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast
from urllib.parse import unquote

from memstore.extras import needs_extra

with needs_extra(__name__, "claude-agent-sdk"):
    import claude_agent_sdk as sdk

from memstore.adapters._batch import distinct_requests, opaque
from memstore.adapters._cas_sql import delete_rows, newest_below, newest_ids, rows_by_id
from memstore.adapters._history import Store, StoreAccess, app_transaction, insert_messages
from memstore.adapters._row_steps import read_newest
from memstore.core.id_order import id_timestamp_ms
from memstore.core.inputs import normalize_user_id
from memstore.core.metadata import thaw
from memstore.core.window import StoredMessage
from memstore.errors import InvalidInputError, InvalidMessageError, UnknownToolCallError
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from memstore.shielding import finish
from memstore.sql.engine import translated_errors
from memstore.store import MemoryStore

ENTRY_KEY = "claude_agent_sdk_entry"
"""The ``metadata`` key holding the entry exactly as it was appended."""
KEY_KEY = "claude_agent_sdk_key"
"""The ``metadata`` key of a batch's last row: the session key it was appended under."""
SUMMARY_KEY = "claude_agent_sdk_summary"
"""The ``metadata`` key of a main transcript batch's last row: the folded session summary."""
CATALOG_KEY = "claude_agent_sdk_catalog"
"""The ``metadata`` key of a listing row (a session of a project, a subpath of a session)."""

DEFAULT_NAMESPACE = "claude"
MAX_NAMESPACE_CHARS = 16
PART_CHARS = {"project_key": 36, "session_id": 37, "subpath": 36}
"""The most characters each escaped part of an app id takes (with a 16-character namespace
and the three separators: 128, the app id limit)."""
_HASH_CHARS = 16
_SCAN_PAGE = 16

UserOf = Callable[[sdk.SessionKey], "str | None"]

__all__ = [
    "ENTRY_KEY",
    "KEY_KEY",
    "SUMMARY_KEY",
    "MemstoreSessionStore",
    "entry_to_message",
    "parse_app_id",
    "session_app_id",
]


# -- app ids ---------------------------------------------------------------------------------------


def _escape(value: str) -> str:
    """``%``, ``:``, ``~`` and characters that are not printable as ``%XX`` of their UTF-8
    bytes; everything else as it is."""
    return "".join(
        "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
        if char in "%:~" or not char.isprintable()
        else char
        for char in value
    )


def _part(value: str, limit: int) -> str:
    escaped = _escape(value)
    if len(escaped) <= limit:
        return escaped
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    head = escaped[: limit - _HASH_CHARS - 1]
    cut = head.rfind("%", len(head) - 2)  # never end inside a %XX escape
    if cut != -1:
        head = head[:cut]
    return f"{head}~{digest}"


def _namespace(value: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAMESPACE_CHARS:
        raise InvalidInputError(f"namespace must be 1-{MAX_NAMESPACE_CHARS} characters")
    if not value.isascii() or _escape(value) != value:
        raise InvalidInputError("namespace must be printable ASCII without '%', ':' or '~'")
    return value


def _text(key: Mapping[str, Any], field: str) -> str:
    value = key.get(field) if isinstance(key, Mapping) else None
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"a session key needs a non-empty string {field!r}")
    return value


def _subpath(key: Mapping[str, Any]) -> str | None:
    value = key.get("subpath")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInputError("a session key's 'subpath' must be a string")
    return value


def session_app_id(key: sdk.SessionKey, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The memstore app id of a session key: ``<namespace>:<project_key>:<session_id>``, and
    ``:<subpath>`` after it for a sub-agent transcript (see the module docs)."""
    parts = [
        _namespace(namespace),
        _part(_text(key, "project_key"), PART_CHARS["project_key"]),
        _part(_text(key, "session_id"), PART_CHARS["session_id"]),
    ]
    subpath = _subpath(key)
    if subpath is not None:
        parts.append(_part(subpath, PART_CHARS["subpath"]))
    return ":".join(parts)


def parse_app_id(app_id: str) -> sdk.SessionKey | None:
    """The session key an app id of :func:`session_app_id` names, or ``None`` when it is not
    one or a part was shortened (ends in ``~`` and a hash)."""
    parts = app_id.split(":")
    if len(parts) not in (3, 4) or any(not part or "~" in part for part in parts):
        return None
    key: dict[str, str] = {"project_key": unquote(parts[1]), "session_id": unquote(parts[2])}
    if len(parts) == 4:
        key["subpath"] = unquote(parts[3])
    return cast(sdk.SessionKey, key)


def _sessions_app(namespace: str, project_key: str) -> str:
    """The app listing a project's sessions."""
    return f"{namespace}:{_part(project_key, PART_CHARS['project_key'])}"


def _subkeys_app(namespace: str, project_key: str, session_id: str) -> str:
    """The app listing a session's sub-agent transcripts (an empty subpath: never a key's)."""
    main = session_app_id({"project_key": project_key, "session_id": session_id}, namespace)
    return f"{main}:"


# -- entries -> rows -------------------------------------------------------------------------------


def _entry_json(entry: object) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise InvalidMessageError(f"session entries must be dicts, got {type(entry).__name__}")
    try:
        copy = json.loads(json.dumps(entry, allow_nan=False, ensure_ascii=False))
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(f"a session entry is not JSON: {error}") from error
    if not isinstance(copy.get("type"), str):
        raise InvalidMessageError("a session entry needs a string 'type'")
    return cast(dict[str, Any], copy)


def _blocks_text(content: object) -> str:
    """The text of a content string or of its ``text`` blocks."""
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return "".join(block if isinstance(block, str) else _block_text(block) for block in blocks)


def _block_text(block: object) -> str:
    if not isinstance(block, Mapping) or block.get("type") != "text":
        return ""
    text = block.get("text")
    return text if isinstance(text, str) else ""


def _user_row(content: object, metadata: dict[str, Any]) -> Message | None:
    if isinstance(content, list):
        results = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"]
        if results:
            call_id = results[0].get("tool_use_id")
            if len(content) != 1 or not isinstance(call_id, str) or not call_id:
                return None
            return ToolResult(
                id=call_id,
                tool_name="",  # filled in from its request before writing
                text=_blocks_text(results[0].get("content")),
                is_error=results[0].get("is_error") is True,
                metadata=metadata,
            )
    text = _blocks_text(content)
    return UserMessage(text=text, metadata=metadata) if text else None


def _assistant_row(content: object, metadata: dict[str, Any]) -> Message | None:
    calls: list[ToolRequest] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, Mapping) or block.get("type") != "tool_use":
                continue
            call_id, name = block.get("id"), block.get("name")
            if isinstance(call_id, str) and call_id and isinstance(name, str) and name:
                arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
                calls.append(ToolRequest(id=call_id, name=name, arguments=arguments))
    text = _blocks_text(content)
    if not text and not calls:
        return None
    return AiMessage(text=text or None, tool_requests=distinct_requests(calls), metadata=metadata)


def entry_to_message(
    entry: sdk.SessionStoreEntry, extra: Mapping[str, Any] | None = None
) -> Message:
    """The canonical row of one transcript entry (the entry itself in ``metadata``, with
    ``extra`` keys beside it)."""
    data = _entry_json(entry)
    metadata: dict[str, Any] = {ENTRY_KEY: data, **(extra or {})}
    message = data.get("message")
    row: Message | None = None
    if isinstance(message, Mapping):
        if data["type"] == "user" and message.get("role", "user") == "user":
            row = _user_row(message.get("content"), metadata)
        elif data["type"] == "assistant" and message.get("role", "assistant") == "assistant":
            row = _assistant_row(message.get("content"), metadata)
    return opaque(metadata) if row is None else row


def _entries(rows: Sequence[StoredMessage]) -> list[sdk.SessionStoreEntry]:
    out = []
    for row in rows:
        entry = row.message.metadata.get(ENTRY_KEY)
        if isinstance(entry, dict):
            out.append(cast(sdk.SessionStoreEntry, thaw(entry)))
    return out


def _uuid(entry: object) -> str | None:
    value = entry.get("uuid") if isinstance(entry, Mapping) else None
    return value if isinstance(value, str) and value else None


def _not_in(
    entries: list[sdk.SessionStoreEntry], recent: Sequence[StoredMessage]
) -> list[sdk.SessionStoreEntry]:
    """``entries`` without those whose ``uuid`` one of the ``recent`` rows' entries has."""
    stored = {_uuid(row.message.metadata.get(ENTRY_KEY)) for row in recent} - {None}
    return [entry for entry in entries if _uuid(entry) not in stored]


def _newest_with(conn: Any, app_id: str, field: str, store: MemoryStore) -> StoredMessage | None:
    """The app's newest row whose metadata has ``field`` (pages of newest rows)."""
    before: int | None = None
    while True:
        rows = read_newest(conn, app_id, _SCAN_PAGE, before, store.cipher)
        for row in reversed(rows):
            if field in row.message.metadata:
                return row
        if len(rows) < _SCAN_PAGE:
            return None
        before = rows[0].id


def _summary_of(row: StoredMessage) -> sdk.SessionSummaryEntry:
    stored = thaw(row.message.metadata[SUMMARY_KEY])
    return {
        "session_id": stored["session_id"],
        "mtime": id_timestamp_ms(row.id),
        "data": stored["data"],
    }


class _Moved(Exception):
    """A row came into the app after the append read its newest summary."""


# -- the store -------------------------------------------------------------------------------------


class MemstoreSessionStore(sdk.SessionStore):
    """The Claude Agent SDK's ``SessionStore`` on a memstore store.

    Args:
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`.
        namespace: the first part of every app id (1-16 printable ASCII characters without
            ``%``, ``:`` or ``~``); stores with different namespaces never see each other's
            sessions.
        user_id: stored on every row written (for ``memstore purge --user-id``): a string,
            or a function of the session key (a tenant's project key, say).

    Example::

        session_store = MemstoreSessionStore(store)
        options = ClaudeAgentOptions(session_store=session_store)
    """

    def __init__(
        self,
        store: Store,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        user_id: str | UserOf | None = None,
    ) -> None:
        self.namespace = _namespace(namespace)
        self._access = StoreAccess(store)
        if user_id is None or callable(user_id):
            self._user_of: UserOf | None = user_id
        else:
            fixed = normalize_user_id(user_id)
            self._user_of = lambda _key: fixed

    @property
    def store(self) -> Store:
        return self._access.store

    def app_id(self, key: sdk.SessionKey) -> str:
        """The memstore app id of ``key`` (what ``memstore show`` and ``purge`` take)."""
        return session_app_id(key, self.namespace)

    def _user(self, key: sdk.SessionKey) -> str | None:
        return None if self._user_of is None else normalize_user_id(self._user_of(key))

    # -- the protocol --------------------------------------------------------------------------

    async def append(self, key: sdk.SessionKey, entries: list[sdk.SessionStoreEntry]) -> None:
        """Append ``entries`` to the key's transcript in one transaction, in order.

        A main transcript's summary is folded from the newest one stored, and the write is
        tried again when another append came in between, so concurrent appends to one session
        each fold the other's entries.
        """
        app_id = self.app_id(key)
        if not entries:
            return
        await finish(asyncio.to_thread(self._append_sync, key, app_id, list(entries)))

    async def load(self, key: sdk.SessionKey) -> list[sdk.SessionStoreEntry] | None:
        """The key's entries in the order appended, or ``None`` when it has no rows."""
        rows = await self._access.aall_rows(self.app_id(key))
        return _entries(rows) if rows else None

    async def list_sessions(self, project_key: str) -> list[sdk.SessionStoreListEntry]:
        """The project's sessions (main transcripts) with the epoch-ms time of their newest
        row."""
        found = await asyncio.to_thread(self._sessions_sync, project_key, False)
        return [{"session_id": session_id, "mtime": mtime} for session_id, mtime, _ in found]

    async def list_session_summaries(self, project_key: str) -> list[sdk.SessionSummaryEntry]:
        """The project's sessions' folded summaries, as the SDK's fold left them."""
        found = await asyncio.to_thread(self._sessions_sync, project_key, True)
        return [summary for _, _, summary in found if summary is not None]

    async def delete(self, key: sdk.SessionKey) -> None:
        """Delete the key's transcript; a main transcript's sub-agent transcripts go with it."""
        app_id = self.app_id(key)
        await finish(asyncio.to_thread(self._delete_sync, key, app_id))

    async def list_subkeys(self, key: sdk.SessionListSubkeysKey) -> list[str]:
        """The subpaths of the session's sub-agent transcripts."""
        project_key, session_id = _text(key, "project_key"), _text(key, "session_id")
        return await asyncio.to_thread(self._subkeys_sync, project_key, session_id)

    # -- blocking work -------------------------------------------------------------------------

    def _append_sync(
        self, key: sdk.SessionKey, app_id: str, entries: list[sdk.SessionStoreEntry]
    ) -> None:
        """Write the batch with the summary folded from the newest one stored. The summary is
        read first, on its own connection; the write then checks, under the app's lock, that
        no row came in between (else it rolls back and starts again), so concurrent appends
        each fold the other's batch and the cached window takes the write as any append.
        Entries whose ``uuid`` is among the session's newest rows (as many as the batch) are
        left out: a batch the SDK sends again after it landed is stored once."""
        store = self._access.sync_store()
        user = self._user(key)
        subpath = _subpath(key)
        stored_key = {"project_key": key["project_key"], "session_id": key["session_id"]}
        if subpath is not None:
            stored_key["subpath"] = subpath
        given = entries
        found: StoredMessage | None
        while True:
            entries, found = given, None
            with translated_errors("reading a session"), store.engine.connect() as conn:
                seen = newest_ids(conn, [app_id]).get(app_id)
                if seen is not None:
                    recent = read_newest(conn, app_id, len(given), None, store.cipher)
                    entries = _not_in(given, recent)
                    if subpath is None and entries:
                        found = _newest_with(conn, app_id, SUMMARY_KEY, store)
            if not entries:
                return  # a batch stored already (an append retried after it landed)
            extra: dict[str, Any] = {KEY_KEY: stored_key}
            if subpath is None:
                prev = None if found is None else _summary_of(found)
                folded = sdk.fold_session_summary(prev, key, entries)
                extra[SUMMARY_KEY] = {"session_id": folded["session_id"], "data": folded["data"]}
            batch = [entry_to_message(entry) for entry in entries[:-1]]
            batch.append(entry_to_message(entries[-1], extra))
            store._ensure_lease()  # before the transaction: a renewal never waits on its locks
            try:
                writes = self._write(store, key, app_id, batch, user, seen)
            except (_Moved, UnknownToolCallError):  # a request popped after its lookup too
                continue
            break
        for written, cache_entries, step in writes:
            store._cache_append(written, cache_entries, step)

    def _write(
        self,
        store: MemoryStore,
        key: sdk.SessionKey,
        app_id: str,
        batch: list[Message],
        user: str | None,
        seen: int | None,
    ) -> list[tuple[str, list[Any], Any]]:
        """One transaction of :meth:`_append_sync` (:class:`_Moved`: a row came in after
        ``seen``, nothing written); with a new app, its listing row too."""
        subpath = _subpath(key)
        with app_transaction(store, app_id, "appending session entries") as conn:
            # results name no tool: their requests are looked up, unanswered ones go opaque
            ids, cache_entries, step = insert_messages(conn, store, app_id, batch, user)
            if newest_below(conn, app_id, ids[0]) != seen:
                raise _Moved  # rolls the transaction back
            writes = [(app_id, cache_entries, step)]
            if seen is None:
                if subpath is None:
                    listing = _sessions_app(self.namespace, key["project_key"])
                    item = {"session_id": key["session_id"]}
                else:
                    listing = _subkeys_app(self.namespace, key["project_key"], key["session_id"])
                    item = {"subpath": subpath}
                row = opaque({CATALOG_KEY: item, KEY_KEY: thaw(batch[-1].metadata[KEY_KEY])})
                _, cache_entries, step = insert_messages(conn, store, listing, [row], user)
                writes.append((listing, cache_entries, step))
        return writes

    def _listed(self, listing: str) -> list[tuple[str, StoredMessage]]:
        """The listing app's rows with the item each names (a session id or a subpath)."""
        out = []
        for row in self._access.all_rows(listing):
            item = row.message.metadata.get(CATALOG_KEY)
            if isinstance(item, Mapping):
                name = item.get("session_id", item.get("subpath"))
                if isinstance(name, str):
                    out.append((name, row))
        return out

    def _sessions_sync(
        self, project_key: str, summaries: bool
    ) -> list[tuple[str, int, sdk.SessionSummaryEntry | None]]:
        if not isinstance(project_key, str) or not project_key:
            raise InvalidInputError("project_key must be a non-empty string")
        listed = {
            name: self.app_id({"project_key": project_key, "session_id": name})
            for name, _ in self._listed(_sessions_app(self.namespace, project_key))
        }
        if not listed:
            return []
        store = self._access.sync_store()
        with translated_errors("listing sessions"), store.engine.connect() as conn:
            newest = newest_ids(conn, list(listed.values()))
            rows = rows_by_id(conn, list(newest.values()), store.cipher) if summaries else {}
            out: list[tuple[str, int, sdk.SessionSummaryEntry | None]] = []
            for session_id, app_id in listed.items():
                if app_id not in newest:
                    continue  # deleted (its listing row goes with the delete)
                summary = None
                if summaries:
                    row: StoredMessage | None = rows.get(newest[app_id])
                    if row is None or SUMMARY_KEY not in row.message.metadata:
                        row = _newest_with(conn, app_id, SUMMARY_KEY, store)
                    if row is not None:
                        summary = _summary_of(row)
                        summary["mtime"] = id_timestamp_ms(newest[app_id])
                out.append((session_id, id_timestamp_ms(newest[app_id]), summary))
        return out

    def _subkeys_sync(self, project_key: str, session_id: str) -> list[str]:
        listing = _subkeys_app(self.namespace, project_key, session_id)
        listed = {}
        for name, _ in self._listed(listing):
            key: sdk.SessionKey = {"project_key": project_key, "session_id": session_id}
            key["subpath"] = name
            listed[name] = self.app_id(key)
        if not listed:
            return []
        store = self._access.sync_store()
        with translated_errors("listing subkeys"), store.engine.connect() as conn:
            newest = newest_ids(conn, list(listed.values()))
        return [name for name, app_id in listed.items() if app_id in newest]

    def _unlist(self, listing: str, names: set[str]) -> None:
        """Delete the listing app's rows naming any of ``names``."""
        ids = [row.id for name, row in self._listed(listing) if name in names]
        if not ids:
            return
        store = self._access.sync_store()
        with app_transaction(store, listing, "deleting a session") as conn:
            delete_rows(conn, listing, ids)
        store.memory(listing).invalidate()

    def _delete_sync(self, key: sdk.SessionKey, app_id: str) -> None:
        store = self._access.sync_store()
        project_key, session_id = key["project_key"], key["session_id"]
        subpath = _subpath(key)
        subkeys_app = _subkeys_app(self.namespace, project_key, session_id)
        if subpath is not None:
            store.purge(app_id)
            self._unlist(subkeys_app, {subpath})
            return
        for name, _ in self._listed(subkeys_app):
            sub: sdk.SessionKey = {"project_key": project_key, "session_id": session_id}
            sub["subpath"] = name
            store.purge(self.app_id(sub))
        store.purge(subkeys_app)
        store.purge(app_id)
        self._unlist(_sessions_app(self.namespace, project_key), {session_id})
