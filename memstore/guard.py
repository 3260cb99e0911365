"""The loop guard: a program-level check a service makes before it executes each tool call.

>>> from memstore import MemoryStore, Settings, AiMessage, ToolRequest, UserMessage
>>> from memstore.guard import LoopGuard
>>> store = MemoryStore(Settings(database_url="sqlite:///:memory:"))
>>> store.migrate()
>>> guard = LoopGuard(store, side_effect_tools={"send_email"})
>>> turn = guard.turn("app-1")
>>> guard.check("app-1", "read_file", '{"path": "a.txt"}', turn=turn).status
'allow'
>>> store.close()

It decides from the durable state, so its decisions hold across restarts and instances:

* **No progress** — from the newest rows of the app's original history (one indexed query per
  check, see :func:`memstore.core.fingerprint.decide_no_progress`): the same tool with the same
  canonical arguments that already ran ``max_identical_repeats`` times in a row with the same
  result is blocked (:class:`BlockedNoProgress`).
* **Side effects happen once** — for tools registered as side-effecting, an idempotency key
  (derived from the app, the tool and the canonical arguments, or given by the caller) is
  recorded in ``tool_executions`` with a state: ``pending`` (allowed, not started), ``running``
  (started, outcome not recorded), ``succeeded`` (the first result is stored), ``failed`` (the
  tool reported that nothing happened; it may run again) or ``unknown`` (it may or may not
  have happened). A succeeded key is answered with the first result
  (:class:`AlreadySucceeded`) and never executed again; a ``running`` or ``unknown`` key is
  never executed automatically (:class:`HumanReviewRequired`).
* **Budgets** — per turn (a :class:`Turn`), in memory: tool rounds, tool calls, wall-clock
  seconds, cost reported by the caller and side-effect calls (:class:`BlockedBudget`).

Statements per check: a plain tool costs one indexed query (the newest ``history_rows`` rows of
the app, on the ``(app_id, id)`` index); a side-effecting tool adds one primary-key read of its
key, plus one INSERT the first time the key is seen. Blocked verdicts are logged (WARNING,
``memstore.guard`` logger); with ``Settings.guard_debug`` every decision is (INFO), with the
arguments and results replaced by their length and a digest prefix.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from memstore.core.fingerprint import (
    BLOCKING_STATUSES,
    GUARD_MARK,
    NoProgressDecision,
    arguments_digest,
    decide_from_newest_rows,
    result_digest,
)
from memstore.core.fingerprint import idempotency_key as derived_idempotency_key
from memstore.core.inputs import normalize_app_id
from memstore.errors import ConfigurationError, InvalidInputError, MemstoreError
from memstore.messages import ToolResult
from memstore.sql.engine import translated_errors
from memstore.sql.schema import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_TOOL_NAME_CHARS,
    original,
    tool_executions,
)

if TYPE_CHECKING:
    from memstore.store import MemoryStore

logger = logging.getLogger("memstore.guard")

ExecutionState: TypeAlias = Literal["pending", "running", "succeeded", "failed", "unknown"]
BudgetName: TypeAlias = Literal[
    "tool_rounds", "tool_calls", "wall_clock_seconds", "cost", "side_effect_calls"
]

DEFAULT_HISTORY_ROWS = 64
"""Rows of the original history one check reads (at least ``4 * (max_identical_repeats + 1)``)."""


# -- verdicts ------------------------------------------------------------------------------------


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


# -- budgets (pure) ------------------------------------------------------------------------------


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

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                for e in error.errors(include_url=False)
            )
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


# -- executions (thin SQL) -----------------------------------------------------------------------


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


class ToolFailed(Exception):
    """Raise from a tool run by :meth:`LoopGuard.execute` to report a definite failure: nothing
    happened, so the key is marked ``failed`` and a later call may run it again. ``text`` is
    the result the model gets (an error result)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _execution(row: Any) -> Execution:
    return Execution(
        app_id=row.app_id,
        idempotency_key=row.idempotency_key,
        tool_name=row.tool_name,
        arguments_digest=row.arguments_digest,
        state=row.state,
        attempts=row.attempts,
        tool_call_id=row.tool_call_id,
        result=row.result,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _key_clause(app_id: Any, key: Any) -> sa.ColumnElement[bool]:
    return sa.and_(tool_executions.c.app_id == app_id, tool_executions.c.idempotency_key == key)


class _ExecutionTable:
    """Statements over ``tool_executions``; transitions are compare-and-set UPDATEs."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._by_key = sa.select(tool_executions).where(
            _key_clause(sa.bindparam("app_id"), sa.bindparam("key"))
        )

    def get(self, app_id: str, key: str) -> Execution | None:
        """One primary-key read."""
        with translated_errors("reading a tool execution"), self.engine.connect() as conn:
            row = conn.execute(self._by_key, {"app_id": app_id, "key": key}).first()
        return None if row is None else _execution(row)

    def select(self, app_id: str, states: Sequence[str] | None, limit: int) -> list[Execution]:
        query = sa.select(tool_executions).where(tool_executions.c.app_id == app_id)
        if states is not None:
            query = query.where(tool_executions.c.state.in_(list(states)))
        query = query.order_by(tool_executions.c.updated_at.desc()).limit(limit)
        with translated_errors("reading tool executions"), self.engine.connect() as conn:
            return [_execution(row) for row in conn.execute(query)]

    def insert(self, values: dict[str, Any]) -> bool:
        """Insert a new record; False when the key already has one (a concurrent insert)."""
        with translated_errors("recording a tool execution"):
            try:
                with self.engine.begin() as conn:
                    conn.execute(tool_executions.insert(), values)
            except IntegrityError:
                return False
        return True

    def transition(
        self, app_id: str, key: str, from_states: Sequence[str], values: dict[str, Any]
    ) -> bool:
        """Set ``values`` when the record's state is one of ``from_states``; True if it was."""
        statement = (
            tool_executions.update()
            .where(_key_clause(app_id, key), tool_executions.c.state.in_(list(from_states)))
            .values(**values)
        )
        with translated_errors("updating a tool execution"), self.engine.begin() as conn:
            return conn.execute(statement).rowcount == 1


# -- the guard -----------------------------------------------------------------------------------


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


def _arguments_text(arguments: str | Mapping[str, Any]) -> str:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, Mapping):
        try:
            return json.dumps(dict(arguments), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"arguments are not JSON-serialisable: {error}") from error
    raise InvalidInputError(
        f"arguments must be the JSON text (str) or a mapping, got {type(arguments).__name__}"
    )


