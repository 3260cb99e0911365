"""The checks a direct write (:mod:`memstore.sql.direct`) makes on either driver: ids issued
and overtaken, the compaction chain, every result id answering a stored request. The reads
taken under the app's lock come in, the verdict goes out; nothing here runs a statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memstore.core.crypto import RowCipher
from memstore.core.id_order import newest_of
from memstore.core.plans import IdIssuer, WritePlan, rows_with_ids, unknown_call_error
from memstore.sql.direct_statements import DirectStatements, InsertCall
from memstore.sql.generation import GenerationStep
from memstore.sql.queries import ChainCheck, missing_after_page


@dataclass(frozen=True, slots=True)
class LockedReads:
    """What the transaction read right after taking the app's lock."""

    generation: int
    newest: int
    summary_id: int | None
    request_page: list[tuple[int, str]] | None
    """The newest page of the app's tool requests (asked only when the plan has result ids
    to resolve)."""


def _app(app_id: str) -> dict[str, Any]:
    return {"gen_app": app_id, "app_id": app_id, "d_app": app_id}


def _step(generation: int) -> GenerationStep:
    return GenerationStep(generation - 1, generation)


@dataclass(frozen=True, slots=True)
class DirectArgs:
    """What one direct write is asked to do: the plan's rows of one app, with the compiled
    statements, the id issuer, the cipher and the compaction's chain (if any)."""

    statements: DirectStatements
    app_id: str
    plan: WritePlan
    issue_ids: IdIssuer
    cipher: RowCipher
    chain: ChainCheck | None
    reads_first: bool = False
    """Issue the ids above the newest id read under the app's lock, not before it (a retry
    after an id collision)."""


Written = tuple[list[int], GenerationStep]
"""The original rows' ids and the app's generation step."""


class DirectWrite:
    """One attempt of a direct write: its ids, rows and checks. The app's reads taken under
    its lock come in, the verdict (chain, ids above the newest, every result id requested)
    goes out."""

    def __init__(self, args: DirectArgs) -> None:
        self.statements = args.statements
        self.app_id = args.app_id
        self.plan = args.plan
        self.issue_ids = args.issue_ids
        self.cipher = args.cipher
        self.chain = args.chain
        self.reads_first = args.reads_first
        self.names = _app(args.app_id)
        self.ids: list[int] = []
        self.missing = set(args.plan.unresolved_call_ids)
        self.before: int | None = None
        """Where the next page of tool requests starts (``None``: no page left to read)."""

    def issue(self, newest: int) -> tuple[InsertCall | None, InsertCall | None]:
        """Issue the ids above ``newest``; the parameters of both inserts."""
        self.ids = self.issue_ids(self.plan.id_count, newest)
        originals, displays = rows_with_ids(self.plan, self.ids, self.cipher)
        return (
            self.statements.insert_original.values(originals),
            self.statements.insert_display.values(displays),
        )

    def overtaken(self, reads: LockedReads) -> bool:
        """Whether the ids issued before the app's lock must be issued again, above the
        newest id read under it: a row of the app is at or above the first of them (a writer
        whose clock is ahead). Else the issuer confirms that the lease it issued them on still
        holds (asked for no ids, it raises :class:`~memstore.errors.WorkerLeaseLostError`
        when the lease lapsed while the write waited for the lock), so no id of a lapsed lease
        is written."""
        if reads.newest >= self.ids[0]:
            return True
        self.issue_ids(0, reads.newest)
        return False

    def check(self, reads: LockedReads) -> None:
        """The chain, and the first page of tool requests when it was read along (in a
        pipeline whose ids were not overtaken, every row it saw is below them)."""
        if self.chain is not None:
            self.chain.check(reads.summary_id)
        if self.missing and reads.request_page is not None:
            self.next_page(reads.request_page)

    def scan_below_ids(self) -> None:
        """Look for the requested call ids below the ids issued (page by page, newest first):
        a result must answer a request stored before it."""
        self.before = self.ids[0] if self.missing else None

    def next_page(self, page: Sequence[Sequence[Any]]) -> None:
        self.before = missing_after_page(self.missing, page, self.app_id, self.cipher)

    def page_params(self) -> Any:
        """The parameters of the next page of tool requests."""
        return self.statements.requests_before.params(
            {"d_app": self.app_id, "d_before": self.before}
        )

    def answered(self) -> None:
        """Raise when a result id answers no stored request (all pages read)."""
        if self.missing:
            raise unknown_call_error(self.app_id, self.missing)

    def result(self, generation: int) -> Written:
        return self.ids[: len(self.plan.original_rows)], _step(generation)


def locked_reads(generation: Any, newest: Any, summary: Any, page: list[Any] | None) -> LockedReads:
    return LockedReads(
        int(generation[0]),
        newest_of(*newest),
        None if summary is None else summary[0],
        page,
    )
