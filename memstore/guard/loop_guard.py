"""LoopGuard: the check a service makes before it executes each tool call (sync and async
forms); see the package docstring of :mod:`memstore.guard`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from memstore.core.fingerprint import (
    BLOCKING_STATUSES,
    NoProgressDecision,
    arguments_digest,
    decide_from_newest_rows,
    result_digest,
)
from memstore.core.fingerprint import idempotency_key as derived_idempotency_key
from memstore.core.inputs import (
    MAX_WINDOW_MESSAGES,
    bounded_int,
    normalize_app_id,
    normalize_user_id,
)
from memstore.errors import ConfigurationError, InvalidInputError
from memstore.guard.budgets import Budgets, Turn
from memstore.guard.execution_table import _ExecutionTable
from memstore.guard.executions import (
    Execution,
    ExecutionState,
    ExecutionStateError,
    execution_verdict,
)
from memstore.guard.guarded_call import GuardedCall, ToolFailed, _not_run, _result_text
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

# The package's logger name (documented in the README), not this module's __name__.
logger = logging.getLogger("memstore.guard")

DEFAULT_HISTORY_ROWS = 64
"""Rows of the original history one check reads (at least ``4 * (max_identical_repeats + 1)``)."""


def _redacted(text: str) -> str:
    return f"<{len(text)} chars sha256:{result_digest(text)[:12]}>"


def _now() -> datetime:
    return datetime.now(timezone.utc)


_UNRESOLVED: tuple[ExecutionState, ...] = ("running", "unknown")
_STARTABLE: tuple[ExecutionState, ...] = ("pending", "failed")


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
                self._log(app, name, arguments_text, blocked, turn, None)
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
        user_id: str | None = None,
    ) -> Verdict:
        """:meth:`check` for asyncio code. For now it runs the synchronous check in a worker
        thread (``asyncio.to_thread``), on the store's synchronous engine."""
        return await asyncio.to_thread(
            self.check,
            app_id,
            tool_name,
            arguments,
            turn=turn,
            idempotency_key=idempotency_key,
            user_id=user_id,
        )

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
        user_id: str | None = None,
    ) -> Execution:
        """:meth:`start` in a worker thread."""
        return await asyncio.to_thread(
            self.start,
            app_id,
            tool_name,
            arguments,
            idempotency_key=idempotency_key,
            call_id=call_id,
            user_id=user_id,
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
        user_id: str | None = None,
    ) -> GuardedCall:
        """Check the call and run it (``run()`` returns the result text) only when allowed.

        For a side-effecting tool the key goes ``running`` before ``run`` and ``succeeded``
        (with the result) after it; :class:`ToolFailed` raised by ``run`` marks it ``failed``
        (an error result, the key may run again); any other exception — a timeout included —
        marks it ``unknown`` (it may have happened) and re-raises. ``user_id``: see
        :meth:`check`.
        """
        verdict = self.check(
            app_id,
            tool_name,
            arguments,
            turn=turn,
            idempotency_key=idempotency_key,
            user_id=user_id,
        )
        if not isinstance(verdict, Allow):
            return _not_run(verdict)
        key = verdict.idempotency_key
        if key is None:
            return GuardedCall(verdict, _result_text(run()), is_error=False, executed=True)
        try:
            self.start(
                app_id, tool_name, arguments, idempotency_key=key, call_id=call_id, user_id=user_id
            )
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
        user_id: str | None = None,
    ) -> GuardedCall:
        """:meth:`execute` for asyncio code: ``run`` is awaited; cancellation while it runs
        marks a side-effecting key ``unknown``. Storage calls run in worker threads."""
        verdict = await self.acheck(
            app_id,
            tool_name,
            arguments,
            turn=turn,
            idempotency_key=idempotency_key,
            user_id=user_id,
        )
        if not isinstance(verdict, Allow):
            return _not_run(verdict)
        key = verdict.idempotency_key
        if key is None:
            return GuardedCall(verdict, _result_text(await run()), is_error=False, executed=True)
        try:
            await self.astart(
                app_id, tool_name, arguments, idempotency_key=key, call_id=call_id, user_id=user_id
            )
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
