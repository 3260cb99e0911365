"""Storage access shared by the framework adapters.

The adapters need a few reads and writes the store API does not offer, and they must run on a
:class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore` from any thread
or event loop. :class:`StoreAccess` gives both as one object::

    access = StoreAccess(store)                   # MemoryStore or AsyncMemoryStore
    rows = access.all_rows("app-1")               # blocking: every row, chronological
    rows = await access.aall_rows("app-1")        # the same from a coroutine

Operations:

* the whole original history, chronological, in keyset pages (:func:`iter_history` on a
  sync engine, :func:`aiter_history` on an async one);
* the newest rows before a row id (``get_items(limit)``);
* appending framework messages whose tool results may answer calls stored earlier
  (:func:`resolve_results`: the tool name is filled in from the request; a result whose
  request does not exist in the app is stored opaquely instead of raising
  :class:`~memstore.errors.UnknownToolCallError`);
* popping the newest row (a hard delete, or a payload update when only part of a row is
  popped), with the window invalidated and the display row removed when it came from that
  row alone.

Each SQL step is written once as a function of a sync ``Connection``; the async path runs the
same function through ``AsyncConnection.run_sync``.

**Event loops.** An ``AsyncMemoryStore``'s engine and Redis client belong to one event loop.
Its home loop is the loop running when an adapter was first built on it, else the first loop
an adapter used it on (recorded per store and never replaced: once that loop is closed, every
call goes through the twin). On its home loop the store is used natively. On any other loop
(``Runner.run_sync`` in another thread, a second ``asyncio.run``) the operation runs in a
worker thread on a synchronous :class:`~memstore.MemoryStore` twin on the same database and
window cache (built once per async store: a sync engine for the same URL, the same in-process
cache object or the same Redis URL). Blocking calls on an async store always use the twin. A
sync ``MemoryStore`` is thread-safe and is used from coroutines through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeGuard, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.cache.aio import AsyncInProcessWindowCache
from memstore.core.crypto import RowCipher
from memstore.core.display import ToolFormatter, display_drafts
from memstore.core.loader import RowRequest
from memstore.core.plans import unanswered_in_batch
from memstore.core.rows import (
    decode_row,
    encode_payload,
    message_type,
    open_content,
    open_payload,
    seal_original,
)
from memstore.core.summary import is_summary
from memstore.core.window import StoredMessage
from memstore.errors import CommitOutcomeUnknownError, ConfigurationError, UnknownToolCallError
from memstore.messages import AiMessage, Message, SystemMessage, ToolRequest, ToolResult
from memstore.shielding import finish
from memstore.sql import generation
from memstore.sql.admin import ROW_PAGE, iter_history
from memstore.sql.engine import (
    is_memory_sqlite,
    sync_url,
    translated_errors,
    write_transaction,
)
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import (
    REQUEST_SCAN_PAGE,
    in_app,
    latest_summary_query,
    newest_rows_query,
    oldest_first_query,
    request_scan_query,
    rows_to_messages,
    window_rows_statement,
)
from memstore.sql.repository import insert_plan
from memstore.sql.schema import display, original
from memstore.store import MemoryStore

T = TypeVar("T")

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from memstore.aio import AsyncMemoryStore

# The async store needs the ``async`` extra: adapters name it lazily (see is_async_store).
Store: TypeAlias = Union[MemoryStore, "AsyncMemoryStore"]
"""What the adapters accept as ``store``."""


@contextmanager
def app_transaction(store: MemoryStore, app_id: str, action: str) -> Iterator[Connection]:
    """One write transaction of an adapter on the app's rows, driver errors translated
    (``action`` names the write). When its commit's outcome is unknown, the app's cached
    window is dropped before :class:`~memstore.errors.CommitOutcomeUnknownError` goes on, as
    for the store's own appends."""
    try:
        with translated_errors(action), write_transaction(store.engine) as conn:
            yield conn
    except CommitOutcomeUnknownError as error:
        error.app_id = app_id
        store.memory(app_id).invalidate()
        raise


@asynccontextmanager
async def aapp_transaction(
    store: AsyncMemoryStore, app_id: str, action: str
) -> AsyncIterator[AsyncConnection]:
    """:func:`app_transaction` on an async store."""
    from memstore.sql.aio import awrite_transaction

    try:
        with translated_errors(action):
            async with awrite_transaction(store.engine) as conn:
                yield conn
    except CommitOutcomeUnknownError as error:
        error.app_id = app_id
        await store.memory(app_id).invalidate()
        raise


