"""The stream collector's crash test: SIGKILL at random points of a streamed agent turn.

A child process (``sys.executable -c CHILD``; the database URL travels in its environment)
writes a user message, then streams one agent turn through ``store.collector(app_id)``: text
deltas, model calls with one tool call whose name and arguments arrive in fragments, and model
calls with 2-3 parallel calls whose fragments interleave; ``tool_calls()``, then
``on_tool_executed`` per call in a random order, then the final text. The child prints one line
per step, ``CALL <id>`` before and ``EXECUTED <id>`` after each ``on_tool_executed`` (flushed, so
the parent knows the call returned), and ``END`` after the ``with`` block. About a third of the
calls are first reported with a binary result (NUL characters) that the store refuses: the
child checks that it raises ``InvalidMessageError``, then reports the real result, which must
be accepted; the checks below prove nothing of the refused report was ever stored. The parent
reads a random number of lines, waits a random fraction of a millisecond and sends SIGKILL; the
child also sleeps a random fraction of a millisecond between steps. Everything random comes from a
seed per run (``MEMSTORE_CRASH_SEED`` changes the base), so a failing run can be replayed; the
exact kill instant still depends on timing.

The flush points: every ``on_tool_executed`` writes its result (one INSERT transaction) before
it returns, together with the model call's AI message (text and all its requests) when it is
that model call's first result; the turn's end writes the final ``ai`` row and the display row
in one transaction. Afterwards, per run:

1. the issue's statement, for single and parallel calls alike: every call that printed
   ``EXECUTED`` is in the original history with its request (verbatim) and its real result
   (not synthetic), and every stored result is of a call that printed ``CALL``;
2. the original history is exactly a prefix of what the child streamed, cut at a flush point:
   after the user message, after any result (never between an AI message with requests and
   its first result), or after the whole turn; ``END`` printed implies the whole turn;
3. no fabricated AI text: every ``ai`` row's text is a complete text segment the child
   streamed (SIGKILL leaves no chance to flush partial text); the turn's display row exists
   exactly when the final ``ai`` row does (one transaction);
4. the window loaded from SQL (``load_window(app_id, 200)``) validates for OpenAI, and starting
   at the user message for Anthropic and OpenAI; it is the original history plus one synthetic
   interrupted error result per request of the last written model call that has no stored
   result (a call that never printed ``EXECUTED``), and nothing synthetic anywhere else.

``-s`` shows where the kills landed (also as ``record_property``): the cut reached per run,
kills inside ``on_tool_executed`` and how many of those had committed, and how many runs
ended inside a parallel model call (answered by the loader with synthetic results).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memstore import (
    AiMessage,
    MemoryStore,
    Message,
    Settings,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.core.rows import decode_payload
from memstore.core.validate import validate
from memstore.core.window import interrupted_result, is_synthetic
from memstore.sql.schema import display, original
from tests.conftest import migrated_engine

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DATABASE_URL_ENV = "MEMSTORE_CRASH_DATABASE_URL"
BASE_SEED = int(os.environ.get("MEMSTORE_CRASH_SEED", "20240611"))
RUNS = {"sqlite": 52, "postgres": 10}
"""Children per database; every run ends in one SIGKILL (a kill point). SQLite alone has 50+,
since PostgreSQL only runs when its URL is set."""
MID_TURN_SHARE = 0.8
"""At least this share of the kills must land before the turn ended (no ``END`` printed)."""
CONCURRENCY = 4
RUN_TIMEOUT_SECONDS = 60
CHILD_MAX_SLEEP_SECONDS = 0.0006
KILL_MAX_DELAY_SECONDS = 0.003

# Runs in the child. argv[1]: the JSON job; the database URL is in the environment.
CHILD = r"""
import json, os, random, sys, time
from memstore import InvalidMessageError, MemoryStore, Settings, UserMessage

