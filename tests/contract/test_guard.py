"""The loop guard on every database: the four sample groups of a production acceptance, budgets,
side-effect states, verdict serialisation and the redacted debug log.

Each test runs on SQLite and PostgreSQL (and MariaDB when its URL is set), on the session's
migrated databases with a fresh app id, through a small simulated agent service: the AI message
with the requests is written, each call goes through the guard, the results (or the verdicts)
are written as tool results.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
import sqlalchemy as sa

from memstore import (
    AiMessage,
    ConfigurationError,
    InvalidInputError,
    MemoryStore,
    Settings,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.guard import (
    Allow,
    AlreadySucceeded,
    BlockedBudget,
    BlockedNoProgress,
    Budgets,
    ExecutionStateError,
    GuardedCall,
    HumanReviewRequired,
    LoopGuard,
    ToolFailed,
    Turn,
    parse_verdict,
)
from memstore.sql.schema import original
from tests.conftest import migrated_engine

DATABASES = ["sqlite", "postgres", "mysql"]

ARGS = '{"path": "a.txt"}'
SAME_ARGS_REWRITTEN = '{\n  "path" : "a.txt"\n}'


@pytest.fixture(params=DATABASES)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MemoryStore]:
    """A store on the session's migrated database (in-process window cache)."""
    engine = migrated_engine(request.param, tmp_path_factory)
    url = engine.url.render_as_string(hide_password=False)
    with MemoryStore(Settings(database_url=url), engine=engine) as opened:
        yield opened


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Service:
    """A minimal agent service: writes each model round, checks every call with the guard,
    runs the allowed ones and writes the results (or the verdicts) back."""

    def __init__(self, store: MemoryStore, guard: LoopGuard, app_id: str) -> None:
        self.store = store
        self.guard = guard
        self.app_id = app_id
        self.runs: Counter[str] = Counter()
        self.outputs: dict[str, str] = {}
        self.turn: Turn | None = None

    def user(self, text: str) -> Turn:
        self.store.append(self.app_id, [UserMessage(text=text)])
        self.turn = self.guard.turn(self.app_id)
        return self.turn

    def tool(self, name: str, arguments: str) -> str:
        self.runs[name] += 1
        return self.outputs.get(name, f"{name} output")

    def round(self, *calls: tuple[str, str], cost: float = 0.0) -> list[GuardedCall]:
        """One model call that requested ``calls`` (tool name, raw arguments)."""
        assert self.turn is not None
        self.turn.record_model_call(cost)
        requests = [
            ToolRequest(id=f"call_{uuid.uuid4().hex[:8]}", name=name, arguments=arguments)
            for name, arguments in calls
        ]
        self.store.append(self.app_id, [AiMessage(tool_requests=requests)])
        outcomes = []
        results = []
        for request in requests:
            run = functools.partial(self.tool, request.name, request.arguments)
            outcome = self.guard.execute(
                self.app_id,
                request.name,
                request.arguments,
                run,
                turn=self.turn,
                call_id=request.id,
            )
            outcomes.append(outcome)
            results.append(outcome.tool_result(request.id, request.name))
        self.store.append(self.app_id, results)
        return outcomes

    def reply(self, text: str) -> None:
        self.store.append(self.app_id, [AiMessage(text=text)])


def newest_row_id(store: MemoryStore, app_id: str) -> int:
    with store.engine.connect() as conn:
        value = conn.execute(
            sa.select(sa.func.max(original.c.id)).where(original.c.app_id == app_id)
        ).scalar_one()
    assert isinstance(value, int)
    return value


# -- 1. a normal call runs once and the turn ends ------------------------------------------------


def test_a_normal_call_runs_once_and_the_turn_ends(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    service = Service(store, guard, app_id)
    turn = service.user("What is in a.txt? Then mail it to Bob.")

    (read,) = service.round(("read_file", ARGS))
    (send,) = service.round(("send_email", '{"to": "bob", "body": "hello"}'))
    service.reply("a.txt says hello; I mailed it to Bob.")

    assert read.verdict == Allow() and read.executed and not read.is_error
    assert send.verdict.status == "allow" and send.executed
    assert service.runs == {"read_file": 1, "send_email": 1}
    assert turn.usage.tool_calls == 2 and turn.usage.side_effect_calls == 1
    key = guard.idempotency_key(app_id, "send_email", '{"body": "hello", "to": "bob"}')
    execution = guard.execution(app_id, key)
    assert execution is not None
    assert (execution.state, execution.attempts, execution.result) == (
        "succeeded",
        1,
        "send_email output",
    )
    window = store.load_window(app_id)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "ai", "tool_result", "ai"]
    assert [m.text for m in window if isinstance(m, ToolResult)] == [
        "read_file output",
        "send_email output",
    ]