def is_async_store(store: object) -> TypeGuard[AsyncMemoryStore]:
    """Whether ``store`` is an :class:`~memstore.aio.AsyncMemoryStore`, without importing
    :mod:`memstore.aio` (which needs the ``async`` extra): no instance can exist before it is
    imported."""
    aio = sys.modules.get("memstore.aio")
    return aio is not None and isinstance(store, aio.AsyncMemoryStore)


Shrink = Callable[[Message], "Message | Literal[False] | None"]
"""Given a row's message, what a pop leaves of the row: ``None`` deletes it, a message replaces
it (part of the row was popped), ``False`` skips it (not the caller's; look at older rows)."""

POP_SCAN_ROWS = 16
"""Rows a pop reads per page while looking for the newest row it does not skip."""

OPAQUE_MARK = "memstore_opaque"
"""``metadata`` key set on opaque rows (:func:`opaque`); adapters skip other adapters' ones."""

DISPLAY_SCAN_ROWS = 16
"""Display rows newer than a popped row that are checked for the one it alone produced."""

__all__ = [
    "OPAQUE_MARK",
    "Store",
    "StoreAccess",
    "aiter_history",
    "iter_history",
    "opaque",
    "resolve_results",
]


def distinct_requests(requests: Iterable[ToolRequest]) -> list[ToolRequest]:
    """The requests with the first of each call id: parallel calls that share an id (some
    OpenAI-compatible servers send ``call_0`` for each) cannot all be answered by id, so an
    adapter keeps the others in its metadata copy only (the framework's message still comes
    back whole)."""
    seen: set[str] = set()
    out: list[ToolRequest] = []
    for request in requests:
        if request.id not in seen:
            seen.add(request.id)
            out.append(request)
    return out


# -- opaque rows -----------------------------------------------------------------------------------


def opaque(metadata: dict[str, Any]) -> SystemMessage:
    """The canonical row of a framework item the canonical model cannot express.

    An empty ``SystemMessage`` carrying the item in ``metadata`` (plus ``OPAQUE_MARK``): it
    round-trips through its adapter, other adapters skip it, it gets no display row, and in a
    window it is an empty system message, which :func:`memstore.core.validate.validate`
    accepts for both providers wherever it stands (an empty AI message would be an Anthropic
    ``empty_content`` violation, and a user message would put words in the user's mouth).
    """
    return SystemMessage(text="", metadata={**metadata, OPAQUE_MARK: True})


def resolve_results(messages: Sequence[Message], stored: Mapping[str, str]) -> list[Message]:
    """Make a batch appendable: every tool result answers a request, or becomes opaque.

    ``stored`` maps the call ids requested by rows already stored for the app to their tool
    names. A result whose ``tool_name`` is ``""`` gets the name of the request it answers (the
    latest earlier one in the batch, else the stored one); a result answering no request is
    replaced by :func:`opaque` with the same metadata.
    """
    names: dict[str, str] = {}
    out: list[Message] = []
    for message in messages:
        if isinstance(message, AiMessage):
            names.update((call.id, call.name) for call in message.tool_requests)
        elif isinstance(message, ToolResult):
            name = names.get(message.id, stored.get(message.id))
            if name is None:
                out.append(opaque(dict(message.metadata)))
                continue
            if not message.tool_name:
                message = message.model_copy(update={"tool_name": name})
        out.append(message)
    return out


def _presumed_requests(messages: Sequence[Message], wanted: set[str]) -> dict[str, str] | None:
    """The stored requests a batch's results can be written against without looking them up.

    ``wanted``: the call ids of results answering no request of the batch. When each such
    result names its tool, the write itself checks that the requests exist (it raises
    :class:`~memstore.errors.UnknownToolCallError` and writes nothing otherwise), so the
    lookup only has to run after that error, to store the unanswered results opaquely: the
    mapping presumes every request found under the result's own name. ``None`` when there is
    nothing to presume (no such result) or a result needs its tool name filled in.
    """
    if not wanted:
        return None
    presumed: dict[str, str] = {}
    for message in messages:
        if isinstance(message, ToolResult) and message.id in wanted:
            if not message.tool_name:
                return None
            presumed[message.id] = message.tool_name
    return presumed


# -- SQL steps (each runs on a sync Connection; async via AsyncConnection.run_sync) ----------------


