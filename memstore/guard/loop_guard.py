"""LoopGuard: the check a service makes before it executes each tool call (sync and async
forms); see the package docstring of :mod:`memstore.guard`."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa

from memstore.core.fingerprint import (
    NoProgressDecision,
    arguments_digest,
    decide_from_newest_rows,
)
from memstore.core.fingerprint import idempotency_key as derived_idempotency_key
from memstore.core.inputs import (
    MAX_WINDOW_MESSAGES,
    bounded_int,
    normalize_app_id,
    normalize_user_id,
)
from memstore.core.steps import adrive, drive
from memstore.errors import ConfigurationError, InvalidInputError
from memstore.guard.budgets import Budgets, Turn
from memstore.guard.decision_log import log_decision, log_execution, logger
from memstore.guard.execution_table import _ExecutionTable
from memstore.guard.executions import (
    Execution,
    ExecutionState,
    ExecutionStateError,
    execution_verdict,
)
from memstore.guard.guarded_call import GuardedCall, _Call, _execution_steps, _Step
from memstore.guard.inputs import _arguments_text, _checked_name, _checked_text
from memstore.guard.verdicts import Allow, AlreadySucceeded, BlockedNoProgress, Verdict
from memstore.sql.engine import translated_errors
from memstore.sql.queries import in_app, newest_first
from memstore.sql.schema import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_TOOL_NAME_CHARS,
    original,
    tool_executions,
)

if TYPE_CHECKING:
    from memstore.store import MemoryStore


DEFAULT_HISTORY_ROWS = 64
"""Rows of the original history one check reads (at least ``4 * (max_identical_repeats + 1)``)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


_UNRESOLVED: tuple[ExecutionState, ...] = ("running", "unknown")
_STARTABLE: tuple[ExecutionState, ...] = ("pending", "failed")


P = ParamSpec("P")
R = TypeVar("R")