job = json.loads(sys.argv[1])
rng = random.Random(job["seed"])
store = MemoryStore(
    Settings(database_url=os.environ["MEMSTORE_CRASH_DATABASE_URL"], worker_id=job["worker_id"])
)
app = job["app_id"]
store.append(app, [UserMessage(text=job["user_text"])])
print("USER", flush=True)
with store.collector(app) as turn:
    for number, step in enumerate(job["steps"]):
        time.sleep(rng.uniform(0, job["max_sleep"]))
        kind = step[0]
        if kind == "text":
            turn.on_text(step[1])
        elif kind == "delta":
            turn.on_tool_call_delta(step[1], id=step[2], name=step[3], arguments=step[4])
        elif kind == "calls":
            got = [[r.id, r.name, r.arguments] for r in turn.tool_calls()]
            if got != step[1]:
                raise SystemExit(f"tool_calls() returned {got!r}, expected {step[1]!r}")
        elif kind == "exec":
            if step[4] is not None:  # first a result the store refuses: it must change nothing
                try:
                    turn.on_tool_executed(step[1], step[4])
                except InvalidMessageError:
                    pass
                else:
                    raise SystemExit("a result with a NUL character was accepted")
            print("CALL " + step[1], flush=True)
            turn.on_tool_executed(step[1], step[2], is_error=step[3])
            print("EXECUTED " + step[1], flush=True)
            continue
        else:
            raise SystemExit(f"unknown step {step!r}")
        print(f"STEP {number}", flush=True)
