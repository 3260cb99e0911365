"""Per-turn budgets, in memory and pure: the limits, a turn's usage and the decision."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memstore.errors import ConfigurationError, InvalidInputError, describe_validation_error
from memstore.guard.verdicts import BlockedBudget, BudgetName


class Budgets(BaseModel):
    """Per-turn limits; ``None`` switches one off.

    A call is blocked when the turn is already past ``tool_rounds`` (rounds are the model
    calls reported with :meth:`Turn.record_model_call`; a turn that reports none is in round
    1), has already had ``tool_calls`` allowed calls, has run ``wall_clock_seconds`` or more,
    has spent ``cost`` or more (the next model call would exceed it), or, for a side-effecting
    tool, has already had ``side_effect_calls`` side-effecting calls allowed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_rounds: int | None = Field(default=16, ge=1)
    tool_calls: int | None = Field(default=64, ge=1)
    wall_clock_seconds: float | None = Field(default=300.0, gt=0)
    cost: float | None = Field(default=None, ge=0)
    side_effect_calls: int | None = Field(default=8, ge=0)

    @field_validator("tool_rounds", "tool_calls", "side_effect_calls", mode="before")
    @classmethod
    def _no_bool_for_int(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("must be an integer, not a bool")
        return value

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            details = describe_validation_error(error)
            raise ConfigurationError(f"invalid loop-guard budgets: {details}") from error


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """What a turn has used so far."""

    tool_rounds: int
    tool_calls: int
    wall_clock_seconds: float
    cost: float
    side_effect_calls: int


def exceeded_budget(
    budgets: Budgets, usage: BudgetUsage, *, side_effect: bool
) -> BlockedBudget | None:
    """The first budget (in field order) the next call would exceed, as a verdict; else None."""
    candidates: list[tuple[BudgetName, int | float | None, int | float, bool]] = [
        ("tool_rounds", budgets.tool_rounds, usage.tool_rounds, False),
        ("tool_calls", budgets.tool_calls, usage.tool_calls, True),
        ("wall_clock_seconds", budgets.wall_clock_seconds, usage.wall_clock_seconds, True),
        ("cost", budgets.cost, usage.cost, True),
    ]
    if side_effect:
        candidates.append(
            ("side_effect_calls", budgets.side_effect_calls, usage.side_effect_calls, True)
        )
    for name, limit, used, inclusive in candidates:
        if limit is None:
            continue
        if used >= limit if inclusive else used > limit:
            return BlockedBudget(budget=name, limit=limit, used=used)
    return None


class Turn:
    """The budget accounting of one agent turn of one app (in memory; a restart starts a new
    turn). Get one from :meth:`LoopGuard.turn` and pass it to every check of the turn.
    Thread-safe: parallel calls of one round may be checked concurrently."""

    def __init__(self, app_id: str, budgets: Budgets, clock: Callable[[], float]) -> None:
        self.app_id = app_id
        self.budgets = budgets
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._model_calls = 0
        self._tool_calls = 0
        self._side_effect_calls = 0
        self._cost = 0.0

    def record_model_call(self, cost: float = 0.0) -> None:
        """Report one model call of the turn and what it cost; it opens a new tool round."""
        if isinstance(cost, bool) or not isinstance(cost, (int, float)):
            raise InvalidInputError(f"cost must be a number, got {type(cost).__name__}")
        if not math.isfinite(cost) or cost < 0:
            raise InvalidInputError(f"cost must be a finite number >= 0, got {cost!r}")
        with self._lock:
            self._model_calls += 1
            self._cost += float(cost)

    @property
    def usage(self) -> BudgetUsage:
        """What the turn has used so far."""
        with self._lock:
            return self._usage()

    def _usage(self) -> BudgetUsage:
        return BudgetUsage(
            tool_rounds=max(1, self._model_calls),
            tool_calls=self._tool_calls,
            wall_clock_seconds=max(0.0, self._clock() - self._started),
            cost=self._cost,
            side_effect_calls=self._side_effect_calls,
        )

    def _reserve(self, *, side_effect: bool) -> BlockedBudget | None:
        """Check the budgets and, when none is exceeded, count the call (atomically)."""
        with self._lock:
            blocked = exceeded_budget(self.budgets, self._usage(), side_effect=side_effect)
            if blocked is None:
                self._tool_calls += 1
                self._side_effect_calls += int(side_effect)
            return blocked

    def _release(self, *, tool_call: bool, side_effect: bool) -> None:
        with self._lock:
            self._tool_calls -= int(tool_call)
            self._side_effect_calls -= int(side_effect)