def _in_thread(
    method: Callable[Concatenate[LoopGuard, P], R],
) -> Callable[Concatenate[LoopGuard, P], Awaitable[R]]:
    """The asyncio form of a guard method: the same call in a worker thread
    (``asyncio.to_thread``), on the store's synchronous engine. One source for each pair."""

    async def in_thread(self: LoopGuard, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    functools.update_wrapper(in_thread, method)  # the signature of ``method`` (docs, help)
    in_thread.__doc__ = f":meth:`{method.__name__}` for asyncio code, in a worker thread."
    in_thread.__name__ = in_thread.__qualname__ = f"a{method.__name__}"
    return in_thread


class LoopGuard:
    """Consult it before executing each tool call; see the package docstring.

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
        bounded_int(
            max_identical_repeats,
            "max_identical_repeats",
            minimum=1,
            maximum=MAX_WINDOW_MESSAGES // 4 - 1,
            error=ConfigurationError,
        )
        minimum_rows = 4 * (max_identical_repeats + 1)
        rows = max(DEFAULT_HISTORY_ROWS, minimum_rows) if history_rows is None else history_rows
        bounded_int(
            rows,
            "history_rows",
            minimum=minimum_rows,
            maximum=MAX_WINDOW_MESSAGES,
            error=ConfigurationError,
        )
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
        self._executions = _ExecutionTable(store.engine, store.cipher)
        # built once: the newest rows of one app (bound app id), like the loader's query
        self._history_query = (
            sa.select(original.c.id, original.c.message_type, original.c.payload)
            .where(in_app(original, sa.bindparam("app_id")), original.c.is_deleted == sa.false())
            .order_by(*newest_first(original))
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
        user_id: str | None = None,
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
        ``user_id`` names the user the call is made for: a record the check creates carries
        it, so purge and export by user find it (pass it whenever the turn has a user).
        """
        app = normalize_app_id(app_id)
        user = normalize_user_id(user_id)
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
                self._log_decision(app, name, arguments_text, blocked, turn, None)
                return blocked
        try:
            verdict, decision = self._decide(app, name, arguments_text, key, user)
        except BaseException:
            if turn is not None:
                turn._release(tool_call=True, side_effect=side_effect)
            raise
        if turn is not None and not isinstance(verdict, Allow):
            ran_nothing = not isinstance(verdict, AlreadySucceeded)
            turn._release(tool_call=ran_nothing, side_effect=side_effect)
        self._log_decision(app, name, arguments_text, verdict, turn, decision)
        return verdict

    def _decide(
        self, app: str, name: str, arguments: str, key: str | None, user: str | None
    ) -> tuple[Verdict, NoProgressDecision]:
        execution = self._executions.get(app, key) if key is not None else None
        if execution is not None and execution.state in _UNRESOLVED:
            review = execution_verdict(execution)
            assert review is not None
            return review, NoProgressDecision(False, 0, None)
        decision = decide_from_newest_rows(
            self._history(app),
            name,
            arguments,
            self.max_identical_repeats,
            cipher=self.store.cipher,
            app_id=app,
        )
        if decision.blocked:
            assert decision.checkpoint_id is not None
            return BlockedNoProgress(checkpoint_id=decision.checkpoint_id), decision
        if key is None:
            return Allow(), decision
        if execution is None and not self._executions.insert(
            self._new_row(app, key, name, arguments, "pending", None, user)
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
        app: str,
        key: str,
        name: str,
        arguments: str,
        state: ExecutionState,
        call_id: str | None,
        user: str | None,
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
            "user_id": user,
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
        user_id: str | None = None,
    ) -> Execution:
        """Mark a side-effecting call ``running`` right before executing it (a key that is
        ``pending``, ``failed`` or has no record yet), counting an attempt.

        Raises :class:`ExecutionStateError` (with the ``verdict`` a check would give) when the
        key is ``succeeded``, ``running`` or ``unknown``: then do not execute. Two instances
        racing to start one key: exactly one succeeds. ``user_id`` (the user the call runs for)
        is recorded on the record, replacing the user of an earlier attempt.
        """
        app = normalize_app_id(app_id)
        user = normalize_user_id(user_id)
        name = _checked_name(tool_name, "tool_name", MAX_TOOL_NAME_CHARS)
        arguments_text = _arguments_text(arguments)
        key = self._key(app, name, arguments_text, idempotency_key)
        if call_id is not None:
            _checked_name(call_id, "call_id", 255)
        running: dict[str, Any] = {
            "state": "running",
            "attempts": tool_executions.c.attempts + 1,
            "tool_call_id": call_id,
        }
        if user is not None:
            running["user_id"] = user
        for _ in range(3):  # a record that changes state under us is read again
            started = self._executions.transition(
                app, key, _STARTABLE, {**running, "updated_at": _now()}
            ) or self._executions.insert(
                self._new_row(app, key, name, arguments_text, "running", call_id, user)
            )
            execution = self._executions.get(app, key)
            if started and execution is not None:
                log_execution("start", execution, debug=self.debug)
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
        log_execution(state, execution, debug=self.debug)
        return execution

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
        user_id: str | None = None,
    ) -> GuardedCall:
        """Check the call and run it (``run()`` returns the result text) only when allowed.

        For a side-effecting tool the key goes ``running`` before ``run`` and ``succeeded``
        (with the result) after it; :class:`ToolFailed` raised by ``run`` marks it ``failed``
        (an error result, the key may run again); any other exception — a timeout included —
        marks it ``unknown`` (it may have happened) and re-raises. ``user_id``: see
        :meth:`check`.
        """
        call = _Call(app_id, tool_name, arguments, turn, idempotency_key, call_id, user_id)

        def do(step: _Step) -> Any:
            return run() if step.kind == "run" else self._do(call, step)

        return drive(_execution_steps(), do)

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
        user_id: str | None = None,
    ) -> GuardedCall:
        """:meth:`execute` for asyncio code: ``run`` is awaited; cancellation while it runs
        marks a side-effecting key ``unknown``. Storage calls run in worker threads."""
        call = _Call(app_id, tool_name, arguments, turn, idempotency_key, call_id, user_id)

        async def do(step: _Step) -> Any:
            if step.kind == "run":
                return await run()
            if step.kind == "unknown":  # sync on purpose: it must not be cancelled
                return self._do(call, step)
            return await asyncio.to_thread(self._do, call, step)

        return await adrive(_execution_steps(), do)

    def _do(self, call: _Call, step: _Step) -> Any:
        """One storage step of :func:`_execution_steps` for ``call``."""
        if step.kind == "check":
            return self.check(
                call.app_id,
                call.tool_name,
                call.arguments,
                turn=call.turn,
                idempotency_key=call.idempotency_key,
                user_id=call.user_id,
            )
        assert step.key is not None
        if step.kind == "start":
            return self.start(
                call.app_id,
                call.tool_name,
                call.arguments,
                idempotency_key=step.key,
                call_id=call.call_id,
                user_id=call.user_id,
            )
        if step.kind == "fail":
            return self.fail(call.app_id, step.key, step.text or "")
        if step.kind == "succeed":
            return self.succeed(call.app_id, step.key, step.text or "")
        return self._unknown_after_error(call.app_id, step.key)

    def _log_decision(self, *decided: Any) -> None:
        """Log a check's decision (see :func:`~memstore.guard.decision_log.log_decision`)."""
        log_decision(*decided, debug=self.debug, max_identical_repeats=self.max_identical_repeats)

    acheck = _in_thread(check)
    astart = _in_thread(start)
    asucceed = _in_thread(succeed)
    afail = _in_thread(fail)
    amark_unknown = _in_thread(mark_unknown)

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