def _history_page(
    conn: Connection, app_id: str, after: int, page: int, cipher: RowCipher
) -> list[StoredMessage]:
    """One keyset page of the app's rows with ids above ``after``, chronological."""
    query = oldest_first_query(app_id, after, page)
    return rows_to_messages(reversed(conn.execute(query).all()), app_id, cipher)


def _newest_rows(
    conn: Connection, app_id: str, limit: int, before_id: int | None, cipher: RowCipher
) -> list[StoredMessage]:
    statement, params = window_rows_statement(app_id, RowRequest(limit, before_id))
    return rows_to_messages(conn.execute(statement, params), app_id, cipher)


def _newest_rows_and_summary(
    conn: Connection, app_id: str, limit: int, cipher: RowCipher
) -> tuple[list[StoredMessage], StoredMessage | None]:
    """The app's ``limit`` newest rows (summaries left out) and its newest summary row, in
    one statement (the loader's ``UNION ALL`` read)."""
    statement, params = window_rows_statement(app_id, RowRequest(limit, summary=True))
    found = rows_to_messages(conn.execute(statement, params), app_id, cipher)
    summaries = [row for row in found if is_summary(row.message)]
    rows = [row for row in found if not is_summary(row.message)]
    return rows, summaries[-1] if summaries else None


def _latest_summary(conn: Connection, app_id: str, cipher: RowCipher) -> StoredMessage | None:
    """The app's newest summary row (a compaction's), if any."""
    query = latest_summary_query(app_id, payload=True)
    rows = rows_to_messages(conn.execute(query), app_id, cipher)
    return rows[-1] if rows else None


def _requested_tools(
    conn: Connection, app_id: str, call_ids: set[str], cipher: RowCipher
) -> dict[str, str]:
    """Tool names of the stored requests (the newest one per id) among ``call_ids``."""
    found: dict[str, str] = {}
    before: int | None = None
    while len(found) < len(call_ids):
        page = conn.execute(request_scan_query(app_id, before)).all()
        for row in page:
            payload = open_payload(cipher, app_id, row.id, row.payload)
            for call in json.loads(payload).get("tool_requests", []):
                if call["id"] in call_ids:
                    found.setdefault(call["id"], call["name"])
            if len(found) == len(call_ids):  # newest first: the rest of the page is older
                return found
        if len(page) < REQUEST_SCAN_PAGE:
            break
        before = page[-1].id
    return found


@dataclass(frozen=True, slots=True)
class _PopAttempt:
    done: bool
    """False when another writer changed the newest row first (retry in a new transaction)."""
    popped: StoredMessage | None = None


def _pop_once(
    conn: Connection,
    app_id: str,
    shrink: Shrink,
    formatters: Mapping[str, ToolFormatter],
    cipher: RowCipher,
) -> _PopAttempt:
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
                    return _PopAttempt(done=False)
                _delete_own_display_row(conn, app_id, row, formatters, cipher)
                return _PopAttempt(done=True, popped=row)
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
                return _PopAttempt(done=False)
            return _PopAttempt(done=True, popped=row)
        if len(page) < POP_SCAN_ROWS:
            return _PopAttempt(done=True)
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


def _append_once(
    store: MemoryStore, app_id: str, messages: list[Message], user_id: str | None
) -> list[int]:
    """``store.append``, settling a commit whose outcome is unknown with one retry through the
    error (``retry_of``): the messages are stored exactly once or the error goes on."""
    try:
        return store.append(app_id, messages, user_id=user_id)
    except CommitOutcomeUnknownError as doubt:
        return store.append(app_id, messages, user_id=user_id, retry_of=doubt)


async def _aappend_once(
    store: AsyncMemoryStore, app_id: str, messages: list[Message], user_id: str | None
) -> list[int]:
    """:func:`_append_once` on an async store."""
    try:
        return await store.append(app_id, messages, user_id=user_id)
    except CommitOutcomeUnknownError as doubt:
        return await store.append(app_id, messages, user_id=user_id, retry_of=doubt)


