"""Which LangChain messages an app's rows already hold, decided from the rows themselves.

:class:`~memstore.adapters.langgraph.MemstoreMirrorSaver` sees the whole ``messages`` list of
a graph's state at every checkpoint and must store each message once, even across restarts
and replicas: a trimmed state (``RemoveMessage``) keeps old messages whose rows are far from
the app's newest ones, and another process may have stored any of them.

The durable record is the rows: each row written through LangChain carries its message id in
``metadata["langchain_message"]``. A :class:`MirrorLedger` holds, per app, the ids of the
app's rows up to a row id (its *mark*). It is filled once per app by reading the whole
history (the first time the process meets the app), then kept current by the writes:

* a write inserts the pending messages (both histories, in one transaction) and, in the same
  transaction, reads the rows between the mark and its own new rows. Writers of one app take
  turns on its generation row and issue ids above the app's newest row
  (:func:`memstore.sql.repository.insert_plan`), so those are exactly the rows other writers
  committed since the ledger last looked;
* if one of them holds a message of the batch (another replica stored it meanwhile) the
  transaction rolls back, their ids join the ledger, and the batch is recomputed; otherwise it
  commits and the mark moves to the new rows.

A popped or purged row's id stays in a ledger until the app is forgotten
(:meth:`MirrorLedger.forget`, by ``delete_thread``) or evicted (least recently used beyond
``max_apps`` apps).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memstore.extras import needs_extra

with needs_extra("memstore.adapters.langgraph.MemstoreMirrorSaver", "langchain"):
    from langchain_core.messages import BaseMessage

from memstore.adapters._history import (
    StoreAccess,
    aapp_transaction,
    app_transaction,
    insert_messages,
    is_async_store,
)
from memstore.adapters._lc_convert import to_canonical
from memstore.adapters._lc_pending import pending, stored_message_ids
from memstore.core.crypto import RowCipher
from memstore.core.steps import adrive, drive
from memstore.core.window import StoredMessage
from memstore.errors import IdCollisionError, UnknownToolCallError, WorkerLeaseLostError
from memstore.shielding import finish
from memstore.sql.admin import ROW_PAGE
from memstore.sql.engine import translated_errors
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import in_app, oldest_first_query, rows_to_messages
from memstore.sql.schema import original
from memstore.store_reads import Steps
from memstore.store_writes import acall, call

MIRROR_APPS = 1024
"""Apps a ledger keeps by default (least recently mirrored ones are read again when met)."""

__all__ = ["MIRROR_APPS", "MirrorLedger", "amirror", "mirror"]


@dataclass(slots=True)
class _Seen:
    ids: set[str] = field(default_factory=set)
    mark: int = -1
    """Every row of the app with an id up to ``mark`` is in ``ids`` (-1: none read)."""


class MirrorLedger:
    """Per app, the LangChain ids its rows hold up to a row id (thread-safe, LRU-bounded)."""

    def __init__(self, max_apps: int = MIRROR_APPS) -> None:
        self.max_apps = max_apps
        self._apps: OrderedDict[str, _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def snapshot(self, app_id: str) -> tuple[frozenset[str], int] | None:
        """The app's known ids and mark; ``None`` when the app was never read."""
        with self._lock:
            seen = self._apps.get(app_id)
            if seen is None:
                return None
            self._apps.move_to_end(app_id)
            return frozenset(seen.ids), seen.mark

    def record(
        self,
        app_id: str,
        rows: Sequence[StoredMessage],
        mark: int,
        written: Sequence[BaseMessage] = (),
    ) -> None:
        """Every row of the app up to ``mark`` that is not known yet is in ``rows`` or is one
        of the ``written`` messages."""
        with self._lock:
            seen = self._apps.get(app_id)
            if seen is None:
                seen = self._apps[app_id] = _Seen()
            seen.ids |= stored_message_ids(rows)
            seen.ids.update(m.id for m in written if m.id is not None)
            seen.mark = max(seen.mark, mark)
            self._apps.move_to_end(app_id)
            while len(self._apps) > self.max_apps:
                self._apps.popitem(last=False)

    def forget(self, app_id: str) -> None:
        with self._lock:
            self._apps.pop(app_id, None)


class _Raced(Exception):
    """Another writer stored a message of the batch after the ledger last looked."""

    def __init__(self, rows: list[StoredMessage]) -> None:
        super().__init__("raced")
        self.rows = rows


_Written = tuple[list[int], list[Any], GenerationStep | None, list[StoredMessage]]
"""What a mirroring insert wrote: row ids, window entries, generation step, and the rows other
writers committed since the mark."""


# -- SQL steps (sync Connection; the async path runs them through run_sync) ------------------------


def _rows_after(conn: Connection, app_id: str, mark: int, cipher: RowCipher) -> list[StoredMessage]:
    """The app's rows with ids above ``mark``, chronological (keyset pages)."""
    out: list[StoredMessage] = []
    while True:
        page = conn.execute(oldest_first_query(app_id, mark, ROW_PAGE)).all()
        out.extend(rows_to_messages(page, app_id, cipher))
        if len(page) < ROW_PAGE:
            return out
        mark = max(row.id for row in page)


