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
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, Union

from sqlalchemy.engine import Connection

from memstore.adapters._batch import (
    OPAQUE_MARK,
    distinct_requests,
    opaque,
    presumed_requests,
    resolve_results,
)
from memstore.adapters._loops import claim_home_loop, is_async_store, on_home_loop, sync_twin
from memstore.adapters._row_steps import (
    DISPLAY_SCAN_ROWS,
    POP_SCAN_ROWS,
    PopAttempt,
    Shrink,
    history_page,
    pop_newest,
    read_latest_summary,
    read_newest,
    read_newest_and_summary,
)
from memstore.core.crypto import RowCipher
from memstore.core.display import ToolFormatter, display_drafts
from memstore.core.plans import unanswered_in_batch
from memstore.core.rows import open_payload
from memstore.core.steps import adrive, drive
from memstore.core.window import StoredMessage
from memstore.errors import CommitOutcomeUnknownError, ConfigurationError, UnknownToolCallError
from memstore.messages import Message
from memstore.shielding import finish
from memstore.sql.admin import ROW_PAGE, iter_history
from memstore.sql.engine import translated_errors, write_transaction
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import REQUEST_SCAN_PAGE, request_scan_query
from memstore.sql.repository import insert_plan
from memstore.store import MemoryStore
from memstore.store_reads import Steps
from memstore.store_writes import acall, call

T = TypeVar("T")

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from memstore.aio import AsyncMemoryStore

# The async store needs the ``async`` extra: adapters name it lazily (see is_async_store).
Store: TypeAlias = Union[MemoryStore, "AsyncMemoryStore"]
"""What the adapters accept as ``store``."""

__all__ = [
    "DISPLAY_SCAN_ROWS",
    "OPAQUE_MARK",
    "POP_SCAN_ROWS",
    "Shrink",
    "Store",
    "StoreAccess",
    "aiter_history",
    "claim_home_loop",
    "distinct_requests",
    "is_async_store",
    "iter_history",
    "opaque",
    "resolve_results",
    "sync_twin",
]


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
            for request in json.loads(payload).get("tool_requests", []):
                if request["id"] in call_ids:
                    found.setdefault(request["id"], request["name"])
            if len(found) == len(call_ids):  # newest first: the rest of the page is older
                return found
        if len(page) < REQUEST_SCAN_PAGE:
            break
        before = page[-1].id
    return found


def _append_once_steps(
    store: Store, app_id: str, messages: list[Message], user_id: str | None
) -> Steps[list[int]]:
    """``store.append``, settling a commit whose outcome is unknown with one retry through the
    error (``retry_of``): the messages are stored exactly once or the error goes on."""
    try:
        ids: list[int] = yield partial(store.append, app_id, messages, user_id=user_id)
    except CommitOutcomeUnknownError as doubt:
        ids = yield partial(store.append, app_id, messages, user_id=user_id, retry_of=doubt)
    return ids


def _append_steps(
    store: Store,
    app_id: str,
    messages: Sequence[Message],
    user_id: str | None,
    requested: Callable[[set[str]], Any],
) -> Steps[list[int]]:
    """Append ``messages`` after :func:`resolve_results`; ``requested(call_ids)`` is the step
    that looks the stored requests up (:func:`_requested_tools`)."""
    wanted = unanswered_in_batch(messages)
    presumed = presumed_requests(messages, wanted)
    if presumed is not None:
        try:
            return (
                yield from _append_once_steps(
                    store, app_id, resolve_results(messages, presumed), user_id
                )
            )
        except UnknownToolCallError:
            pass  # a request is missing: look them up, answer the missing ones opaquely
    for attempt in range(2):
        stored: dict[str, str] = (yield partial(requested, wanted)) if wanted else {}
        try:
            return (
                yield from _append_once_steps(
                    store, app_id, resolve_results(messages, stored), user_id
                )
            )
        except UnknownToolCallError:
            if attempt:  # the request was popped or purged after the lookup: look again
                raise
    raise AssertionError("unreachable")