# -- 2. changed arguments are allowed ------------------------------------------------------------


def test_a_second_call_with_changed_arguments_is_allowed(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store)
    service = Service(store, guard, app_id)
    service.user("Read the files")
    service.round(("read_file", ARGS))
    service.round(("read_file", ARGS))
    # the same call a third time would be blocked, but other arguments are a different call
    assert guard.check(app_id, "read_file", SAME_ARGS_REWRITTEN).status == "blocked_no_progress"
    for changed in ('{"path": "b.txt"}', '{"path": "a.txt", "lines": 10}', '{"path": "A.txt"}'):
        (outcome,) = service.round(("read_file", changed))
        assert outcome.verdict == Allow() and outcome.executed
    assert service.runs["read_file"] == 5


def test_an_identical_call_whose_result_changed_is_allowed(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store)
    service = Service(store, guard, app_id)
    service.user("Wait for the build")
    for status in ("queued", "running", "done"):
        service.outputs["build_status"] = status
        (outcome,) = service.round(("build_status", "{}"))
        assert outcome.executed, status
    (outcome,) = service.round(("build_status", "{}"))  # done, done: no change any more
    assert outcome.executed
    (outcome,) = service.round(("build_status", "{}"))
    assert isinstance(outcome.verdict, BlockedNoProgress)
    assert service.runs["build_status"] == 4


# -- 3. identical calls with identical results are blocked at the configured repeat ---------------


@pytest.mark.parametrize("repeats", [1, 2, 3])
def test_an_identical_call_is_blocked_at_the_configured_repeat(
    store: MemoryStore, app_id: str, repeats: int
) -> None:
    guard = LoopGuard(store, max_identical_repeats=repeats)
    service = Service(store, guard, app_id)
    service.user("Read a.txt")
    for attempt in range(repeats):
        arguments = ARGS if attempt % 2 else SAME_ARGS_REWRITTEN  # same canonical arguments
        (outcome,) = service.round(("read_file", arguments))
        assert outcome.executed, attempt

    before = newest_row_id(store, app_id)
    verdict = guard.check(app_id, "read_file", ARGS)
    expected = {
        "status": "blocked_no_progress",
        "reason": "same_tool_same_arguments_no_state_change",
        "action": "human_review_required",
        "checkpoint_id": before,
    }
    assert verdict.model_dump() == expected
    assert json.loads(verdict.model_dump_json()) == expected
    assert verdict.model_dump_json() == json.dumps(expected, separators=(",", ":"))
    assert parse_verdict(verdict.model_dump_json()) == verdict

    (outcome,) = service.round(("read_file", ARGS))
    assert isinstance(outcome.verdict, BlockedNoProgress) and not outcome.executed
    assert service.runs["read_file"] == repeats
    stored = store.load_window(app_id)[-1]
    assert isinstance(stored, ToolResult) and stored.is_error  # stored like any result
    assert json.loads(stored.text)["status"] == "blocked_no_progress"

    # the stored verdict does not reset the run: the next identical call is blocked again,
    # by another instance too (the decision reads SQL, nothing in memory)
    other = LoopGuard(store, max_identical_repeats=repeats)
    assert isinstance(other.check(app_id, "read_file", ARGS), BlockedNoProgress)
    # a new user message starts a new run
    Service(store, other, app_id).user("Read a.txt again please")
    assert other.check(app_id, "read_file", ARGS) == Allow()


def test_no_progress_is_per_app(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store)
    service = Service(store, guard, app_id)
    service.user("Read")
    service.round(("read_file", ARGS))
    service.round(("read_file", ARGS))
    assert isinstance(guard.check(app_id, "read_file", ARGS), BlockedNoProgress)
    assert guard.check(app_id + "-other", "read_file", ARGS) == Allow()
    assert guard.check(app_id.upper(), "read_file", ARGS) == Allow()  # ids are exact