def insert_messages(
    conn: Connection,
    store: MemoryStore,
    app_id: str,
    batch: Sequence[Message],
    user_id: str | None,
    *,
    presume: bool = False,
) -> tuple[list[int], list[Any], GenerationStep | None]:
    """Insert ``batch`` (both histories) in the caller's transaction, after
    :func:`resolve_results`; return the row ids, the entries for the cached window and the
    write's generation step (to hand to ``store._cache_append`` once the transaction
    committed; ``None`` when nothing was written).

    With ``presume``, results that name their tool are written against their requests without
    looking them up first (:func:`_presumed_requests`): the insert still checks that the
    requests exist and raises :class:`~memstore.errors.UnknownToolCallError` if one does not;
    the caller then rolls back and writes again without ``presume``, which stores such
    results opaquely.

    Call ``store._ensure_lease()`` before opening the transaction: claiming or renewing a
    leased worker id needs its own connection, which would wait on this transaction's locks.
    """
    wanted = unanswered_in_batch(batch)
    presumed = _presumed_requests(batch, wanted) if presume else None
    if presumed is not None:
        stored = presumed
    else:
        stored = _requested_tools(conn, app_id, wanted, store.cipher) if wanted else {}
    resolved = resolve_results(batch, stored)
    plan = store._plan(app_id, user_id, resolved, display_drafts(resolved, store.formatters))
    if not plan.id_count:
        return [], [], None
    entries = store._counted(
        plan.cache_entries
    )  # before the insert: a failing counter writes nothing
    ids, step = insert_plan(conn, app_id, plan, store._issue_ids, store.cipher)
    return ids, entries, step


# -- async keyset paging ---------------------------------------------------------------------------


async def aiter_history(
    store: AsyncMemoryStore, app_id: str, page: int = ROW_PAGE
) -> AsyncIterator[StoredMessage]:
    """Every non-deleted original row of the app in id order (the async :func:`iter_history`)."""
    after = -1
    while True:
        with translated_errors("reading history"):
            async with store.engine.connect() as conn:
                rows = await conn.run_sync(_history_page, app_id, after, page, store.cipher)
        for row in rows:
            yield row
        if len(rows) < page:
            return
        after = rows[-1].id


# -- event loops -----------------------------------------------------------------------------------

_REGISTRY_LOCK = threading.Lock()
_HOME_LOOPS: weakref.WeakKeyDictionary[
    AsyncMemoryStore, weakref.ReferenceType[asyncio.AbstractEventLoop]
] = weakref.WeakKeyDictionary()
_TWINS: weakref.WeakKeyDictionary[AsyncMemoryStore, MemoryStore] = weakref.WeakKeyDictionary()