print("END", flush=True)
time.sleep(120)  # every run ends the same way: in the parent's SIGKILL
"""

# The turn: (text streamed before the tool calls, [(tool name, arguments, result, is_error)]).
ROUNDS: list[tuple[str, list[tuple[str, str, str, bool]]]] = [
    ("Let me look at the workspace first.", [("list_dir", '{"path": "."}', "a.txt b.txt", False)]),
    (
        "Reading both files at once.",
        [
            ("read_file", '{"path": "a.txt"}', "héllo 🌍", False),
            ("read_file", '{ "path" : "b.txt", "encoding": "utf-8" }', "line 1\nline 2", False),
        ],
    ),
    ("", [("write_file", '{"path": "c.txt",  "content": "héllo 🌍\\n"}', "12 bytes", False)]),
    (
        "Three checks in parallel: ",
        [
            ("stat", '{"path":"c.txt"}', "12 bytes, 0644", False),
            ("search", '{"q": "TODO", "limit": 5}', "search index unavailable", True),
            ("list_dir", "{}", "a.txt b.txt c.txt", False),
        ],
    ),
    ("One last run.", [("run_tests", '{"suite": "unit", "verbose": true}', "42 passed", False)]),
]
BINARY_RESULT = "PK\x03\x04\x00\x00 a binary file read as text"
REJECTED_SHARE = 0.3
FINAL_TEXT = "Done: a.txt and b.txt read, c.txt written, tests green ✅."
USER_TEXT = "Read a.txt and b.txt, write c.txt, then run the tests."


# -- the plan of one run -------------------------------------------------------------------------


@dataclass
class Round:
    text: str
    requests: list[ToolRequest]
    """In request order (the order the calls' first fragments arrived in)."""
    results: list[ToolResult]
    """In execution order: each one is a flush point (the first carries the AI message)."""

    def messages(self) -> list[Message]:
        return [AiMessage(text=self.text or None, tool_requests=self.requests), *self.results]


@dataclass
class Plan:
    db: str
    run: int
    seed: int
    app_id: str
    worker_id: int
    rounds: list[Round] = field(default_factory=list)
    steps: list[list[Any]] = field(default_factory=list)
    kill_after_lines: int = 0
    kill_delay: float = 0.0

    def expected(self) -> list[Message]:
        """The original history of a turn that completed: what the provider saw."""
        out: list[Message] = [UserMessage(text=USER_TEXT)]
        for round_ in self.rounds:
            out.extend(round_.messages())
        out.append(AiMessage(text=FINAL_TEXT))
        return out

    def flush_points(self) -> dict[int, str]:
        """Lengths the original history can have, with a label: after the user message, after
        each result (the AI message is written with its first result, so no cut falls between
        them), after the final text."""
        points = {1: "user"}
        length = 1
        for number, round_ in enumerate(self.rounds, start=1):
            length += 1  # the AI message with the requests
            for count in range(1, len(round_.results) + 1):
                length += 1
                points[length] = f"r{number}:{count}/{len(round_.results)}"
        points[length + 1] = "end"
        return points

    def text_segments(self) -> set[str]:
        return {r.text for r in self.rounds if r.text} | {FINAL_TEXT}

    def round_of(self, call_id: str) -> Round:
        return next(r for r in self.rounds if any(q.id == call_id for q in r.requests))

    def request_of(self, call_id: str) -> ToolRequest:
        return next(q for q in self.round_of(call_id).requests if q.id == call_id)

    def result_of(self, call_id: str) -> ToolResult:
        return next(r for r in self.round_of(call_id).results if r.id == call_id)

    def output_lines(self) -> int:
        """Lines a child that is never killed prints: USER, one per step (two per exec), END."""
        return 2 + sum(2 if step[0] == "exec" else 1 for step in self.steps)

    def describe(self) -> str:
        return (
            f"{self.db} run {self.run} (seed {self.seed}, app {self.app_id}): SIGKILL after "
            f"{self.kill_after_lines} of {self.output_lines()} lines + "
            f"{self.kill_delay * 1000:.2f} ms"
        )


def pieces(rng: random.Random, text: str, most: int) -> list[str]:
    out: list[str] = []
    start = 0
    while start < len(text):
        size = rng.randint(1, most)
        out.append(text[start : start + size])
        start += size
    return out


def make_plan(db: str, run: int, worker_id: int) -> Plan:
    seed = BASE_SEED * 1000 + run + (500 if db == "postgres" else 0)
    rng = random.Random(seed)
    plan = Plan(db, run, seed, f"crash-{uuid.uuid4().hex[:10]}-{run}", worker_id)
    for number, (text, calls) in enumerate(ROUNDS, start=1):
        plan.steps.extend(["text", piece] for piece in pieces(rng, text, 12))
        fragments: list[list[list[Any]]] = []
        for index, (name, arguments, _, _) in enumerate(calls):
            call_id = f"call_{run}_{number}{index}"
            cut = rng.randint(1, len(name))  # the name arrives in one or two fragments
            own: list[list[Any]] = [["delta", index, call_id, name[:cut], None]]
            if name[cut:]:
                own.append(["delta", index, None, name[cut:], None])
            own.extend(["delta", index, None, None, piece] for piece in pieces(rng, arguments, 8))
            fragments.append(own)
        order: list[str] = []  # request order: the order of the calls' first fragments
        while any(fragments):
            queue = rng.choice([queue for queue in fragments if queue])
            step = queue.pop(0)
            if step[2] is not None:
                order.append(step[2])
            plan.steps.append(step)
        specs = {f"call_{run}_{number}{index}": spec for index, spec in enumerate(calls)}
        requests = [
            ToolRequest(id=call_id, name=specs[call_id][0], arguments=specs[call_id][1])
            for call_id in order
        ]
        plan.steps.append(["calls", [[r.id, r.name, r.arguments] for r in requests]])
        executed = list(order)
        rng.shuffle(executed)
        results: list[ToolResult] = []
        for call_id in executed:
            name, _, result, is_error = specs[call_id]
            results.append(ToolResult(id=call_id, tool_name=name, text=result, is_error=is_error))
            # some calls are first reported with a binary (NUL) result the store refuses; the
            # clean report after it must be accepted and nothing of the first may be stored
            rejected = BINARY_RESULT if rng.random() < REJECTED_SHARE else None
            plan.steps.append(["exec", call_id, result, is_error, rejected])
        plan.rounds.append(Round(text, requests, results))
    plan.steps.extend(["text", piece] for piece in pieces(rng, FINAL_TEXT, 12))
    # Kill after 1 .. (all lines but END) lines: from right after the user message was written
    # to right after the last text delta; the delay lets the child run on a little. Half the
    # runs aim at a CALL/EXECUTED line: inside on_tool_executed (a flush in flight) or between
    # the results of a parallel model call, the points that matter most.
    lines = ["USER"]
    for step in plan.steps:
        lines.extend(["CALL", "EXECUTED"] if step[0] == "exec" else ["STEP"])
    if rng.random() < 0.5:
        plan.kill_after_lines = rng.randint(1, len(lines))
    else:
        plan.kill_after_lines = 1 + rng.choice(
            [n for n, line in enumerate(lines) if line in ("CALL", "EXECUTED")]
        )
    plan.kill_delay = 0.0 if rng.random() < 0.3 else rng.uniform(0, KILL_MAX_DELAY_SECONDS)
    return plan


# -- running a child -----------------------------------------------------------------------------


@dataclass
class Outcome:
    plan: Plan
    lines: list[str]
    returncode: int
    stderr: str
    timed_out: bool

    def executed(self) -> list[str]:
        return [line.split(" ", 1)[1] for line in self.lines if line.startswith("EXECUTED ")]

    def called(self) -> list[str]:
        return [line.split(" ", 1)[1] for line in self.lines if line.startswith("CALL ")]


def run_child(plan: Plan, database_url: str, workdir: Path) -> Outcome:
    job = {
        "seed": plan.seed,
        "app_id": plan.app_id,
        "worker_id": plan.worker_id,
        "user_text": USER_TEXT,
        "steps": plan.steps,
        "max_sleep": CHILD_MAX_SLEEP_SECONDS,
    }
    env = {**os.environ, DATABASE_URL_ENV: database_url, "PYTHONPATH": str(REPO)}
    stderr_path = workdir / f"child-{plan.db}-{plan.run}.stderr"
    with stderr_path.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(job)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            encoding="utf-8",
        )
    expired = threading.Event()

    def watchdog() -> None:
        expired.set()
        child.kill()

    timer = threading.Timer(RUN_TIMEOUT_SECONDS, watchdog)
    timer.start()
    assert child.stdout is not None
    lines: list[str] = []
    try:
        while len(lines) < plan.kill_after_lines:
            line = child.stdout.readline()
            if not line:
                break  # the child exited on its own: reported by its return code
            lines.append(line.rstrip("\n"))
        if len(lines) == plan.kill_after_lines:
            if plan.kill_delay:
                time.sleep(plan.kill_delay)
            child.send_signal(signal.SIGKILL)
        # what the child printed before it died is still in the pipe
        lines.extend(child.stdout.read().splitlines())
        returncode = child.wait()
    finally:
        timer.cancel()
        child.stdout.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    return Outcome(plan, lines, returncode, stderr_path.read_text(), expired.is_set())


