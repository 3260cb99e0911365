"""The loop guard's verdicts: what it decided for one tool call, and their JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from memstore.core.fingerprint import GUARD_MARK
from memstore.errors import InvalidInputError
from memstore.messages import ToolResult

BudgetName: TypeAlias = Literal[
    "tool_rounds", "tool_calls", "wall_clock_seconds", "cost", "side_effect_calls"
]


class Verdict(BaseModel):
    """What the guard decided for one tool call. ``model_dump()`` / ``model_dump_json()`` give
    exactly the fields of the concrete verdict (see the subclasses)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: str

    @property
    def allowed(self) -> bool:
        """True only for :class:`Allow`: the service executes the tool."""
        return False

    def tool_result(self, call_id: str, tool_name: str) -> ToolResult:
        """The verdict as the tool's result for the model: its JSON, marked as an error (and
        with ``metadata={"memstore_guard": status}``, so a later check knows the tool did not
        run). Store it like any tool result."""
        return ToolResult(
            id=call_id,
            tool_name=tool_name,
            text=self.model_dump_json(),
            is_error=True,
            metadata={GUARD_MARK: self.status},
        )


class Allow(Verdict):
    """Execute the tool. For a side-effecting tool ``idempotency_key`` names its execution
    record (pass it to :meth:`LoopGuard.start`, :meth:`~LoopGuard.succeed`...)."""

    status: Literal["allow"] = "allow"
    idempotency_key: str | None = None

    @property
    def allowed(self) -> bool:
        return True

    def tool_result(self, call_id: str, tool_name: str) -> ToolResult:
        """Not available: an allowed call's result comes from running the tool."""
        raise InvalidInputError("an allowed call has no verdict result; run the tool")


class AlreadySucceeded(Verdict):
    """A side-effecting call whose key already succeeded: do not execute; ``result`` is the
    first execution's result, to hand to the model as the tool's (successful) result."""

    status: Literal["already_succeeded"] = "already_succeeded"
    reason: Literal["side_effect_already_succeeded"] = "side_effect_already_succeeded"
    idempotency_key: str
    result: str

    def tool_result(self, call_id: str, tool_name: str) -> ToolResult:
        """The first execution's result, not an error (marked ``memstore_guard``)."""
        return ToolResult(
            id=call_id,
            tool_name=tool_name,
            text=self.result,
            is_error=False,
            metadata={GUARD_MARK: self.status},
        )


class BlockedNoProgress(Verdict):
    """The same tool with the same arguments already ran ``max_identical_repeats`` times in a
    row with the same result. Serialises to exactly::

        {"status": "blocked_no_progress", "reason": "same_tool_same_arguments_no_state_change",
         "action": "human_review_required", "checkpoint_id": <id>}

    ``checkpoint_id`` is the id of the app's newest original-history row when it was decided.
    """

    status: Literal["blocked_no_progress"] = "blocked_no_progress"
    reason: Literal["same_tool_same_arguments_no_state_change"] = (
        "same_tool_same_arguments_no_state_change"
    )
    action: Literal["human_review_required"] = "human_review_required"
    checkpoint_id: int


class BlockedBudget(Verdict):
    """The turn used up a budget: ``budget`` names it, ``limit`` and ``used`` say by how much.
    The service should end the turn."""

    status: Literal["blocked_budget"] = "blocked_budget"
    reason: Literal["turn_budget_exhausted"] = "turn_budget_exhausted"
    budget: BudgetName
    limit: int | float
    used: int | float
    action: Literal["end_turn"] = "end_turn"


class HumanReviewRequired(Verdict):
    """A side-effecting call whose key is ``running`` (started, no outcome recorded: still
    running elsewhere, or the process died) or ``unknown``: it may or may not have happened, so
    it is never executed automatically. A person resolves it with :meth:`LoopGuard.succeed` or
    :meth:`LoopGuard.fail`."""

    status: Literal["human_review_required"] = "human_review_required"
    reason: Literal["side_effect_running", "side_effect_unknown"]
    action: Literal["human_review_required"] = "human_review_required"
    idempotency_key: str
    execution_state: Literal["running", "unknown"]


AnyVerdict: TypeAlias = Annotated[
    Allow | AlreadySucceeded | BlockedNoProgress | BlockedBudget | HumanReviewRequired,
    Field(discriminator="status"),
]
VERDICT_ADAPTER: TypeAdapter[AnyVerdict] = TypeAdapter(AnyVerdict)


def parse_verdict(data: str | Mapping[str, Any]) -> Verdict:
    """A verdict back from its JSON text or dict (e.g. a stored tool result's text)."""
    try:
        if isinstance(data, str):
            return VERDICT_ADAPTER.validate_json(data)
        return VERDICT_ADAPTER.validate_python(dict(data))
    except ValidationError as error:
        raise InvalidInputError(
            f"not a loop-guard verdict: {error.error_count()} error(s)"
        ) from error
