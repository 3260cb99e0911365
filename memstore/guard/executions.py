"""Execution records of side-effecting calls: their states, the model of one record and
what an existing record means for a new call (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

from memstore.errors import MemstoreError
from memstore.guard.verdicts import AlreadySucceeded, HumanReviewRequired, Verdict

ExecutionState: TypeAlias = Literal["pending", "running", "succeeded", "failed", "unknown"]


class Execution(BaseModel):
    """One row of ``tool_executions``: a side-effecting call's execution record."""

    model_config = ConfigDict(frozen=True)

    app_id: str
    idempotency_key: str
    tool_name: str
    arguments_digest: str
    state: ExecutionState
    attempts: int
    """Executions started (``start``); 0 while ``pending``."""
    tool_call_id: str | None
    """The call id given to the last ``start``."""
    user_id: str | None = None
    """The user the record's call was made for (the last ``start`` that named one)."""
    result: str | None
    """The first successful result, or the last failure's text."""
    created_at: datetime
    updated_at: datetime


class ExecutionStateError(MemstoreError):
    """An execution record is not in a state that allows the requested transition.

    ``execution`` is the record as read (``None`` when the key has none); ``verdict`` is what a
    check would answer for it (:class:`AlreadySucceeded` or :class:`HumanReviewRequired`) when
    :meth:`LoopGuard.start` refused to start it, else ``None``.
    """

    def __init__(
        self, detail: str, *, execution: Execution | None, verdict: Verdict | None = None
    ) -> None:
        super().__init__(detail)
        self.execution = execution
        self.verdict = verdict


def execution_verdict(execution: Execution) -> AlreadySucceeded | HumanReviewRequired | None:
    """What an existing execution record means for a new call (pure): ``None`` when the call
    may run (``pending``, ``failed``)."""
    if execution.state == "succeeded":
        return AlreadySucceeded(
            idempotency_key=execution.idempotency_key, result=execution.result or ""
        )
    if execution.state == "running":
        return HumanReviewRequired(
            reason="side_effect_running",
            idempotency_key=execution.idempotency_key,
            execution_state="running",
        )
    if execution.state == "unknown":
        return HumanReviewRequired(
            reason="side_effect_unknown",
            idempotency_key=execution.idempotency_key,
            execution_state="unknown",
        )
    return None