# -- 4. side effects happen once -----------------------------------------------------------------


def test_a_succeeded_side_effect_is_not_executed_again_on_retry(
    store: MemoryStore, app_id: str
) -> None:
    guard = LoopGuard(store, side_effect_tools={"create_order"})
    sent: list[str] = []

    def create() -> str:
        sent.append("order")
        return "order #17 created"

    first = guard.execute(app_id, "create_order", '{"item": "book", "qty": 1}', create)
    retry = guard.execute(app_id, "create_order", '{ "qty": 1, "item": "book" }', create)
    assert first.executed and sent == ["order"]
    assert not retry.executed and sent == ["order"]
    assert isinstance(retry.verdict, AlreadySucceeded)
    assert retry.text == "order #17 created" and not retry.is_error
    replayed = retry.tool_result("call_2", "create_order")
    assert (replayed.text, replayed.is_error) == ("order #17 created", False)
    assert retry.verdict.model_dump() == {
        "status": "already_succeeded",
        "reason": "side_effect_already_succeeded",
        "idempotency_key": guard.idempotency_key(app_id, "create_order", '{"item":"book","qty":1}'),
        "result": "order #17 created",
    }
    # other arguments are another order
    assert guard.execute(app_id, "create_order", '{"item": "book", "qty": 2}', create).executed
    assert len(sent) == 2


def test_a_side_effect_is_not_executed_again_after_a_service_timeout(
    store: MemoryStore, app_id: str
) -> None:
    """The service stops waiting for the tool (timeout) and retries while the first execution
    still runs, and again after it completed: the tool runs once."""
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def send() -> str:
        runs.append(1)
        started.set()
        release.wait(30)
        return "message 42 sent"

    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(guard.execute, app_id, "send_email", '{"to": "bob"}', send)
        assert started.wait(30)  # the tool runs (however slow the claim before it was)
        with pytest.raises(FutureTimeout):
            pending.result(timeout=0.3)  # the service's timeout fires; the tool is running
        during = guard.execute(app_id, "send_email", '{"to": "bob"}', send)
        assert isinstance(during.verdict, HumanReviewRequired)
        assert during.verdict.execution_state == "running" and not during.executed
        assert during.is_error
        release.set()
        assert pending.result(timeout=30).executed

    after = guard.execute(app_id, "send_email", '{"to": "bob"}', send)
    assert isinstance(after.verdict, AlreadySucceeded) and after.text == "message 42 sent"
    assert runs == [1]


def test_a_tool_timeout_leaves_the_outcome_unknown_until_a_person_resolves_it(
    store: MemoryStore, app_id: str
) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    runs: list[str] = []

    def send_then_time_out() -> str:
        runs.append("sent")  # the email left, the reply never came back
        raise TimeoutError("SMTP server did not answer")

    with pytest.raises(TimeoutError):
        guard.execute(app_id, "send_email", '{"to": "bob"}', send_then_time_out)
    key = guard.idempotency_key(app_id, "send_email", '{"to": "bob"}')
    execution = guard.execution(app_id, key)
    assert execution is not None and execution.state == "unknown"

    retry = guard.execute(app_id, "send_email", '{"to": "bob"}', send_then_time_out)
    assert retry.verdict.model_dump() == {
        "status": "human_review_required",
        "reason": "side_effect_unknown",
        "action": "human_review_required",
        "idempotency_key": key,
        "execution_state": "unknown",
    }
    assert runs == ["sent"]
    assert [e.idempotency_key for e in guard.executions(app_id, states=["unknown"])] == [key]

    guard.succeed(app_id, key, "confirmed by the operator: sent")  # a person checked the outbox
    after = guard.execute(app_id, "send_email", '{"to": "bob"}', send_then_time_out)
    assert isinstance(after.verdict, AlreadySucceeded)
    assert after.text == "confirmed by the operator: sent" and runs == ["sent"]