def claim_home_loop(store: AsyncMemoryStore) -> None:
    """Make the running loop ``store``'s home loop unless it already has one (or none runs)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    with _REGISTRY_LOCK:
        _HOME_LOOPS.setdefault(store, weakref.ref(loop))


def _on_home_loop(store: AsyncMemoryStore) -> bool:
    """True when the running loop is ``store``'s home loop (claimed here when it has none).

    A home loop that was closed or collected is never replaced: the store's pooled
    connections belong to it, so every later call goes through the twin.
    """
    loop = asyncio.get_running_loop()
    with _REGISTRY_LOCK:
        home = _HOME_LOOPS.get(store)
        if home is None:
            _HOME_LOOPS[store] = weakref.ref(loop)
            return True
        return home() is loop


def sync_twin(store: AsyncMemoryStore) -> MemoryStore:
    """The synchronous store on ``store``'s database and window cache (built once per store).
    It closes when ``store`` closes; a ``store`` collected without being closed abandons it
    (its connections closed from a daemon thread, its lease left to expire: no SQL on the
    collecting thread).

    Raises :class:`~memstore.errors.ConfigurationError` when no twin can share the data: an
    in-memory SQLite database (private to its connection), or a custom async cache that is
    neither in-process nor reachable through ``settings.redis_url``.
    """
    with _REGISTRY_LOCK:
        twin = _TWINS.get(store)
        if twin is not None:
            return twin
        url = store.engine.url
        if is_memory_sqlite(url):
            raise ConfigurationError(
                "this AsyncMemoryStore uses an in-memory SQLite database, which only its own "
                "event loop can reach; use a file database, or pass a MemoryStore"
            )
        settings = store.settings.model_copy(
            update={"database_url": sync_url(url).render_as_string(hide_password=False)}
        )
        if isinstance(store.cache, AsyncInProcessWindowCache):
            # The async in-process cache wraps a thread-safe sync one: share it, so both
            # stores see one window per app.
            twin = MemoryStore(settings, cache=store.cache._cache)
        elif store.settings.redis_url:
            twin = MemoryStore(settings)
        else:
            raise ConfigurationError(
                "this AsyncMemoryStore's window cache was passed in and settings.redis_url is "
                "unset, so a blocking or other-loop call could not keep that cache current; "
                "build the store from Settings(redis_url=...), or use it on one event loop"
            )
        twin._formatters = store._formatters  # one registry: display rows agree
        _TWINS[store] = twin
        store._on_close(twin.close)
        # a store nobody closes: no SQL from the collecting thread (maybe an event loop's); the
        # twin's lease expires by itself
        weakref.finalize(store, twin._abandon)
        return twin


# -- the access object -----------------------------------------------------------------------------


class StoreAccess:
    """The adapters' view of one store: each operation blocking and as a coroutine.

    Args:
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`.

    Coroutines use an ``AsyncMemoryStore`` natively on its home loop, and otherwise run the
    blocking operation in a worker thread (see the module docstring).
    """

    def __init__(self, store: Store) -> None:
        if not isinstance(store, MemoryStore) and not is_async_store(store):
            raise ConfigurationError(
                f"store must be a MemoryStore or an AsyncMemoryStore, got {type(store).__name__}"
            )
        self.store = store
        if is_async_store(store):
            claim_home_loop(store)

    @property
    def formatters(self) -> Mapping[str, ToolFormatter]:
        return self.store.formatters

    def sync_store(self) -> MemoryStore:
        """The store blocking calls use: the sync store itself, or the async store's twin."""
        if isinstance(self.store, MemoryStore):
            return self.store
        return sync_twin(self.store)

    def _native(self) -> AsyncMemoryStore | None:
        store = self.store
        if is_async_store(store) and _on_home_loop(store):
            return store
        return None

    # -- blocking ------------------------------------------------------------------------------

    def all_rows(self, app_id: str) -> list[StoredMessage]:
        """Every row of the app, chronological (keyset pages of ``ROW_PAGE`` rows)."""
        store = self.sync_store()
        return list(iter_history(store.engine, app_id, store.cipher))

    def newest_rows(self, app_id: str, limit: int, before_id: int | None) -> list[StoredMessage]:
        """Up to ``limit`` newest rows with ids below ``before_id``, chronological."""
        store = self.sync_store()
        with translated_errors("reading history"), store.engine.connect() as conn:
            return _newest_rows(conn, app_id, limit, before_id, store.cipher)

    def newest_rows_and_summary(
        self, app_id: str, limit: int
    ) -> tuple[list[StoredMessage], StoredMessage | None]:
        """Up to ``limit`` newest rows (summaries left out), chronological, and the app's
        newest summary row, in one read."""
        store = self.sync_store()
        with translated_errors("reading history"), store.engine.connect() as conn:
            return _newest_rows_and_summary(conn, app_id, limit, store.cipher)

    def latest_summary(self, app_id: str) -> StoredMessage | None:
        """The app's newest summary row (``None``: never compacted)."""
        store = self.sync_store()
        with translated_errors("reading history"), store.engine.connect() as conn:
            return _latest_summary(conn, app_id, store.cipher)

    def window(self, app_id: str, max_messages: int | None) -> list[Message]:
        """The cached window, or with ``max_messages`` the window loaded from SQL."""
        store = self.sync_store()
        if max_messages is None:
            return store.memory(app_id).messages()
        return store.load_window(app_id, max_messages)

    def append(
        self, app_id: str, messages: Sequence[Message], user_id: str | None = None
    ) -> list[int]:
        """Append ``messages`` after :func:`resolve_results` (one transaction)."""
        store = self.sync_store()
        wanted = unanswered_in_batch(messages)
        presumed = _presumed_requests(messages, wanted)
        if presumed is not None:
            try:
                return _append_once(store, app_id, resolve_results(messages, presumed), user_id)
            except UnknownToolCallError:
                pass  # a request is missing: look them up, answer the missing ones opaquely
        for attempt in range(2):
            stored = self._sync_requested(store, app_id, wanted) if wanted else {}
            try:
                return _append_once(store, app_id, resolve_results(messages, stored), user_id)
            except UnknownToolCallError:
                if attempt:  # the request was popped or purged after the lookup: look again
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def _sync_requested(store: MemoryStore, app_id: str, call_ids: set[str]) -> dict[str, str]:
        with translated_errors("reading tool requests"), store.engine.connect() as conn:
            return _requested_tools(conn, app_id, call_ids, store.cipher)

    def purge(self, app_id: str) -> None:
        self.sync_store().purge(app_id)

    def pop(self, app_id: str, shrink: Shrink) -> StoredMessage | None:
        """Pop the newest row (see :func:`_pop_once`), then drop the app's cached window."""
        store = self.sync_store()
        while True:
            with app_transaction(store, app_id, "popping the newest message") as conn:
                attempt = _pop_once(conn, app_id, shrink, store.formatters, store.cipher)
            if attempt.done:
                break
        if attempt.popped is not None:
            store.memory(app_id).invalidate()
        return attempt.popped

    # -- coroutines ----------------------------------------------------------------------------

    async def aall_rows(self, app_id: str) -> list[StoredMessage]:
        store = self._native()
        if store is None:
            return await asyncio.to_thread(self.all_rows, app_id)
        return [row async for row in aiter_history(store, app_id)]

    async def anewest_rows(
        self, app_id: str, limit: int, before_id: int | None
    ) -> list[StoredMessage]:
        store = self._native()
        if store is None:
            return await asyncio.to_thread(self.newest_rows, app_id, limit, before_id)
        with translated_errors("reading history"):
            async with store.engine.connect() as conn:
                return await conn.run_sync(_newest_rows, app_id, limit, before_id, store.cipher)

    async def anewest_rows_and_summary(
        self, app_id: str, limit: int
    ) -> tuple[list[StoredMessage], StoredMessage | None]:
        store = self._native()
        if store is None:
            return await asyncio.to_thread(self.newest_rows_and_summary, app_id, limit)
        with translated_errors("reading history"):
            async with store.engine.connect() as conn:
                return await conn.run_sync(_newest_rows_and_summary, app_id, limit, store.cipher)

    async def alatest_summary(self, app_id: str) -> StoredMessage | None:
        store = self._native()
        if store is None:
            return await asyncio.to_thread(self.latest_summary, app_id)
        with translated_errors("reading history"):
            async with store.engine.connect() as conn:
                return await conn.run_sync(_latest_summary, app_id, store.cipher)

    async def awindow(self, app_id: str, max_messages: int | None) -> list[Message]:
        store = self._native()
        if store is None:
            return await asyncio.to_thread(self.window, app_id, max_messages)
        if max_messages is None:
            return await store.memory(app_id).messages()
        return await store.load_window(app_id, max_messages)

    async def aappend(
        self, app_id: str, messages: Sequence[Message], user_id: str | None = None
    ) -> list[int]:
        store = self._native()
        if store is None:
            return await finish(asyncio.to_thread(self.append, app_id, messages, user_id))
        return await finish(self._aappend(store, app_id, messages, user_id))

    async def _aappend(
        self,
        store: AsyncMemoryStore,
        app_id: str,
        messages: Sequence[Message],
        user_id: str | None,
    ) -> list[int]:
        wanted = unanswered_in_batch(messages)
        presumed = _presumed_requests(messages, wanted)
        if presumed is not None:
            try:
                return await _aappend_once(
                    store, app_id, resolve_results(messages, presumed), user_id
                )
            except UnknownToolCallError:
                pass  # as in append: look the requests up
        for attempt in range(2):
            stored: dict[str, str] = {}
            if wanted:
                with translated_errors("reading tool requests"):
                    async with store.engine.connect() as conn:
                        stored = await conn.run_sync(_requested_tools, app_id, wanted, store.cipher)
            try:
                return await _aappend_once(
                    store, app_id, resolve_results(messages, stored), user_id
                )
            except UnknownToolCallError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def apurge(self, app_id: str) -> None:
        store = self._native()
        if store is None:
            await finish(asyncio.to_thread(self.purge, app_id))
            return
        await finish(store.purge(app_id))

    async def apop(self, app_id: str, shrink: Shrink) -> StoredMessage | None:
        store = self._native()
        if store is None:
            return await finish(asyncio.to_thread(self.pop, app_id, shrink))
        return await finish(self._apop(store, app_id, shrink))

    @staticmethod
    async def _apop(store: AsyncMemoryStore, app_id: str, shrink: Shrink) -> StoredMessage | None:
        while True:
            async with aapp_transaction(store, app_id, "popping the newest message") as conn:
                attempt = await conn.run_sync(
                    _pop_once, app_id, shrink, dict(store.formatters), store.cipher
                )
            if attempt.done:
                break
        if attempt.popped is not None:
            await store.memory(app_id).invalidate()
        return attempt.popped
