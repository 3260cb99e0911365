"""The direct write (:mod:`memstore.sql.direct`) on a ``sqlite3`` connection: the whole
transaction as one call in the connection's thread (``BEGIN IMMEDIATE``, so the write lock is
held before anything is read; the upsert returns the newest ids too), which under aiosqlite is
one thread hop instead of several per statement."""

from __future__ import annotations

import sqlite3

from memstore.core.id_order import newest_of
from memstore.sql.direct_checks import DirectArgs, DirectWrite, LockedReads, Written


def sqlite_write(conn: sqlite3.Connection, args: DirectArgs, commit: bool) -> Written:
    """The write on a ``sqlite3`` connection, in the calling thread. With ``commit`` the
    transaction is committed here (rolled back on any failure); without, the caller commits
    or rolls back (through SQLAlchemy)."""
    write = DirectWrite(args)
    s, names, reads_first = write.statements, write.names, write.reads_first
    # ids and rows before the write lock, which other writers wait for meanwhile; checked
    # against the app's newest id under the lock (see DirectWrite.overtaken)
    originals, displays = (None, None) if reads_first else write.issue(-1)
    cursor = conn.cursor()
    try:
        cursor.execute("BEGIN IMMEDIATE")
        if s.bump_newest is not None:
            bumped = cursor.execute(s.bump_newest.sql, s.bump_newest.params(names)).fetchone()
            generation, newest = int(bumped[0]), newest_of(*bumped[1:])
        else:  # pragma: no cover - the direct write takes SQLite and psycopg only
            generation = int(cursor.execute(s.bump.sql, s.bump.params(names)).fetchone()[0])
            newest = newest_of(*cursor.execute(s.newest.sql, s.newest.params(names)).fetchone())
        summary = None
        if write.chain is not None:
            found = cursor.execute(s.summary.sql, s.summary.params(names)).fetchone()
            summary = None if found is None else found[0]
        reads = LockedReads(generation, newest, summary, None)
        write.check(reads)
        if reads_first or write.overtaken(reads):
            originals, displays = write.issue(newest)
        write.scan_below_ids()
        while write.before is not None:
            write.next_page(cursor.execute(s.requests_before.sql, write.page_params()).fetchall())
        write.answered()
        if originals:
            cursor.executemany(*originals)
        if displays:
            cursor.executemany(*displays)
        if commit:
            conn.commit()
        return write.result(generation)
    except BaseException:
        if commit:
            conn.rollback()
        raise
    finally:
        cursor.close()
