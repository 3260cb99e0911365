"""Window reads of the async store on a SQLite file, run on the event loop when they need
not wait.

aiosqlite runs every call on a thread of its own; handing a read there and its rows back
costs two thread switches (~75 µs on a 2-vCPU host), more than reading a 50-message window
from SQLite's page cache (~40 µs). So the async store first tries the read on a read-only
``sqlite3`` connection of the calling thread that never waits for a lock (busy timeout 0):
a WAL reader takes no lock a writer holds, so this nearly always succeeds at once. When the
read would wait (another connection holds the database exclusively, a recovery runs), or
fails in any other way, it is handed to aiosqlite as before, where the busy timeout applies
and errors become the store's typed errors; the event loop never waits on another
connection. Databases in memory are never read this way (another connection would open
another, empty database). ``Settings.async_sqlite_inline_reads=False`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memstore.sql.engine import is_memory_sqlite
from memstore.sql.fastread import Statement, sqlite_reads

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


class _ThreadConnection:
    """One thread's read connection, closed when the thread ends (the thread-local holder
    goes; a ``sqlite3.Connection`` is in a reference cycle with its statement cache, so
    without this it would stay open until a garbage collection)."""

    __slots__ = ("__weakref__", "connection", "pid")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.pid = os.getpid()

    def close(self) -> None:
        """Close the connection, unless this process inherited it over a fork (the parent
        still uses it: SQLite connections must not be touched across a fork)."""
        if self.pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                self.connection.close()

    def __del__(self) -> None:
        self.close()


class InlineSqliteReads:
    """Read-only SQLite connections, one per thread, that run a window read without ever
    waiting (see the module docstring). :meth:`read` returns ``None`` when the caller must
    take its usual path."""

    def __init__(self, database: str, connect_options: dict[str, Any]) -> None:
        self._database = database
        self._options = {
            **connect_options,
            "timeout": 0,
            "isolation_level": None,  # autocommit: sqlite_reads opens its own snapshot
            "check_same_thread": False,  # close() may run on another thread
        }
        self._local = threading.local()
        self._opened: weakref.WeakSet[_ThreadConnection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        self.served = 0
        """Reads run here."""
        self.passed_on = 0
        """Reads handed back to the caller (they would have waited, or failed)."""

    @classmethod
    def for_engine(cls, engine: AsyncEngine) -> InlineSqliteReads | None:
        """Inline reads for the database of ``engine`` (aiosqlite on a file), else ``None``."""
        dialect = engine.dialect
        if dialect.name != "sqlite" or dialect.driver != "aiosqlite":
            return None
        if is_memory_sqlite(engine.url):
            return None
        args, options = dialect.create_connect_args(engine.url)
        database = str(args[0]) if args else ""
        kept = {key: options[key] for key in ("uri",) if key in options}
        return cls(database, kept)

    def read(self, statements: Sequence[Statement]) -> list[Any] | None:
        """The rows of ``statements`` (:func:`~memstore.sql.fastread.sqlite_reads`), or
        ``None`` when they could not be read here without waiting."""
        holder = self._connection()
        if holder is None:
            self.passed_on += 1
            return None
        connection = holder.connection
        try:
            rows = sqlite_reads(connection, statements)
        except sqlite3.Error as error:
            self.passed_on += 1
            if not _is_busy(error) or not _rolled_back(connection):
                self._drop(holder)
            return None
        self.served += 1
        return rows

    def close(self) -> None:
        """Close every thread's connection; later reads are passed on."""
        with self._lock:
            self._closed = True
            holders = list(self._opened)
            self._opened.clear()
        for holder in holders:
            holder.close()

    def _connection(self) -> _ThreadConnection | None:
        holder: _ThreadConnection | None = getattr(self._local, "holder", None)
        if holder is not None and holder.pid == os.getpid():
            return holder
        # none yet, or inherited over a fork (never used in the child: left as it is)
        self._local.holder = None
        if self._closed:
            return None
        if not self._options.get("uri") and not os.path.exists(self._database):
            return None  # connecting would create it: left to the driver's connection
        try:
            connection = sqlite3.connect(self._database, **self._options)
        except sqlite3.Error:
            return None
        holder = _ThreadConnection(connection)
        try:
            connection.execute("PRAGMA query_only=1")
        except sqlite3.Error:
            holder.close()
            return None
        with self._lock:
            if self._closed:
                holder.close()
                return None
            self._opened.add(holder)
        self._local.holder = holder
        return holder

    def _drop(self, holder: _ThreadConnection) -> None:
        self._local.holder = None
        with self._lock:
            self._opened.discard(holder)
        holder.close()


_BUSY_CODES = (5, 6)
"""``SQLITE_BUSY``, ``SQLITE_LOCKED`` (primary result codes)."""


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if code is None:
        return "locked" in str(error)
    return code & 0xFF in _BUSY_CODES


def _rolled_back(connection: sqlite3.Connection) -> bool:
    """End a read transaction a failed read left open; whether the connection is clean."""
    try:
        if connection.in_transaction:
            connection.rollback()
    except sqlite3.Error:
        return False
    return True
