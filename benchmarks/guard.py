"""Loop guard: cost per check against one plain indexed select of the app's newest row, same
run, same SQLite database.

    python benchmarks/guard.py [--rounds 3000] [--history 5000] [--history-rows 64]

The app under test has ``--history`` original-history rows (tool rounds with results, user
messages in between) and shares the table with 50 other apps. Rows of the table:

* ``baseline``: ``SELECT id, payload ... WHERE app_id = ? AND is_deleted = false ORDER BY id
  DESC LIMIT 1`` on a pooled connection: the cheapest read a check could make;
* ``check, plain tool, allow`` / ``blocked``: one query of the newest ``history_rows`` rows and
  the no-progress decision (the history ends with other calls / with two identical calls);
* ``check, side-effect tool, replay``: a key that succeeded: key read + history query;
* ``decision only``: :func:`decide_no_progress` on rows already fetched (no I/O);
* ``canonical_arguments``: one typical arguments text.

Calls are timed interleaved (round robin), so background load hits every row alike.
"""

from __future__ import annotations

import argparse
import logging
import platform
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa

from benchmarks.common import time_interleaved
from memstore import AiMessage, MemoryStore, Message, Settings, ToolRequest, ToolResult, UserMessage
from memstore.core.fingerprint import canonical_arguments, decide_no_progress
from memstore.core.loader import RowRequest
from memstore.guard import LoopGuard
from memstore.sql.queries import newest_rows_query, rows_to_messages
from memstore.sql.schema import original

ARGUMENTS = '{"path": "src/memstore/guard.py", "start_line": 120, "end_line": 180, "raw": false}'


def history(turns: int, prefix: str) -> list[Message]:
    """``turns`` turns of a user message, three tool rounds and a reply (9 rows each)."""
    out: list[Message] = []
    for turn in range(turns):
        out.append(UserMessage(text=f"request {turn}: look into the failing test"))
        for step in range(3):
            call_id = f"{prefix}-{turn}-{step}"
            arguments = f'{{"path": "file_{turn}_{step}.py", "start_line": {step * 40}}}'
            out.append(
                AiMessage(
                    text=None,
                    tool_requests=[ToolRequest(id=call_id, name="read_file", arguments=arguments)],
                )
            )
            out.append(ToolResult(id=call_id, tool_name="read_file", text="x = 1\n" * 40))
        out.append(AiMessage(text=f"Turn {turn}: the test fails because of a typo."))
    return out


def repeat_tail(app_id: str) -> list[Message]:
    """A user message, then two identical calls with identical results (the next is blocked)."""
    out: list[Message] = [UserMessage(text="read it again")]
    for attempt in range(2):
        call_id = f"{app_id}-tail-{attempt}"
        out.append(
            AiMessage(
                tool_requests=[ToolRequest(id=call_id, name="read_file", arguments=ARGUMENTS)]
            )
        )
        out.append(ToolResult(id=call_id, tool_name="read_file", text="def check(): ...\n" * 30))
    return out


def load(store: MemoryStore, app_id: str, messages: list[Message]) -> None:
    for start in range(0, len(messages), 900):
        store.append(app_id, messages[start : start + 900])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="timed calls per row")
    parser.add_argument("--history", type=int, default=5000, help="rows of the app under test")
    parser.add_argument("--history-rows", type=int, default=64, help="rows a check reads")
    args = parser.parse_args(argv)
    # blocked verdicts are logged as warnings; thousands of them would only time the log
    logging.getLogger("memstore.guard").setLevel(logging.ERROR)

    directory = Path(tempfile.mkdtemp(prefix="memstore-bench-guard-"))
    try:
        store = MemoryStore(Settings(database_url=f"sqlite:///{directory / 'bench.db'}"))
        store.migrate()
        app = f"bench-{uuid.uuid4().hex[:8]}"
        blocked_app = app + "-repeat"
        for other in range(50):
            load(store, f"other-{other}", history(10, f"o{other}"))
        load(store, app, history(max(1, args.history // 9), "a"))
        load(store, blocked_app, history(max(1, args.history // 9), "b") + repeat_tail(app))

        guard = LoopGuard(store, side_effect_tools={"send_email"}, history_rows=args.history_rows)
        guard.execute(app, "send_email", '{"to": "bob"}', lambda: "sent")
        assert guard.check(app, "read_file", ARGUMENTS).status == "allow"
        assert guard.check(blocked_app, "read_file", ARGUMENTS).status == "blocked_no_progress"
        assert guard.check(app, "send_email", '{"to":"bob"}').status == "already_succeeded"

        baseline_query = (
            sa.select(original.c.id, original.c.payload)
            .where(original.c.app_id == app, original.c.is_deleted == sa.false())
            .order_by(original.c.id.desc())
            .limit(1)
        )

        def baseline() -> object:
            with store.engine.connect() as conn:
                return conn.execute(baseline_query).first()

        with store.engine.connect() as conn:
            rows = rows_to_messages(
                conn.execute(newest_rows_query(blocked_app, RowRequest(args.history_rows))),
                blocked_app,
                store.cipher,
            )

        cases: list[tuple[str, str, Callable[[], object]]] = [
            ("baseline: newest row, indexed", "1 SELECT", baseline),
            (
                "check, plain tool, allow",
                "1 SELECT",
                lambda: guard.check(app, "read_file", ARGUMENTS),
            ),
            (
                "check, plain tool, blocked_no_progress",
                "1 SELECT",
                lambda: guard.check(blocked_app, "read_file", ARGUMENTS),
            ),
            (
                "check, side-effect tool, already_succeeded",
                "2 SELECT",
                lambda: guard.check(app, "send_email", '{"to": "bob"}'),
            ),
            (
                "decision only (no I/O)",
                "0",
                lambda: decide_no_progress(rows, "read_file", ARGUMENTS, 2),
            ),
            ("canonical_arguments", "0", lambda: canonical_arguments(ARGUMENTS)),
        ]
        samples = time_interleaved(
            [call for _, _, call in cases],
            warmup=max(20, args.rounds // 20),
            rounds=args.rounds,
            gc_off=True,
        )
        base = samples[0].median
        print("### Loop guard: cost per check (SQLite)\n")
        print(
            f"{args.history} rows of history in the app, 50 other apps, "
            f"`history_rows={args.history_rows}`, {args.rounds} interleaved calls per row; "
            f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
            f"SQLite {sqlite3.sqlite_version} on {platform.machine()}.\n"
        )
        print("| call | statements | median µs | p95 µs | vs baseline |")
        print("| --- | --- | ---: | ---: | ---: |")
        for (label, statements, _), sample in zip(cases, samples, strict=True):
            median = sample.median
            print(
                f"| {label} | {statements} | {median * 1e6:,.0f} | {sample.p95 * 1e6:,.0f} "
                f"| {median / base:.2f}x |"
            )
        store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