def _insert_checked(
    conn: Connection,
    store: Any,
    app_id: str,
    user_id: str | None,
    batch: Sequence[BaseMessage],
    mark: int,
    presume: bool,
) -> _Written:
    """Insert ``batch``, then read the rows others committed since ``mark`` (see the module
    docstring); raise :class:`_Raced` (rolling the insert back) when one holds a message of
    the batch. ``store`` is a :class:`~memstore.MemoryStore` or an ``AsyncMemoryStore`` (their
    planning and id issuing is the shared ``StoreBase``'s)."""
    canonical = [to_canonical(message) for message in batch]
    ids, entries, step = insert_messages(conn, store, app_id, canonical, user_id, presume=presume)
    if not ids:
        return ids, entries, step, []
    # a locking read: MySQL's repeatable-read snapshot may predate the generation lock
    query = (
        sa.select(original.c.id, original.c.payload)
        .where(
            in_app(original, app_id),
            original.c.is_deleted == sa.false(),
            original.c.id > mark,
            original.c.id < ids[0],
        )
        .with_for_update()
    )
    others = rows_to_messages(conn.execute(query).all(), app_id, store.cipher)
    wanted = {message.id for message in batch if message.id is not None}
    if stored_message_ids(others) & wanted:
        raise _Raced(others)
    return ids, entries, step, others


# -- the mirror, decided once ----------------------------------------------------------------------


def _write_steps(
    store: Any,
    ledger: MirrorLedger,
    app_id: str,
    batch: Sequence[BaseMessage],
    mark: int,
    insert: Callable[[bool], Any],
) -> Steps[None]:
    """Write ``batch`` in one transaction (``insert(presume)`` runs :func:`_insert_checked`
    in one), retrying as the store's own writes do; then the cache and the ledger."""
    attempt = 0
    presume = True
    while True:
        attempt += 1
        yield store._ensure_lease  # before the transaction: a renewal never waits on its locks
        try:
            written: _Written = yield partial(insert, presume)
        except UnknownToolCallError:
            if not presume:
                raise
            presume = False  # a result's call is not stored: write it opaquely
            continue
        except (IdCollisionError, WorkerLeaseLostError) as error:
            store._retry_write(attempt, error)
            continue
        ids, entries, step, others = written
        yield partial(store._cache_append, app_id, entries, step)
        ledger.record(app_id, others, ids[-1] if ids else mark, batch)
        return


def _mirror_steps(
    ledger: MirrorLedger,
    app_id: str,
    messages: Sequence[BaseMessage],
    read_all: Callable[[], Any],
    write: Callable[[Sequence[BaseMessage], int], Any],
) -> Steps[None]:
    """Store the messages the app's rows do not hold yet: ``read_all()`` reads every row of
    the app, ``write(batch, mark)`` runs :func:`_write_steps` to its end."""
    while True:
        known = ledger.snapshot(app_id)
        if known is None:  # first meeting with the app in this process
            rows: list[StoredMessage] = yield read_all
            ledger.record(app_id, rows, max((row.id for row in rows), default=-1))
            continue
        batch = pending(messages, known[0])
        if not batch:
            return
        try:
            yield partial(write, batch, known[1])
            return
        except _Raced as raced:  # another writer stored part of the batch: learn it, recompute
            ledger.record(app_id, raced.rows, max(row.id for row in raced.rows))


# -- blocking --------------------------------------------------------------------------------------


def mirror(
    access: StoreAccess,
    ledger: MirrorLedger,
    app_id: str,
    user_id: str | None,
    messages: Sequence[BaseMessage],
) -> None:
    """Store the messages of a graph state that the app's rows do not hold yet, in the order
    :func:`~memstore.adapters._lc_pending.pending` gives, each exactly once."""
    store = access.sync_store()
    read_all = partial(access._read, _rows_after, app_id, -1)

    def insert(batch: Sequence[BaseMessage], mark: int, presume: bool) -> _Written:
        with app_transaction(store, app_id, "mirroring messages") as conn:
            return _insert_checked(conn, store, app_id, user_id, batch, mark, presume)

    def write(batch: Sequence[BaseMessage], mark: int) -> None:
        steps = _write_steps(store, ledger, app_id, batch, mark, partial(insert, batch, mark))
        drive(steps, call)

    drive(_mirror_steps(ledger, app_id, messages, read_all, write), call)


# -- coroutines ------------------------------------------------------------------------------------


async def amirror(
    access: StoreAccess,
    ledger: MirrorLedger,
    app_id: str,
    user_id: str | None,
    messages: Sequence[BaseMessage],
) -> None:
    """:func:`mirror` as a coroutine: natively on an ``AsyncMemoryStore``'s home loop, else
    in a worker thread."""
    native = access._native() if is_async_store(access.store) else None
    if native is None:
        await finish(asyncio.to_thread(mirror, access, ledger, app_id, user_id, messages))
        return
    store = native

    async def read_all() -> list[StoredMessage]:
        with translated_errors("reading history"):
            async with store.engine.connect() as conn:
                return await conn.run_sync(_rows_after, app_id, -1, store.cipher)

    async def insert(batch: Sequence[BaseMessage], mark: int, presume: bool) -> _Written:
        async with aapp_transaction(store, app_id, "mirroring messages") as conn:
            return await conn.run_sync(
                _insert_checked, store, app_id, user_id, batch, mark, presume
            )

    async def write(batch: Sequence[BaseMessage], mark: int) -> None:
        steps = _write_steps(store, ledger, app_id, batch, mark, partial(insert, batch, mark))
        await finish(adrive(steps, acall))

    await adrive(_mirror_steps(ledger, app_id, messages, read_all, write), acall)