# -- checking what survived ----------------------------------------------------------------------


@dataclass
class Tally:
    runs: int = 0
    mid_turn_kills: int = 0
    killed_in_tool_call: Counter[str] = field(default_factory=Counter)
    """Kills while on_tool_executed ran (its flush may be in flight): "first" when it was the
    model call's first result (the AI message in the same transaction), else "later"."""
    tool_call_committed: Counter[str] = field(default_factory=Counter)
    """...of which the result had been committed anyway."""
    executed_single: int = 0
    executed_parallel: int = 0
    """Calls that printed EXECUTED (all of them durable, asserted)."""
    open_model_calls: int = 0
    """Runs whose history ends inside a model call: some requests without a stored result."""
    synthetic_results: int = 0
    """...answered by the loader with synthetic interrupted results."""
    cuts: Counter[str] = field(default_factory=Counter)


def original_history(engine: Engine, app_id: str) -> list[Message]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(original.c.id, original.c.payload)
            .where(original.c.app_id == app_id, original.c.is_deleted == sa.false())
            .order_by(original.c.id)
        )
        return [decode_payload(row.payload, row.id) for row in rows]


def display_rows(engine: Engine, app_id: str) -> int:
    with engine.connect() as conn:
        query = sa.select(sa.func.count()).where(display.c.app_id == app_id)
        return int(conn.execute(query).scalar() or 0)


