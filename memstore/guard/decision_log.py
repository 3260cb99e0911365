"""What the loop guard logs: its blocking decisions always, every decision and execution change
with ``debug=True``. Never message text: arguments and results appear as their length and a
digest."""

from __future__ import annotations

import json
import logging

from memstore.core.fingerprint import BLOCKING_STATUSES, NoProgressDecision, result_digest
from memstore.guard.budgets import Turn
from memstore.guard.executions import Execution
from memstore.guard.verdicts import AlreadySucceeded, Verdict

# The package's logger name (documented in the README), not this module's __name__.
logger = logging.getLogger("memstore.guard")


def redacted(text: str) -> str:
    """``text`` as its length and the start of its digest."""
    return f"<{len(text)} chars sha256:{result_digest(text)[:12]}>"


def log_decision(
    app: str,
    name: str,
    arguments: str,
    verdict: Verdict,
    turn: Turn | None,
    decision: NoProgressDecision | None,
    *,
    debug: bool,
    max_identical_repeats: int,
) -> None:
    """Log ``verdict`` (a warning when it blocks; an info line only with ``debug``)."""
    blocking = verdict.status in BLOCKING_STATUSES
    if not (blocking or debug):
        return
    shown = verdict.model_dump(mode="json")
    if isinstance(verdict, AlreadySucceeded):
        shown["result"] = redacted(verdict.result)
    parts = [
        f"app_id={app!r}",
        f"tool={name!r}",
        f"arguments={redacted(arguments)}",
        f"verdict={json.dumps(shown, sort_keys=True)}",
    ]
    if debug and decision is not None:
        digests = ",".join(digest[:12] for digest in decision.result_digests)
        parts.append(
            f"identical_in_a_row={decision.repeats}/{max_identical_repeats} "
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


def log_execution(event: str, execution: Execution, *, debug: bool) -> None:
    """Log a change of an execution record (only with ``debug``)."""
    if not debug:
        return
    result = "-" if execution.result is None else redacted(execution.result)
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
