"""The direct write (:mod:`memstore.sql.direct`) on a psycopg 3 connection, sync or async:
the statements decided once, as sans-I/O steps (:mod:`memstore.core.steps`), driven by
:func:`psycopg_write` on a ``Connection`` and by :func:`apsycopg_write` on an
``AsyncConnection`` (their methods have the same names; the async ones are awaited).

One pipeline holds the whole transaction but its COMMIT: the upsert (which waits for the
app's lock), the reads, then both inserts, with ids issued before it was sent. The server
runs the statements in order, each on a snapshot taken when it starts, so the reads see
every write committed before the lock was granted. Before committing, the reads are
checked: a row at or above the first id sent (a writer whose clock is ahead) makes the
write roll back and run again with the reads first and ids above the newest; a broken
chain, an unrequested result id or a lapsed lease rolls back and raises. The COMMIT is its
own round trip, so a connection that dies before it wrote nothing and is retried.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import AsyncExitStack, ExitStack
from functools import partial
from typing import Any

from memstore.core.steps import adrive, drive
from memstore.sql.direct_checks import DirectArgs, DirectWrite, Written, locked_reads
from memstore.sql.direct_statements import InsertCall

Step = Callable[[], Any]
"""One call on the psycopg connection, a cursor or a pipeline (awaited on an async one)."""

Steps = Generator[Step, Any, None]


def _call(step: Step) -> Any:
    return step()


def _send_reads(conn: Any, write: DirectWrite) -> Generator[Step, Any, tuple[Any, Any, Any]]:
    """The upsert (which waits for the app's lock), the chain's read and the newest ids:
    their cursors (generation, summary or ``None``, newest)."""
    s, names, execute = write.statements, write.names, conn.execute
    bump = yield partial(execute, s.bump.sql, s.bump.params(names))
    summary = None
    if write.chain is not None:
        summary = yield partial(execute, s.summary.sql, s.summary.params(names))
    newest = yield partial(execute, s.newest.sql, s.newest.params(names))
    return bump, summary, newest


def _send_inserts(conn: Any, originals: InsertCall | None, displays: InsertCall | None) -> Steps:
    if originals:
        yield partial(conn.execute, *originals)
    if displays:
        yield partial(conn.execute, *displays)


def _next_pages(conn: Any, write: DirectWrite, pipe: Any) -> Steps:
    """The pages of tool requests still to read (each a round trip: ``pipe.sync`` in a
    pipeline)."""
    sql = write.statements.requests_before.sql
    while write.before is not None:
        more = yield partial(conn.execute, sql, write.page_params())
        if pipe is not None:
            yield pipe.sync
        write.next_page((yield more.fetchall))


def psycopg_steps(
    conn: Any, write: DirectWrite, enter_pipeline: Step, leave_pipeline: Step
) -> Generator[Step, Any, Written]:
    """The write on ``conn`` in a transaction the caller commits, as steps.
    ``enter_pipeline`` opens a pipeline (its result: the pipeline), ``leave_pipeline``
    closes it (sending its one Sync and taking in every result); a failure inside leaves it
    as the caller's ``with`` would."""
    if not write.reads_first:
        originals, displays = write.issue(-1)
        yield enter_pipeline
        bump, summary, newest = yield from _send_reads(conn, write)
        page = None
        if write.plan.unresolved_call_ids:
            s = write.statements
            page = yield partial(conn.execute, s.requests.sql, s.requests.params(write.names))
        yield from _send_inserts(conn, originals, displays)
        yield leave_pipeline  # one round trip
        reads = locked_reads(
            (yield bump.fetchone),
            (yield newest.fetchone),
            None if summary is None else (yield summary.fetchone),
            None if page is None else (yield page.fetchall),
        )
        if not write.overtaken(reads):
            write.check(reads)
            yield from _next_pages(conn, write, None)
            write.answered()
            return write.result(reads.generation)
        yield conn.rollback  # and again, the reads first
    pipe = yield enter_pipeline
    bump, summary, newest = yield from _send_reads(conn, write)
    yield pipe.sync
    reads = locked_reads(
        (yield bump.fetchone),
        (yield newest.fetchone),
        None if summary is None else (yield summary.fetchone),
        None,
    )
    write.check(reads)
    originals, displays = write.issue(reads.newest)
    write.scan_below_ids()
    yield from _next_pages(conn, write, pipe)
    write.answered()
    yield from _send_inserts(conn, originals, displays)
    yield pipe.sync
    yield leave_pipeline
    return write.result(reads.generation)


def psycopg_write(conn: Any, args: DirectArgs) -> Written:
    """The write on a psycopg connection in a transaction the caller commits."""
    with ExitStack() as pipelines:
        steps = psycopg_steps(
            conn,
            DirectWrite(args),
            lambda: pipelines.enter_context(conn.pipeline()),
            pipelines.close,
        )
        return drive(steps, _call)


async def apsycopg_write(conn: Any, args: DirectArgs) -> Written:
    """:func:`psycopg_write` on a psycopg ``AsyncConnection``."""
    async with AsyncExitStack() as pipelines:
        steps = psycopg_steps(
            conn,
            DirectWrite(args),
            lambda: pipelines.enter_async_context(conn.pipeline()),
            pipelines.aclose,
        )
        return await adrive(steps, _call)