def check_run(store: MemoryStore, outcome: Outcome, tally: Tally) -> None:
    plan = outcome.plan
    where = f"{plan.describe()}; the child printed {outcome.lines}"
    assert not outcome.timed_out, f"the child hung ({RUN_TIMEOUT_SECONDS} s): {where}"
    assert outcome.returncode == -signal.SIGKILL, (
        f"the child exited with {outcome.returncode} before the SIGKILL: {where}\n{outcome.stderr}"
    )
    assert outcome.lines[:1] == ["USER"], where
    tally.runs += 1
    turn_ended = "END" in outcome.lines
    tally.mid_turn_kills += not turn_ended

    history = original_history(store.engine, plan.app_id)
    expected = plan.expected()
    assert not any(is_synthetic(m) for m in history), f"a synthetic row was stored: {where}"
    requests = {r.id: r for m in history if isinstance(m, AiMessage) for r in m.tool_requests}
    results = {m.id: m for m in history if isinstance(m, ToolResult)}
    executed = outcome.executed()

    # (1) the statement: every call that returned from on_tool_executed is durable,
    # its request verbatim and its real result, whether its model call had one call or more
    for call_id in executed:
        request, result = plan.request_of(call_id), plan.result_of(call_id)
        assert requests.get(call_id) == request, (
            f"{call_id} returned from on_tool_executed but its request is not durable "
            f"(stored: {requests.get(call_id)}): {where}"
        )
        stored = results.get(call_id)
        assert stored == result and not is_synthetic(stored), (
            f"{call_id} returned from on_tool_executed but its result is not durable "
            f"(stored: {stored}): {where}"
        )
        if len(plan.round_of(call_id).requests) == 1:
            tally.executed_single += 1
        else:
            tally.executed_parallel += 1
    # ...and no result is written before its on_tool_executed was called
    called = outcome.called()
    assert all(call_id in called for call_id in results), f"{sorted(results)}: {where}"

    # (3) no fabricated AI reply: every ai row's text is a whole segment the child streamed
    segments = plan.text_segments()
    for message in history:
        if isinstance(message, AiMessage) and message.text is not None:
            assert message.text in segments, f"ai text {message.text!r} never streamed: {where}"
    # (2) ...and the history is what the child streamed, cut at a flush point
    cuts = plan.flush_points()
    assert len(history) in cuts and history == expected[: len(history)], (
        f"the original history is not a prefix of the streamed turn cut at a flush point "
        f"{sorted(cuts)}:\n{history}\nexpected a prefix of:\n{expected}\n{where}"
    )
    complete = len(history) == len(expected)
    assert complete or not turn_ended, f"END was printed but the turn is not durable: {where}"
    # the final ai row and the turn's display row are one transaction (+1: the user's row)
    assert display_rows(store.engine, plan.app_id) == (2 if complete else 1), where
    tally.cuts[cuts[len(history)]] += 1

    # (4) the loaded windows: valid; the history plus synthetic interrupted results for the
    # requests of the last written model call without a stored result, nothing else synthetic
    last_call = next(
        (m for m in reversed(history) if isinstance(m, AiMessage) and m.tool_requests), None
    )
    unanswered = [r for r in last_call.tool_requests if r.id not in results] if last_call else []
    for request in unanswered:
        assert request.id not in executed, f"{request.id} returned but is unanswered: {where}"
    window = store.load_window(plan.app_id, 200)
    assert validate(window, "openai") == [], where
    assert window[: len(history)] == history, f"the window is not the history:\n{window}\n{where}"
    answers = window[len(history) :]
    assert all(is_synthetic(m) and isinstance(m, ToolResult) and m.is_error for m in answers), (
        f"not synthetic interrupted results: {answers}: {where}"
    )
    by_id = sorted(answers, key=lambda m: m.id if isinstance(m, ToolResult) else "")
    want = sorted((interrupted_result(r.id, r.name) for r in unanswered), key=lambda m: m.id)
    assert by_id == want, f"synthetic results {answers}, expected {want}: {where}"
    from_user = store.load_window(plan.app_id, 200, start_at_user=True)
    assert validate(from_user, "anthropic") == [], where
    assert validate(from_user, "openai") == [], where
    assert from_user == window, where  # the history starts at the user message
    if unanswered:
        tally.open_model_calls += 1
        tally.synthetic_results += len(unanswered)

    # where the kill landed: inside an on_tool_executed call (its flush may be in flight)?
    last = outcome.lines[-1]
    if last.startswith("CALL "):
        call_id = last.split(" ", 1)[1]
        kind = "first" if plan.round_of(call_id).results[0].id == call_id else "later"
        tally.killed_in_tool_call[kind] += 1
        tally.tool_call_committed[kind] += call_id in results