def test_a_definite_failure_may_be_retried(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"charge"})
    attempts: list[str] = []

    def declined() -> str:
        attempts.append("declined")
        raise ToolFailed("card declined; nothing charged")

    def approved() -> str:
        attempts.append("approved")
        return "charged 10 EUR"

    first = guard.execute(app_id, "charge", '{"eur": 10}', declined)
    assert first.executed and first.is_error and first.text == "card declined; nothing charged"
    key = guard.idempotency_key(app_id, "charge", '{"eur": 10}')
    failed = guard.execution(app_id, key)
    assert failed is not None and (failed.state, failed.attempts) == ("failed", 1)

    second = guard.execute(app_id, "charge", '{"eur": 10}', approved)
    assert second.executed and second.text == "charged 10 EUR"
    third = guard.execute(app_id, "charge", '{"eur": 10}', approved)
    assert isinstance(third.verdict, AlreadySucceeded)
    assert attempts == ["declined", "approved"]
    done = guard.execution(app_id, key)
    assert done is not None and (done.state, done.attempts) == ("succeeded", 2)


def test_a_key_left_running_by_a_crash_needs_a_person(store: MemoryStore, app_id: str) -> None:
    crashed = LoopGuard(store, side_effect_tools={"send_email"})
    verdict = crashed.check(app_id, "send_email", '{"to": "bob"}')
    assert isinstance(verdict, Allow) and verdict.idempotency_key is not None
    pending = crashed.execution(app_id, verdict.idempotency_key)
    assert pending is not None and (pending.state, pending.attempts) == ("pending", 0)
    crashed.start(app_id, "send_email", '{"to": "bob"}', call_id="call_1")
    # ... the process dies here, after the start and before the outcome

    restarted = LoopGuard(store, side_effect_tools={"send_email"})
    runs: list[int] = []

    def send() -> str:
        runs.append(1)
        return "sent again"

    outcome = restarted.execute(app_id, "send_email", '{"to":"bob"}', send)
    assert isinstance(outcome.verdict, HumanReviewRequired)
    assert outcome.verdict.reason == "side_effect_running" and runs == []
    with pytest.raises(ExecutionStateError) as refused:
        restarted.start(app_id, "send_email", '{"to": "bob"}')
    assert isinstance(refused.value.verdict, HumanReviewRequired)

    restarted.fail(app_id, verdict.idempotency_key, "operator: never sent")
    assert restarted.execute(app_id, "send_email", '{"to": "bob"}', lambda: "sent").executed


