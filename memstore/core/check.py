"""Find (and plan repairs for) spots of a stored history that a provider would reject.

Pure: feed the original-history rows of one app in id order to :class:`HistoryChecker`, then
read its findings. Memory use is bounded by the app's number of tool calls, not its rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from memstore.core import validate
from memstore.core.metadata import freeze_metadata
from memstore.core.reasoning import REASONING_LOST_KEY
from memstore.core.window import StoredMessage, interrupted_result
from memstore.messages import AiMessage, ToolResult, UserMessage

# The codes both checks report are the same codes.
ORPHAN_RESULT = validate.ORPHAN_RESULT
UNANSWERED_REQUEST = validate.UNANSWERED_REQUEST
DUPLICATE_CALL_ID = validate.DUPLICATE_CALL_ID
ARGUMENTS_NOT_OBJECT = validate.ARGUMENTS_NOT_OBJECT
CONSECUTIVE_USER = "consecutive_user_messages"
REASONING_LOST = "reasoning_lost"

REPAIR_MARK = "memstore_repair"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem, at the row ``row_id`` of ``chat_history_original``."""

    row_id: int
    code: str
    detail: str
    call_id: str | None = None
    tool_name: str | None = None


@dataclass(slots=True)
class HistoryChecker:
    """Feed rows in id order with :meth:`feed`; :attr:`findings` lists what is wrong."""

    findings: list[Finding] = field(default_factory=list)
    _pending: dict[str, tuple[int, str]] = field(default_factory=dict)
    _requested: set[str] = field(default_factory=set)
    _answered: set[str] = field(default_factory=set)
    _previous_was_user: bool = False
    _finished: bool = False

    def feed(self, row: StoredMessage) -> None:
        message = row.message
        is_user = isinstance(message, UserMessage)
        if is_user and self._previous_was_user:
            self._add(row.id, CONSECUTIVE_USER, "a user message directly follows another one")
        self._previous_was_user = is_user
        if isinstance(message, AiMessage):
            if message.tool_requests and message.metadata.get(REASONING_LOST_KEY):
                self._add(
                    row.id,
                    REASONING_LOST,
                    "the reasoning of this reply's calls was cut off before it was complete "
                    "(a reasoning model may refuse the tool loop while it is in progress)",
                )
            for call in message.tool_requests:
                if call.id in self._requested:
                    self._add(
                        row.id,
                        DUPLICATE_CALL_ID,
                        f"call id {call.id!r} requested again",
                        call.id,
                        call.name,
                    )
                self._requested.add(call.id)
                self._answered.discard(call.id)
                self._pending[call.id] = (row.id, call.name)
                if not _is_json_object(call.arguments):
                    self._add(
                        row.id,
                        ARGUMENTS_NOT_OBJECT,
                        f"arguments of {call.id!r} are not a JSON object",
                        call.id,
                        call.name,
                    )
        elif isinstance(message, ToolResult):
            if message.id in self._pending:
                del self._pending[message.id]
                self._answered.add(message.id)
            elif message.id in self._answered:
                self._add(
                    row.id,
                    DUPLICATE_CALL_ID,
                    f"call {message.id!r} answered twice",
                    message.id,
                    message.tool_name,
                )
            else:
                self._add(
                    row.id,
                    ORPHAN_RESULT,
                    f"result for {message.id!r} has no request",
                    message.id,
                    message.tool_name,
                )

    def finish(self) -> list[Finding]:
        """Close the history: requests still pending are unanswered. Returns the findings."""
        if not self._finished:
            self._finished = True
            for call_id, (row_id, name) in self._pending.items():
                self._add(
                    row_id, UNANSWERED_REQUEST, f"call {call_id!r} has no result", call_id, name
                )
            self.findings.sort(key=lambda finding: finding.row_id)
        return self.findings

    def _add(
        self,
        row_id: int,
        code: str,
        detail: str,
        call_id: str | None = None,
        tool_name: str | None = None,
    ) -> None:
        self.findings.append(Finding(row_id, code, detail, call_id, tool_name))


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What ``check --repair`` writes: answers for unanswered requests, orphans to soft-delete."""

    answers: list[ToolResult]
    soft_delete_row_ids: list[int]

    unfixable: int = 0
    """Findings that are only reported (duplicate ids, bad arguments, consecutive users, lost
    reasoning)."""

    @property
    def empty(self) -> bool:
        return not self.answers and not self.soft_delete_row_ids


def repair_plan(findings: list[Finding]) -> RepairPlan:
    """The fixes for the findings that have one; the others are only reported."""
    answers = []
    for finding in findings:
        if finding.code == UNANSWERED_REQUEST and finding.call_id is not None:
            synthetic = interrupted_result(finding.call_id, finding.tool_name or "")
            answers.append(
                synthetic.model_copy(
                    update={"metadata": freeze_metadata({REPAIR_MARK: "interrupted"})}
                )
            )
    orphans = [f.row_id for f in findings if f.code == ORPHAN_RESULT]
    fixable = {UNANSWERED_REQUEST, ORPHAN_RESULT}
    return RepairPlan(answers, orphans, sum(1 for f in findings if f.code not in fixable))