def report(
    db: str, plan: Plan, tally: Tally, seconds: float, record: Callable[[str, object], None]
) -> str:
    record("kill_points", tally.runs)
    record("mid_turn_kills", tally.mid_turn_kills)
    record("open_model_calls", tally.open_model_calls)
    record("synthetic_results", tally.synthetic_results)
    order = list(plan.flush_points().values())
    cuts = ", ".join(f"{label}: {tally.cuts[label]}" for label in order if tally.cuts[label])
    inside = ", ".join(
        f"{tally.killed_in_tool_call[kind]} {kind} results "
        f"({tally.tool_call_committed[kind]} already committed)"
        for kind in ("first", "later")
    )
    return (
        f"\n[collector crash {db}] {tally.runs} SIGKILLs ({tally.mid_turn_kills} mid-turn) in "
        f"{seconds:.1f} s; cuts reached -> runs {{{cuts}}}; kills inside on_tool_executed: "
        f"{inside}; EXECUTED calls, all durable: {tally.executed_single} single, "
        f"{tally.executed_parallel} parallel; runs ending inside a model call: "
        f"{tally.open_model_calls} ({tally.synthetic_results} synthetic interrupted results)"
    )


# -- the test ------------------------------------------------------------------------------------


def sqlite_urls(workdir: Path, count: int) -> list[str]:
    """A migrated SQLite file per run, copied from one template (migrating once)."""
    template = workdir / "template.db"
    with MemoryStore(Settings(database_url=f"sqlite:///{template}")) as store:
        store.migrate()
    urls = []
    for run in range(count):
        target = workdir / f"run-{run}.db"
        shutil.copyfile(template, target)
        for suffix in ("-wal", "-shm"):  # normally checkpointed away when the store closed
            if Path(f"{template}{suffix}").exists():
                shutil.copyfile(f"{template}{suffix}", f"{target}{suffix}")
        urls.append(f"sqlite:///{target}")
    return urls


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_sigkill_mid_turn_loses_no_executed_call(
    db: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    record_property: Callable[[str, object], None],
) -> None:
    runs = RUNS[db]
    if db == "sqlite":
        urls = sqlite_urls(tmp_path, runs)
    else:  # skipped unless MEMSTORE_TEST_POSTGRES_URL is set; migrated once per session
        engine = migrated_engine(db, tmp_path_factory)
        urls = [engine.url.render_as_string(hide_password=False)] * runs
    worker_ids = random.Random(BASE_SEED).sample(range(1, 1024), runs)
    plans = [make_plan(db, run, worker_ids[run]) for run in range(runs)]

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        outcomes = list(pool.map(lambda p, u: run_child(p, u, tmp_path), plans, urls))

    tally = Tally()
    for outcome, url in zip(outcomes, urls, strict=True):
        if db == "sqlite":
            with MemoryStore(Settings(database_url=url)) as store:
                check_run(store, outcome, tally)
        else:
            with MemoryStore(Settings(database_url=url), engine=engine) as store:
                check_run(store, outcome, tally)
                store.purge(outcome.plan.app_id)
    print(report(db, plans[0], tally, time.monotonic() - started, record_property))

    assert tally.runs == runs
    summary = report(db, plans[0], tally, 0, lambda *_: None)
    assert tally.mid_turn_kills >= MID_TURN_SHARE * runs, summary
    # the kills did land after tools had run, single and parallel
    assert tally.executed_single > 0 and tally.executed_parallel > 0, summary
