"""Running a tool under the guard: what the tool raises to report a definite failure, and
the outcome :meth:`~memstore.guard.LoopGuard.execute` returns."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memstore.errors import InvalidInputError
from memstore.guard.budgets import Turn
from memstore.guard.executions import ExecutionStateError
from memstore.guard.verdicts import Allow, AlreadySucceeded, Verdict
from memstore.messages import ToolResult


class ToolFailed(Exception):
    """Raise from a tool run by :meth:`LoopGuard.execute` to report a definite failure: nothing
    happened, so the key is marked ``failed`` and a later call may run it again. ``text`` is
    the result the model gets (an error result)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True, slots=True)
class GuardedCall:
    """The outcome of :meth:`LoopGuard.execute`."""

    verdict: Verdict
    text: str
    """The tool's result text for the model: the tool's own, the first execution's result
    (:class:`AlreadySucceeded`) or the verdict's JSON (blocked verdicts)."""
    is_error: bool
    executed: bool
    """True when the tool ran during this call."""

    def tool_result(self, call_id: str, tool_name: str) -> ToolResult:
        """The result to store and hand to the model."""
        if self.executed:
            return ToolResult(
                id=call_id, tool_name=tool_name, text=self.text, is_error=self.is_error
            )
        return self.verdict.tool_result(call_id, tool_name)


def _result_text(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(
            f"a tool run must return its result text, got {type(value).__name__}"
        )
    return value


def _not_run(verdict: Verdict) -> GuardedCall:
    if isinstance(verdict, AlreadySucceeded):
        return GuardedCall(verdict, verdict.result, is_error=False, executed=False)
    return GuardedCall(verdict, verdict.model_dump_json(), is_error=True, executed=False)


@dataclass(frozen=True, slots=True)
class _Call:
    """The arguments of one :meth:`LoopGuard.execute`."""

    app_id: str | int
    tool_name: str
    arguments: str | Mapping[str, Any]
    turn: Turn | None
    idempotency_key: str | None
    call_id: str | None
    user_id: str | None


@dataclass(frozen=True, slots=True)
class _Step:
    """What :func:`_execution_steps` needs done next: check the call, start its key, run the
    tool, or record the key failed, succeeded (``text``: the result) or unknown."""

    kind: Literal["check", "start", "run", "fail", "succeed", "unknown"]
    key: str | None = None
    text: str | None = None


def _execution_steps() -> Generator[_Step, Any, GuardedCall]:
    """The decisions of :meth:`LoopGuard.execute` (sans-I/O: the sync and async runners do
    the steps)."""
    verdict = yield _Step("check")
    if not isinstance(verdict, Allow):
        return _not_run(verdict)
    key = verdict.idempotency_key
    if key is None:
        text = _result_text((yield _Step("run")))
        return GuardedCall(verdict, text, is_error=False, executed=True)
    try:
        yield _Step("start", key)
    except ExecutionStateError as refused:
        if refused.verdict is None:
            raise
        return _not_run(refused.verdict)
    try:
        text = _result_text((yield _Step("run")))
    except ToolFailed as failure:
        yield _Step("fail", key, failure.text)
        return GuardedCall(verdict, failure.text, is_error=True, executed=True)
    except BaseException:
        yield _Step("unknown", key)
        raise
    yield _Step("succeed", key, text)
    return GuardedCall(verdict, text, is_error=False, executed=True)