def _checked_name(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} must be a non-empty string")
    if len(value) > limit:
        raise InvalidInputError(f"{what} is longer than {limit} characters")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise InvalidInputError(f"{what} contains a control character or a lone surrogate")
    return value


def _checked_text(value: object, what: str, limit_bytes: int) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise InvalidInputError(f"{what} is not valid unicode (lone surrogate)") from error
    if "\x00" in value:
        raise InvalidInputError(f"{what} contains a NUL character, which databases reject")
    if size > limit_bytes:
        raise InvalidInputError(f"{what} is {size} bytes; the limit is {limit_bytes} bytes")
    return value


def _redacted(text: str) -> str:
    return f"<{len(text)} chars sha256:{result_digest(text)[:12]}>"


def _now() -> datetime:
    return datetime.now(timezone.utc)


_UNRESOLVED: tuple[ExecutionState, ...] = ("running", "unknown")
_STARTABLE: tuple[ExecutionState, ...] = ("pending", "failed")


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


class LoopGuard:
    """Consult it before executing each tool call; see the module docstring.

    Args:
        store: the :class:`~memstore.store.MemoryStore` whose database holds the history (and
            ``tool_executions``; run ``store.migrate()``).
        max_identical_repeats: identical calls with unchanged results in a row after which the
            next identical call is blocked (default 2).
        budgets: the default per-turn :class:`Budgets` of :meth:`turn`.
        side_effect_tools: names of the tools whose execution has side effects.
        history_rows: original-history rows a check reads (default 64, at least
            ``4 * (max_identical_repeats + 1)``).
        debug: log every decision; default ``store.settings.guard_debug``.
        clock: monotonic seconds, for the wall-clock budget (tests pass a fake one).

    Thread-safe; share one per store.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        max_identical_repeats: int = 2,
        budgets: Budgets | None = None,
        side_effect_tools: Iterable[str] = (),
        history_rows: int | None = None,
        debug: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_identical_repeats, bool) or not isinstance(max_identical_repeats, int):
            raise ConfigurationError("max_identical_repeats must be an integer")
        if max_identical_repeats < 1:
            raise ConfigurationError("max_identical_repeats must be at least 1")
        minimum_rows = 4 * (max_identical_repeats + 1)
        rows = max(DEFAULT_HISTORY_ROWS, minimum_rows) if history_rows is None else history_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < minimum_rows:
            raise ConfigurationError(f"history_rows must be an integer >= {minimum_rows}")
        if isinstance(side_effect_tools, str):
            raise ConfigurationError("side_effect_tools must be a collection of tool names")
        self.store = store
        self.max_identical_repeats = max_identical_repeats
        self.budgets = budgets if budgets is not None else Budgets()
        self.side_effect_tools = frozenset(
            _checked_name(name, "a side-effect tool name", MAX_TOOL_NAME_CHARS)
            for name in side_effect_tools
        )
        self.history_rows = rows
        self.debug = store.settings.guard_debug if debug is None else debug
        self._clock = clock
        self._executions = _ExecutionTable(store.engine)
        # built once: the newest rows of one app (bound app id), like the loader's query
        self._history_query = (
            sa.select(original.c.id, original.c.message_type, original.c.payload)
            .where(original.c.app_id == sa.bindparam("app_id"), original.c.is_deleted == sa.false())
            .order_by(original.c.id.desc())
            .limit(rows)
        )
        self._max_text_bytes = store.settings.max_text_bytes

    # -- turns -------------------------------------------------------------------------------

    def turn(self, app_id: str | int, *, budgets: Budgets | None = None) -> Turn:
        """A new turn of the app, with the guard's budgets unless ``budgets`` is given."""
        return Turn(normalize_app_id(app_id), budgets or self.budgets, self._clock)

    # -- checks ------------------------------------------------------------------------------

    def idempotency_key(
        self, app_id: str | int, tool_name: str, arguments: str | Mapping[str, Any]
    ) -> str:
        """The derived idempotency key of a call (``sha256:...``)."""
        app = normalize_app_id(app_id)
        name = _checked_name(tool_name, "tool_name", MAX_TOOL_NAME_CHARS)
        return derived_idempotency_key(app, name, _arguments_text(arguments))

    def _key(self, app: str, name: str, arguments: str, supplied: str | None) -> str:
        if supplied is not None:
            return _checked_name(supplied, "idempotency_key", MAX_IDEMPOTENCY_KEY_CHARS)
        return derived_idempotency_key(app, name, arguments)

    def check(
        self,
        app_id: str | int,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        *,
        turn: Turn | None = None,
        idempotency_key: str | None = None,
    ) -> Verdict:
        """Decide whether to execute a call of ``tool_name`` with ``arguments`` (the model's
        raw JSON text, or a mapping) now.

        Returns :class:`Allow` (execute it; for a side-effecting tool the key is now
        ``pending``), :class:`AlreadySucceeded` (do not execute; hand the model its
        ``result``), :class:`BlockedBudget`, :class:`BlockedNoProgress` or
        :class:`HumanReviewRequired` (do not execute; hand the model
        ``verdict.tool_result(call_id, tool_name)``). Budgets apply only with a ``turn``; an
        allowed call (or an answered one) counts against them. ``idempotency_key`` replaces the
        derived key of a side-effecting tool (e.g. to allow the same email on another day).
        """
        app = normalize_app_id(app_id)
        name = _checked_name(tool_name, "tool_name", MAX_TOOL_NAME_CHARS)
        arguments_text = _arguments_text(arguments)
        side_effect = name in self.side_effect_tools
        if idempotency_key is not None and not side_effect:
            raise InvalidInputError(
                f"tool {name!r} is not registered as side-effecting; it takes no idempotency key"
            )
        if turn is not None and turn.app_id != app:
            raise InvalidInputError(f"the turn belongs to app {turn.app_id!r}, not {app!r}")
        key = self._key(app, name, arguments_text, idempotency_key) if side_effect else None

        if turn is not None:
            blocked = turn._reserve(side_effect=side_effect)
            if blocked is not None:
                self._log(app, name, arguments_text, blocked, turn, None)
                return blocked
        try:
            verdict, decision = self._decide(app, name, arguments_text, key)
        except BaseException:
            if turn is not None:
                turn._release(tool_call=True, side_effect=side_effect)
            raise
        if turn is not None and not isinstance(verdict, Allow):
            ran_nothing = not isinstance(verdict, AlreadySucceeded)
            turn._release(tool_call=ran_nothing, side_effect=side_effect)
        self._log(app, name, arguments_text, verdict, turn, decision)
        return verdict

    async def acheck(
        self,
        app_id: str | int,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        *,
        turn: Turn | None = None,
        idempotency_key: str | None = None,
    ) -> Verdict:
        """:meth:`check` for asyncio code. For now it runs the synchronous check in a worker
        thread (``asyncio.to_thread``), on the store's synchronous engine."""
        return await asyncio.to_thread(
            self.check, app_id, tool_name, arguments, turn=turn, idempotency_key=idempotency_key
        )

    def _decide(
        self, app: str, name: str, arguments: str, key: str | None
    ) -> tuple[Verdict, NoProgressDecision]:
        execution = self._executions.get(app, key) if key is not None else None
        if execution is not None and execution.state in _UNRESOLVED:
            review = execution_verdict(execution)
            assert review is not None
            return review, NoProgressDecision(False, 0, None)
        decision = decide_from_newest_rows(
            self._history(app), name, arguments, self.max_identical_repeats
        )
        if decision.blocked:
            assert decision.checkpoint_id is not None
            return BlockedNoProgress(checkpoint_id=decision.checkpoint_id), decision
        if key is None:
            return Allow(), decision
        if execution is None and not self._executions.insert(
            self._new_row(app, key, name, arguments, "pending", None)
        ):
            execution = self._executions.get(app, key)  # another instance recorded it first
        if execution is not None:
            answer = execution_verdict(execution)
            if answer is not None:
                return answer, decision
        return Allow(idempotency_key=key), decision

    def _history(self, app: str) -> list[tuple[int, str, str]]:
        """The app's newest ``history_rows`` original rows as ``(id, message_type, payload)``,
        newest first: one query on the ``(app_id, id)`` index."""
        with (
            translated_errors("reading history for the loop guard"),
            self.store.engine.connect() as conn,
        ):
            result = conn.execute(self._history_query, {"app_id": app})
            return [(row.id, row.message_type, row.payload) for row in result]

    # -- executions --------------------------------------------------------------------------

    @staticmethod
    def _new_row(
        app: str, key: str, name: str, arguments: str, state: ExecutionState, call_id: str | None
    ) -> dict[str, Any]:
        now = _now()
        return {
            "app_id": app,
            "idempotency_key": key,
            "tool_name": name,
            "arguments_digest": arguments_digest(arguments),
            "state": state,
            "attempts": 1 if state == "running" else 0,
            "tool_call_id": call_id,
            "result": None,
            "created_at": now,
            "updated_at": now,
        }

    def execution(self, app_id: str | int, idempotency_key: str) -> Execution | None:
        """The execution record of a key, or ``None``."""
        app = normalize_app_id(app_id)
        key = _checked_name(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY_CHARS)
        return self._executions.get(app, key)

    def executions(
        self,
        app_id: str | int,
        *,
        states: Iterable[ExecutionState] | None = None,
        limit: int = 100,
    ) -> list[Execution]:
        """The app's execution records (newest update first), optionally only some states:
        ``states=("running", "unknown")`` lists what waits for a person."""
        app = normalize_app_id(app_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInputError("limit must be an integer from 1 to 1000")
        wanted = None if states is None else list(states)
        return self._executions.select(app, wanted, limit)

    def start(
        self,
        app_id: str | int,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        call_id: str | None = None,
    ) -> Execution:
        """Mark a side-effecting call ``running`` right before executing it (a key that is
        ``pending``, ``failed`` or has no record yet), counting an attempt.

        Raises :class:`ExecutionStateError` (with the ``verdict`` a check would give) when the
        key is ``succeeded``, ``running`` or ``unknown``: then do not execute. Two instances
        racing to start one key: exactly one succeeds.
        """
        app = normalize_app_id(app_id)
        name = _checked_name(tool_name, "tool_name", MAX_TOOL_NAME_CHARS)
        arguments_text = _arguments_text(arguments)
        key = self._key(app, name, arguments_text, idempotency_key)
        if call_id is not None:
            _checked_name(call_id, "call_id", 255)
        for _ in range(3):  # a record that changes state under us is read again
            started = self._executions.transition(
                app,
                key,
                _STARTABLE,
                {
                    "state": "running",
                    "attempts": tool_executions.c.attempts + 1,
                    "tool_call_id": call_id,
                    "updated_at": _now(),
                },
            ) or self._executions.insert(
                self._new_row(app, key, name, arguments_text, "running", call_id)
            )
            execution = self._executions.get(app, key)
            if started and execution is not None:
                self._log_execution("start", execution)
                return execution
            if execution is not None:
                refusal = execution_verdict(execution)
                if refusal is not None:
                    raise ExecutionStateError(
                        f"side effect {key!r} of app {app!r} is {execution.state}; not starting it",
                        execution=execution,
                        verdict=refusal,
                    )
        raise ExecutionStateError(
            f"side effect {key!r} of app {app!r} kept changing state; not starting it",
            execution=self._executions.get(app, key),
        )

    def succeed(self, app_id: str | int, idempotency_key: str, result: str) -> Execution:
        """Record the first successful result of a ``running`` (or ``unknown``, when a person
        confirms it happened) execution. Later calls with the key get this result back."""
        return self._finish(app_id, idempotency_key, "succeeded", _UNRESOLVED, result)

    def fail(self, app_id: str | int, idempotency_key: str, error: str) -> Execution:
        """Record that a ``running`` (or ``unknown``) execution definitely did not happen; the
        key may be started again."""
        return self._finish(app_id, idempotency_key, "failed", _UNRESOLVED, error)

    def mark_unknown(self, app_id: str | int, idempotency_key: str) -> Execution:
        """Record that a ``running`` execution's outcome is unknown (a timeout, a lost reply):
        it is never run again automatically."""
        return self._finish(app_id, idempotency_key, "unknown", ("running",), None)

    def _finish(
        self,
        app_id: str | int,
        idempotency_key: str,
        state: ExecutionState,
        from_states: tuple[ExecutionState, ...],
        text: str | None,
    ) -> Execution:
        app = normalize_app_id(app_id)
        key = _checked_name(idempotency_key, "idempotency_key", MAX_IDEMPOTENCY_KEY_CHARS)
        values: dict[str, Any] = {"state": state, "updated_at": _now()}
        if text is not None:
            values["result"] = _checked_text(text, "the result", self._max_text_bytes)
        changed = self._executions.transition(app, key, from_states, values)
        execution = self._executions.get(app, key)
        if not changed or execution is None:
            current = "no record" if execution is None else f"state {execution.state!r}"
            raise ExecutionStateError(
                f"cannot mark side effect {key!r} of app {app!r} {state}: it has {current} "
                f"(expected {' or '.join(from_states)})",
                execution=execution,
            )
        self._log_execution(state, execution)
        return execution

    async def astart(
        self,
        app_id: str | int,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        call_id: str | None = None,
    ) -> Execution:
        """:meth:`start` in a worker thread."""
        return await asyncio.to_thread(
            self.start,
            app_id,
            tool_name,
            arguments,
            idempotency_key=idempotency_key,
            call_id=call_id,
        )

    async def asucceed(self, app_id: str | int, idempotency_key: str, result: str) -> Execution:
        """:meth:`succeed` in a worker thread."""
        return await asyncio.to_thread(self.succeed, app_id, idempotency_key, result)

    async def afail(self, app_id: str | int, idempotency_key: str, error: str) -> Execution:
        """:meth:`fail` in a worker thread."""
        return await asyncio.to_thread(self.fail, app_id, idempotency_key, error)

    async def amark_unknown(self, app_id: str | int, idempotency_key: str) -> Execution:
        """:meth:`mark_unknown` in a worker thread."""
        return await asyncio.to_thread(self.mark_unknown, app_id, idempotency_key)

    # -- check, then run -----------------------------------------------------------------------

    def execute(
        self,
        app_id: str | int,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        run: Callable[[], str],
        *,
        turn: Turn | None = None,
        idempotency_key: str | None = None,
        call_id: str | None = None,
    ) -> GuardedCall:
        """Check the call and run it (``run()`` returns the result text) only when allowed.

        For a side-effecting tool the key goes ``running`` before ``run`` and ``succeeded``
        (with the result) after it; :class:`ToolFailed` raised by ``run`` marks it ``failed``
        (an error result, the key may run again); any other exception — a timeout included —
        marks it ``unknown`` (it may have happened) and re-raises.
        """
        verdict = self.check(
            app_id, tool_name, arguments, turn=turn, idempotency_key=idempotency_key
        )
        if not isinstance(verdict, Allow):
            return _not_run(verdict)
        key = verdict.idempotency_key
        if key is None:
            return GuardedCall(verdict, _result_text(run()), is_error=False, executed=True)
        try:
            self.start(app_id, tool_name, arguments, idempotency_key=key, call_id=call_id)
        except ExecutionStateError as refused:
            if refused.verdict is None:
                raise
            return _not_run(refused.verdict)
        try:
            text = _result_text(run())
        except ToolFailed as failure:
            self.fail(app_id, key, failure.text)
            return GuardedCall(verdict, failure.text, is_error=True, executed=True)
        except BaseException:
            self._unknown_after_error(app_id, key)
            raise
        self.succeed(app_id, key, text)
        return GuardedCall(verdict, text, is_error=False, executed=True)

    async def aexecute(
        self,
        app_id: str | int,
        tool_name: str,
        arguments: str | Mapping[str, Any],
        run: Callable[[], Awaitable[str]],
        *,
        turn: Turn | None = None,
        idempotency_key: str | None = None,
        call_id: str | None = None,
    ) -> GuardedCall:
        """:meth:`execute` for asyncio code: ``run`` is awaited; cancellation while it runs
        marks a side-effecting key ``unknown``. Storage calls run in worker threads."""
        verdict = await self.acheck(
            app_id, tool_name, arguments, turn=turn, idempotency_key=idempotency_key
        )
        if not isinstance(verdict, Allow):
            return _not_run(verdict)
        key = verdict.idempotency_key
        if key is None:
            return GuardedCall(verdict, _result_text(await run()), is_error=False, executed=True)
        try:
            await self.astart(app_id, tool_name, arguments, idempotency_key=key, call_id=call_id)
        except ExecutionStateError as refused:
            if refused.verdict is None:
                raise
            return _not_run(refused.verdict)
        try:
            text = _result_text(await run())
        except ToolFailed as failure:
            await self.afail(app_id, key, failure.text)
            return GuardedCall(verdict, failure.text, is_error=True, executed=True)
        except BaseException:
            self._unknown_after_error(app_id, key)  # sync on purpose: it must not be cancelled
            raise
        await self.asucceed(app_id, key, text)
        return GuardedCall(verdict, text, is_error=False, executed=True)

    def _unknown_after_error(self, app_id: str | int, key: str) -> None:
        try:
            self.mark_unknown(app_id, key)
        except Exception:  # the key stays running, which also needs a person: still safe
            logger.warning(
                "memstore guard: could not mark side effect %r of app %r unknown; it stays "
                "running (human review required either way)",
                key,
                app_id,
                exc_info=True,
            )

    # -- logs --------------------------------------------------------------------------------

    def _log(
        self,
        app: str,
        name: str,
        arguments: str,
        verdict: Verdict,
        turn: Turn | None,
        decision: NoProgressDecision | None,
    ) -> None:
        blocking = verdict.status in BLOCKING_STATUSES
        if not (blocking or self.debug):
            return
        shown = verdict.model_dump(mode="json")
        if isinstance(verdict, AlreadySucceeded):
            shown["result"] = _redacted(verdict.result)
        parts = [
            f"app_id={app!r}",
            f"tool={name!r}",
            f"arguments={_redacted(arguments)}",
            f"verdict={json.dumps(shown, sort_keys=True)}",
        ]
        if self.debug and decision is not None:
            digests = ",".join(digest[:12] for digest in decision.result_digests)
            parts.append(
                f"identical_in_a_row={decision.repeats}/{self.max_identical_repeats} "
                f"result_digests=[{digests}] checkpoint_id={decision.checkpoint_id}"
            )
        if turn is not None:
            usage = turn.usage
            parts.append(
                f"turn_usage=rounds:{usage.tool_rounds} calls:{usage.tool_calls} "
                f"seconds:{usage.wall_clock_seconds:.3f} cost:{usage.cost:g} "
                f"side_effects:{usage.side_effect_calls}"
            )
        logger.log(
            logging.WARNING if blocking else logging.INFO,
            "memstore guard decision %s",
            " ".join(parts),
        )

    def _log_execution(self, event: str, execution: Execution) -> None:
        if not self.debug:
            return
        result = "-" if execution.result is None else _redacted(execution.result)
        logger.info(
            "memstore guard execution %s app_id=%r key=%r tool=%r state=%s attempts=%d result=%s",
            event,
            execution.app_id,
            execution.idempotency_key,
            execution.tool_name,
            execution.state,
            execution.attempts,
            result,
        )


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


__all__ = [
    "Allow",
    "AlreadySucceeded",
    "AnyVerdict",
    "BlockedBudget",
    "BlockedNoProgress",
    "BudgetName",
    "BudgetUsage",
    "Budgets",
    "Execution",
    "ExecutionState",
    "ExecutionStateError",
    "GuardedCall",
    "HumanReviewRequired",
    "LoopGuard",
    "ToolFailed",
    "Turn",
    "Verdict",
    "exceeded_budget",
    "execution_verdict",
    "parse_verdict",
]