def _pop_steps(
    store: Store, app_id: str, pop_once: Callable[[], Any]
) -> Steps[StoredMessage | None]:
    """Pop the newest row (``pop_once``: one transaction of :func:`pop_newest`, again while
    another writer changed the row first), then drop the app's cached window."""
    while True:
        attempt: PopAttempt = yield pop_once
        if attempt.done:
            break
    if attempt.popped is not None:
        yield store.memory(app_id).invalidate
    return attempt.popped


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
    looking them up first (:func:`presumed_requests`): the insert still checks that the
    requests exist and raises :class:`~memstore.errors.UnknownToolCallError` if one does not;
    the caller then rolls back and writes again without ``presume``, which stores such
    results opaquely.

    Call ``store._ensure_lease()`` before opening the transaction: claiming or renewing a
    leased worker id needs its own connection, which would wait on this transaction's locks.
    """
    wanted = unanswered_in_batch(batch)
    presumed = presumed_requests(batch, wanted) if presume else None
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
                rows = await conn.run_sync(history_page, app_id, after, page, store.cipher)
        for row in rows:
            yield row
        if len(rows) < page:
            return
        after = rows[-1].id


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
        if is_async_store(store) and on_home_loop(store):
            return store
        return None

    # -- blocking ------------------------------------------------------------------------------

    def _read(self, read: Callable[..., T], *args: Any) -> T:
        """``read(conn, *args, cipher)`` on a connection of the blocking store."""
        store = self.sync_store()
        with translated_errors("reading history"), store.engine.connect() as conn:
            return read(conn, *args, store.cipher)

    def all_rows(self, app_id: str) -> list[StoredMessage]:
        """Every row of the app, chronological (keyset pages of ``ROW_PAGE`` rows)."""
        store = self.sync_store()
        return list(iter_history(store.engine, app_id, store.cipher))

    def newest_rows(self, app_id: str, limit: int, before_id: int | None) -> list[StoredMessage]:
        """Up to ``limit`` newest rows with ids below ``before_id``, chronological."""
        return self._read(read_newest, app_id, limit, before_id)

    def newest_rows_and_summary(
        self, app_id: str, limit: int
    ) -> tuple[list[StoredMessage], StoredMessage | None]:
        """Up to ``limit`` newest rows (summaries left out), chronological, and the app's
        newest summary row, in one read."""
        return self._read(read_newest_and_summary, app_id, limit)

    def latest_summary(self, app_id: str) -> StoredMessage | None:
        """The app's newest summary row (``None``: never compacted)."""
        return self._read(read_latest_summary, app_id)

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
        requested = partial(self._sync_requested, store, app_id)
        return drive(_append_steps(store, app_id, messages, user_id, requested), call)

    @staticmethod
    def _sync_requested(store: MemoryStore, app_id: str, call_ids: set[str]) -> dict[str, str]:
        with translated_errors("reading tool requests"), store.engine.connect() as conn:
            return _requested_tools(conn, app_id, call_ids, store.cipher)

    def purge(self, app_id: str) -> None:
        self.sync_store().purge(app_id)

    def pop(self, app_id: str, shrink: Shrink) -> StoredMessage | None:
        """Pop the newest row (see :func:`pop_newest`), then drop the app's cached window."""
        store = self.sync_store()

        def pop_once() -> PopAttempt:
            with app_transaction(store, app_id, "popping the newest message") as conn:
                return pop_newest(conn, app_id, shrink, store.formatters, store.cipher)

        return drive(_pop_steps(store, app_id, pop_once), call)

    # -- coroutines ----------------------------------------------------------------------------

    async def _aread(self, blocking: Callable[..., T], read: Callable[..., T], *args: Any) -> T:
        """:meth:`_read` natively on the async store's home loop, else ``blocking(*args)`` in
        a worker thread."""
        store = self._native()
        if store is None:
            return await asyncio.to_thread(blocking, *args)
        with translated_errors("reading history"):
            async with store.engine.connect() as conn:
                return await conn.run_sync(read, *args, store.cipher)

    async def aall_rows(self, app_id: str) -> list[StoredMessage]:
        store = self._native()
        if store is None:
            return await asyncio.to_thread(self.all_rows, app_id)
        return [row async for row in aiter_history(store, app_id)]

    async def anewest_rows(
        self, app_id: str, limit: int, before_id: int | None
    ) -> list[StoredMessage]:
        return await self._aread(self.newest_rows, read_newest, app_id, limit, before_id)

    async def anewest_rows_and_summary(
        self, app_id: str, limit: int
    ) -> tuple[list[StoredMessage], StoredMessage | None]:
        return await self._aread(
            self.newest_rows_and_summary, read_newest_and_summary, app_id, limit
        )

    async def alatest_summary(self, app_id: str) -> StoredMessage | None:
        return await self._aread(self.latest_summary, read_latest_summary, app_id)

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
        requested = partial(_arequested, store, app_id)
        steps = _append_steps(store, app_id, messages, user_id, requested)
        return await finish(adrive(steps, acall))

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
        native = store

        async def pop_once() -> PopAttempt:
            async with aapp_transaction(native, app_id, "popping the newest message") as conn:
                return await conn.run_sync(
                    pop_newest, app_id, shrink, dict(native.formatters), native.cipher
                )

        return await finish(adrive(_pop_steps(store, app_id, pop_once), acall))


async def _arequested(store: AsyncMemoryStore, app_id: str, call_ids: set[str]) -> dict[str, str]:
    """:meth:`StoreAccess._sync_requested` on an async store."""
    with translated_errors("reading tool requests"):
        async with store.engine.connect() as conn:
            return await conn.run_sync(_requested_tools, app_id, call_ids, store.cipher)
