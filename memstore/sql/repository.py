"""Synchronous statements over the two tables. Thin: every decision lives in ``memstore.core``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine

from memstore.core.crypto import RowCipher
from memstore.core.id_order import newest_of
from memstore.core.loader import RowRequest
from memstore.core.plans import IdIssuer, WritePlan, rows_with_ids, unknown_call_error
from memstore.core.row_memo import NO_MEMO, RowMemo
from memstore.core.rows import FetchedRows
from memstore.reports import DisplayEntry
from memstore.sql import generation
from memstore.sql.direct import DirectArgs, direct_statements, direct_write_retrying
from memstore.sql.engine import (
    dbapi_retrying,
    read_options,
    read_retrying,
    translated_errors,
    write_retrying,
)
from memstore.sql.fastread import (
    fast_reads,
    lookahead_rows,
    read_rows,
    splits_summary,
    window_read,
)
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import (
    NEWEST_IDS,
    ChainCheck,
    adapter_record_deletes,
    display_entry,
    history_query,
    latest_summary_query,
    missing_after_page,
    purge_statements,
    request_scan_query,
    window_rows_statement,
    written_ids,
)
from memstore.sql.runners import Steps, run_connected, run_steps
from memstore.sql.schema import display, original


def insert_steps(
    dialect: Dialect,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None = None,
) -> Steps[tuple[list[int], GenerationStep]]:
    """:func:`insert_plan` as statement steps (:mod:`memstore.sql.runners`), run by both
    histories."""
    step = yield from generation.bump_steps(dialect, app_id)
    if chain is not None:
        chain.check((yield latest_summary_query(app_id), None).scalar())
    newest = (yield NEWEST_IDS, {"app_id": app_id}).one()
    ids = issue_ids(plan.id_count, newest_of(*newest))
    missing = set(plan.unresolved_call_ids)
    before = ids[0] if missing else None
    while before is not None:  # every result id answers a request stored below the new ids
        page = (yield request_scan_query(app_id, before), None).all()
        before = missing_after_page(missing, page, app_id, cipher)
    if missing:
        raise unknown_call_error(app_id, missing)
    original_rows, display_rows = rows_with_ids(plan, ids, cipher)
    if original_rows:
        yield original.insert(), original_rows
    if display_rows:
        yield display.insert(), display_rows
    return ids[: len(original_rows)], step


def insert_plan(
    conn: Connection,
    app_id: str,
    plan: WritePlan,
    issue_ids: IdIssuer,
    cipher: RowCipher,
    chain: ChainCheck | None = None,
) -> tuple[list[int], GenerationStep]:
    """Write the plan's rows in the caller's transaction; return the original rows' ids and
    the app's generation step.

    Raises the app's generation first (:func:`memstore.sql.generation.bump`), which locks the
    app's row until the transaction ends, so writers of one app take turns (on SQLite a write
    as the first statement also takes the database's write lock, so the reads that follow see
    every committed write). Then it reads the app's newest id and takes
    ``issue_ids(plan.id_count, newest)``, so the new rows sort after every row of the app
    written before. Every call id of ``plan.unresolved_call_ids`` must be requested by a row
    of the app below the new ids, else :class:`~memstore.errors.UnknownToolCallError`.
    With ``chain`` (a compaction's summary), the app's newest summary must still be the one
    the compaction chained from, else :class:`~memstore.errors.CompactionConflictError`.
    """
    return run_steps(conn, insert_steps(conn.dialect, app_id, plan, issue_ids, cipher, chain))


def was_committed(conn: Connection, app_id: str, first_id: int) -> bool:
    """Whether the write of the app that issued ``first_id`` was committed. The app's
    generation is raised first: that waits for a write of the app still in flight (it holds
    the generation row's lock until it ends), so the answer is final, and it moves every
    cached window of the app off its generation."""
    generation.bump(conn, app_id)
    found = conn.execute(
        sa.select(original.c.id).where(original.c.app_id == app_id, original.c.id == first_id)
    )
    return found.first() is not None


def purge_steps(dialect: Dialect, app_id: str) -> Steps[tuple[int, int, int]]:
    """Hard-delete the app's rows (statement steps); the counts per table (original,
    display, tool executions)."""
    yield from generation.bump_steps(dialect, app_id)  # first: waits for the app's writers
    counts = []
    for statement in purge_statements(app_id):
        counts.append((yield statement, None).rowcount)
    for statement in adapter_record_deletes(app_id):
        yield statement, None
    return counts[0], counts[1], counts[2]


class SqlHistory:
    """The two history tables on one synchronous engine; ``cipher`` seals and opens their
    texts."""

    def __init__(self, engine: Engine, cipher: RowCipher, memo: RowMemo = NO_MEMO) -> None:
        self.engine = engine
        self.cipher = cipher
        self.memo = memo
        """Decoded rows the loader's reads reuse (:class:`~memstore.core.row_memo.RowMemo`)."""
        self._read_options = read_options(engine)
        self._split_summary = splits_summary(engine)
        self.lookahead = lookahead_rows(engine.dialect)
        """Rows the loader's first read takes beyond the window (:func:`lookahead_rows`)."""
        self._direct = True
        """Whether appends may take the direct write (:mod:`memstore.sql.direct`) when the
        engine allows it (decided per write: a statement listener can come at any time)."""

    def fetch(self, app_id: str, request: RowRequest) -> FetchedRows:
        """Rows for the loader, chronological, decoded as the loader uses them: one
        statement, all rows in one fetch (on the DBAPI connection where
        :func:`~memstore.sql.fastread.fast_reads` allows, else through Core)."""
        rows: Sequence[Sequence[Any]]
        with translated_errors("reading history"):
            if fast_reads(self.engine):
                reads = window_read(
                    self.engine.dialect, app_id, request, split_summary=self._split_summary
                )
                rows = dbapi_retrying(lambda: read_rows(self.engine, reads))
            else:
                statement, params = window_rows_statement(app_id, request)
                rows = read_retrying(
                    self.engine,
                    lambda conn: conn.execute(statement, params).all(),
                    **self._read_options,
                )
        return FetchedRows.from_rows(rows, self.cipher, app_id, self.memo)

    def insert(
        self,
        app_id: str,
        plan: WritePlan,
        issue_ids: IdIssuer,
        chain: ChainCheck | None = None,
        *,
        reads_first: bool = False,
    ) -> tuple[list[int], GenerationStep | None]:
        """Write the plan's rows in one transaction (:func:`insert_plan`); return the original
        rows' ids and the app's generation step (``None`` when there was nothing to write).

        The direct write (:mod:`memstore.sql.direct`) issues its ids before it waits for the
        app's lock; ``reads_first`` (a retry after an id collision) issues them above the
        app's newest id read under the lock, as :func:`insert_plan` always does.
        """
        if not plan.id_count:
            return [], None
        direct = direct_statements(self.engine) if self._direct else None
        with translated_errors("writing history"):
            if direct is not None:
                args = DirectArgs(direct, app_id, plan, issue_ids, self.cipher, chain, reads_first)
                return direct_write_retrying(self.engine, args)
            return write_retrying(
                self.engine,
                lambda conn: insert_plan(conn, app_id, plan, issue_ids, self.cipher, chain),
                written_ids,
            )

    def was_committed(self, app_id: str, first_id: int) -> bool:
        """See :func:`was_committed` (its own transaction)."""
        with translated_errors("checking a write"):
            return write_retrying(self.engine, lambda conn: was_committed(conn, app_id, first_id))

    def generation(self, app_id: str) -> int:
        """The app's generation (see :mod:`memstore.sql.generation`)."""
        with translated_errors("reading history"):
            return read_retrying(
                self.engine, lambda conn: generation.read(conn, app_id), **self._read_options
            )

    def history(self, app_id: str, limit: int, before_id: int | None) -> list[DisplayEntry]:
        with translated_errors("reading display history"), self.engine.connect() as conn:
            return [
                display_entry(row, self.cipher)
                for row in conn.execute(history_query(app_id, limit, before_id)).all()
            ]

    def purge(self, app_id: str) -> tuple[int, int, int]:
        """Hard-delete the app's rows in one transaction; return the counts per table
        (original, display, tool executions)."""
        with translated_errors("purging history"):
            return run_connected(self.engine, purge_steps(self.engine.dialect, app_id), begin=True)
