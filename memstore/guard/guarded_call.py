"""Running a tool under the guard: what the tool raises to report a definite failure, and
the outcome :meth:`~memstore.guard.LoopGuard.execute` returns."""

from __future__ import annotations

from dataclasses import dataclass

from memstore.errors import InvalidInputError
from memstore.guard.verdicts import AlreadySucceeded, Verdict
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
