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

from memstore.guard.budgets import Budgets, BudgetUsage, Turn, exceeded_budget
from memstore.guard.executions import (
    Execution,
    ExecutionState,
    ExecutionStateError,
    execution_verdict,
)
from memstore.guard.guarded_call import GuardedCall, ToolFailed
from memstore.guard.loop_guard import LoopGuard
from memstore.guard.verdicts import (
    Allow,
    AlreadySucceeded,
    AnyVerdict,
    BlockedBudget,
    BlockedNoProgress,
    BudgetName,
    HumanReviewRequired,
    Verdict,
    parse_verdict,
)

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