def test_a_pending_key_is_started_by_one_caller_only(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    one = guard.check(app_id, "send_email", '{"to": "bob"}')
    two = LoopGuard(store, side_effect_tools={"send_email"}).check(
        app_id, "send_email", '{"to": "bob"}'
    )
    assert one == two and isinstance(one, Allow)  # both instances may try...
    started = guard.start(app_id, "send_email", '{"to": "bob"}')
    assert started.state == "running" and started.attempts == 1
    with pytest.raises(ExecutionStateError):  # ...only one starts it
        guard.start(app_id, "send_email", '{"to": "bob"}')


def test_concurrent_callers_execute_a_side_effect_once(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    runs: list[int] = []
    lock = threading.Lock()

    def send() -> str:
        with lock:
            runs.append(1)
        time.sleep(0.05)
        return "sent"

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(
            pool.map(lambda _: guard.execute(app_id, "send_email", '{"to": "bob"}', send), range(6))
        )
    assert len(runs) == 1
    assert sum(outcome.executed for outcome in outcomes) == 1
    assert {o.verdict.status for o in outcomes} <= {
        "allow",
        "already_succeeded",
        "human_review_required",
    }


def test_caller_supplied_idempotency_keys(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_reminder"})
    runs: list[str] = []

    def send() -> str:
        runs.append("x")
        return f"reminder {len(runs)}"

    monday = guard.execute(app_id, "send_reminder", "{}", send, idempotency_key="reminder-mon")
    tuesday = guard.execute(app_id, "send_reminder", "{}", send, idempotency_key="reminder-tue")
    again = guard.execute(app_id, "send_reminder", '{"x": 1}', send, idempotency_key="reminder-mon")
    assert monday.executed and tuesday.executed and not again.executed
    assert again.text == "reminder 1" and len(runs) == 2
    with pytest.raises(InvalidInputError):
        guard.check(app_id, "read_file", ARGS, idempotency_key="k")  # not side-effecting
    with pytest.raises(InvalidInputError):
        guard.check(app_id, "send_reminder", "{}", idempotency_key="")


def test_execution_transitions_are_checked(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    key = guard.idempotency_key(app_id, "send_email", "{}")
    with pytest.raises(ExecutionStateError) as missing:
        guard.succeed(app_id, key, "sent")
    assert missing.value.execution is None
    guard.start(app_id, "send_email", "{}")
    guard.succeed(app_id, key, "sent")
    transitions: list[Callable[[], object]] = [
        lambda: guard.succeed(app_id, key, "sent twice"),
        lambda: guard.fail(app_id, key, "no"),
        lambda: guard.mark_unknown(app_id, key),
    ]
    for transition in transitions:
        with pytest.raises(ExecutionStateError):
            transition()
    execution = guard.execution(app_id, key)
    assert execution is not None and execution.result == "sent"
    with pytest.raises(InvalidInputError):
        guard.succeed(app_id, key, "nul \x00")


# -- budgets -------------------------------------------------------------------------------------


def test_tool_round_budget(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, budgets=Budgets(tool_rounds=2))
    service = Service(store, guard, app_id)
    service.user("go")
    assert service.round(("a", "{}"), ("b", "{}"))[1].executed  # round 1, two parallel calls
    assert service.round(("c", "{}"))[0].executed  # round 2
    (outcome,) = service.round(("d", "{}"))  # round 3
    assert outcome.verdict.model_dump() == {
        "status": "blocked_budget",
        "reason": "turn_budget_exhausted",
        "budget": "tool_rounds",
        "limit": 2,
        "used": 3,
        "action": "end_turn",
    }
    assert not outcome.executed and service.runs["d"] == 0
    assert outcome.tool_result("c9", "d").is_error


def test_tool_call_budget_counts_only_calls_that_ran(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, budgets=Budgets(tool_calls=3))
    service = Service(store, guard, app_id)
    turn = service.user("go")
    service.round(("read", ARGS))
    service.round(("read", ARGS))
    assert isinstance(service.round(("read", ARGS))[0].verdict, BlockedNoProgress)
    assert turn.usage.tool_calls == 2  # the blocked call did not use the budget
    assert service.round(("list", "{}"))[0].executed
    (outcome,) = service.round(("stat", "{}"))
    assert isinstance(outcome.verdict, BlockedBudget) and outcome.verdict.budget == "tool_calls"
    assert (outcome.verdict.limit, outcome.verdict.used) == (3, 3)


def test_wall_clock_budget(store: MemoryStore, app_id: str) -> None:
    clock = FakeClock()
    guard = LoopGuard(store, budgets=Budgets(wall_clock_seconds=30), clock=clock)
    turn = guard.turn(app_id)
    assert guard.check(app_id, "a", "{}", turn=turn).allowed
    clock.now += 29.5
    assert guard.check(app_id, "b", "{}", turn=turn).allowed
    clock.now += 0.5
    verdict = guard.check(app_id, "c", "{}", turn=turn)
    assert isinstance(verdict, BlockedBudget) and verdict.budget == "wall_clock_seconds"
    assert verdict.used == 30.0 and verdict.limit == 30.0
    assert guard.check(app_id, "c", "{}", turn=guard.turn(app_id)).allowed  # a new turn


def test_cost_budget(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, budgets=Budgets(cost=1.0))
    turn = guard.turn(app_id)
    turn.record_model_call(cost=0.6)
    assert guard.check(app_id, "a", "{}", turn=turn).allowed
    turn.record_model_call(cost=0.6)
    verdict = guard.check(app_id, "b", "{}", turn=turn)
    assert isinstance(verdict, BlockedBudget) and verdict.budget == "cost"
    assert verdict.used == pytest.approx(1.2)
    with pytest.raises(InvalidInputError):
        turn.record_model_call(cost=-1)
    with pytest.raises(InvalidInputError):
        turn.record_model_call(cost=float("nan"))


def test_side_effect_budget(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"}, budgets=Budgets(side_effect_calls=1))
    service = Service(store, guard, app_id)
    service.user("mail everyone")
    assert service.round(("send_email", '{"to": "a"}'))[0].executed
    (second,) = service.round(("send_email", '{"to": "b"}'))
    assert isinstance(second.verdict, BlockedBudget)
    assert second.verdict.budget == "side_effect_calls" and not second.executed
    assert service.round(("read", "{}"))[0].executed  # plain tools are not side effects
    assert service.runs == {"send_email": 1, "read": 1}
    key = guard.idempotency_key(app_id, "send_email", '{"to": "b"}')
    assert guard.execution(app_id, key) is None  # nothing recorded for a blocked call


def test_budget_and_guard_settings_are_validated(store: MemoryStore, app_id: str) -> None:
    with pytest.raises(ConfigurationError):
        Budgets(tool_rounds=0)
    with pytest.raises(ConfigurationError):
        Budgets(cost=-1)
    with pytest.raises(ConfigurationError):
        LoopGuard(store, max_identical_repeats=0)
    with pytest.raises(ConfigurationError):
        LoopGuard(store, max_identical_repeats=4, history_rows=10)
    with pytest.raises(ConfigurationError):
        LoopGuard(store, side_effect_tools="send_email")
    guard = LoopGuard(store, budgets=Budgets(tool_rounds=None, tool_calls=None))
    turn = guard.turn(app_id)
    with pytest.raises(InvalidInputError):
        guard.check(app_id + "x", "a", "{}", turn=turn)  # a turn of another app
    with pytest.raises(InvalidInputError):
        guard.check(app_id, "", "{}")
    with pytest.raises(InvalidInputError):
        guard.check(app_id, "a", 42)  # type: ignore[arg-type]
    assert guard.check(app_id, "a", {"k": [1, 2]}).allowed  # a mapping is accepted


# -- async, logs, settings -----------------------------------------------------------------------


def test_async_forms(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    runs: list[int] = []

    async def send() -> str:
        runs.append(1)
        await asyncio.sleep(0)
        return "sent"

    async def scenario() -> tuple[GuardedCall, GuardedCall]:
        assert (await guard.acheck(app_id, "read", ARGS)).allowed
        first = await guard.aexecute(app_id, "send_email", '{"to": "bob"}', send)
        again = await guard.aexecute(app_id, "send_email", '{"to":"bob"}', send)
        return first, again

    first, again = asyncio.run(scenario())
    assert first.executed and isinstance(again.verdict, AlreadySucceeded) and runs == [1]

    async def cancelled() -> None:
        async def hang() -> str:
            runs.append(2)
            await asyncio.sleep(30)
            return "never"

        task = asyncio.ensure_future(guard.aexecute(app_id, "send_email", '{"to": "eve"}', hang))
        while 2 not in runs:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    key = guard.idempotency_key(app_id, "send_email", '{"to": "eve"}')
    execution = guard.execution(app_id, key)
    assert execution is not None and execution.state == "unknown"


SECRET_ARGS = '{"path": "secret-arg-7731.txt"}'
SECRET_RESULT = "secret-result-5512"


def test_debug_log_shows_every_decision_with_text_redacted(
    store: MemoryStore, app_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"}, debug=True)
    service = Service(store, guard, app_id)
    service.outputs = {"read": SECRET_RESULT, "send_email": SECRET_RESULT}
    service.user("go")
    with caplog.at_level(logging.INFO, logger="memstore.guard"):
        service.round(("read", SECRET_ARGS))
        service.round(("read", SECRET_ARGS))
        service.round(("read", SECRET_ARGS))
        service.round(("send_email", SECRET_ARGS))
        service.round(("send_email", SECRET_ARGS))
    decisions = [r for r in caplog.records if "guard decision" in r.getMessage()]
    statuses = [re.findall(r'"status": "([a-z_]+)"', r.getMessage())[0] for r in decisions]
    assert statuses == ["allow", "allow", "blocked_no_progress", "allow", "already_succeeded"]
    assert [r.levelno for r in decisions].count(logging.WARNING) == 1
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "guard execution start" in text and "guard execution succeeded" in text
    assert "secret-arg" not in text and SECRET_RESULT not in text
    assert "identical_in_a_row=2/2" in text


def test_without_debug_only_blocked_verdicts_are_logged(
    store: MemoryStore, app_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    guard = LoopGuard(store)
    assert guard.debug is False
    service = Service(store, guard, app_id)
    service.outputs = {"read": SECRET_RESULT}
    service.user("go")
    with caplog.at_level(logging.INFO, logger="memstore.guard"):
        for _ in range(3):
            service.round(("read", SECRET_ARGS))
    messages = [r.getMessage() for r in caplog.records if r.name == "memstore.guard"]
    assert len(messages) == 1 and "blocked_no_progress" in messages[0]
    assert "secret-arg" not in messages[0]


def test_guard_debug_setting() -> None:
    assert Settings().guard_debug is False
    assert Settings.from_env({"MEMSTORE_GUARD_DEBUG": "true"}).guard_debug is True
    with pytest.raises(ConfigurationError):
        Settings.from_env({"MEMSTORE_GUARD_DEBUG": "maybe"})


def test_a_guard_follows_the_store_setting(store: MemoryStore) -> None:
    url = store.engine.url.render_as_string(hide_password=False)
    with MemoryStore(Settings(database_url=url, guard_debug=True), engine=store.engine) as other:
        assert LoopGuard(other).debug is True
        assert LoopGuard(other, debug=False).debug is False


def test_verdicts_round_trip_and_allow_has_no_result() -> None:
    verdicts = [
        Allow(),
        Allow(idempotency_key="k"),
        AlreadySucceeded(idempotency_key="k", result="r"),
        BlockedNoProgress(checkpoint_id=7),
        BlockedBudget(budget="cost", limit=1.5, used=2.0),
        HumanReviewRequired(
            reason="side_effect_running", idempotency_key="k", execution_state="running"
        ),
    ]
    for verdict in verdicts:
        assert parse_verdict(verdict.model_dump_json()) == verdict
        assert parse_verdict(verdict.model_dump()) == verdict
    with pytest.raises(InvalidInputError):
        Allow().tool_result("c", "t")
    with pytest.raises(InvalidInputError):
        parse_verdict('{"status": "blocked_no_progress"}')
    result = BlockedNoProgress(checkpoint_id=7).tool_result("c", "t")
    assert result.is_error and result.metadata == {"memstore_guard": "blocked_no_progress"}
    assert BlockedBudget(budget="tool_rounds", limit=2, used=3).model_dump_json() == (
        '{"status":"blocked_budget","reason":"turn_budget_exhausted","budget":"tool_rounds",'
        '"limit":2,"used":3,"action":"end_turn"}'
    )


def test_one_history_query_per_check_of_a_plain_tool(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    service = Service(store, guard, app_id)
    service.user("go")
    service.round(("read", ARGS))
    statements: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", count)
    try:
        guard.check(app_id, "read", ARGS)
        plain = list(statements)
        statements.clear()
        guard.check(app_id, "send_email", "{}")  # first sight: key read + history + insert
        first_side_effect = list(statements)
        statements.clear()
        guard.check(app_id, "send_email", "{}")  # pending already: key read + history
        second_side_effect = list(statements)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", count)
    selects = [s for s in plain if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1 and "chat_history_original" in selects[0]
    assert "ORDER BY" in selects[0] and "LIMIT" in selects[0]
    data = [s for s in first_side_effect if s.lstrip().upper().startswith(("SELECT", "INSERT"))]
    assert len(data) == 3
    assert len([s for s in second_side_effect if s.lstrip().upper().startswith("SELECT")]) == 2


def test_history_rows_are_bounded(store: MemoryStore, app_id: str) -> None:
    """A check reads only the newest ``history_rows`` rows: repeats older than they reach are
    not seen (the bound keeps every check O(1) in the history's length)."""
    service = Service(store, LoopGuard(store), app_id)
    service.user("go")
    service.round(("read", ARGS))
    service.round(("read", ARGS))
    store.append(app_id, [AiMessage(text=f"thinking {n}") for n in range(10)])
    assert isinstance(LoopGuard(store).check(app_id, "read", ARGS), BlockedNoProgress)
    assert LoopGuard(store, history_rows=12).check(app_id, "read", ARGS).allowed


def test_purge_removes_the_apps_tool_executions(store: MemoryStore, app_id: str) -> None:
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    verdict = guard.check(app_id, "send_email", '{"to": "a@b.c"}', turn=guard.turn(app_id))
    assert verdict.status == "allow"
    other = app_id + "-other"
    guard.check(other, "send_email", '{"to": "a@b.c"}', turn=guard.turn(other))
    assert len(guard.executions(app_id)) == 1
    report = store.purge(app_id)
    assert report.tool_executions == 1
    assert guard.executions(app_id) == []
    assert len(guard.executions(other)) == 1
    store.purge(other)
