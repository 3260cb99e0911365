"""``MemstoreMiddleware`` in a real ``langchain.agents.create_agent`` agent.

The model is :class:`~tests.adapters.lc_agents.ProviderLikeModel`: it fails every request a
provider would reject (a tool result without its call, a call without its results, a repeated
call id), so a window or state that breaks tool calling fails the run. Every case runs on
SQLite, PostgreSQL and MariaDB, sync (``invoke``/``stream`` on a ``MemoryStore``) and async
(``ainvoke``/``astream`` on an ``AsyncMemoryStore``), with and without Redis.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("langchain.agents")

from click.testing import CliRunner
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

try:  # langgraph >= 1.1 wraps a node's cancellation
    from langgraph.errors import NodeCancelledError
except ImportError:  # pragma: no cover - langgraph 1.0
    NodeCancelledError = asyncio.CancelledError  # type: ignore[misc,assignment]

from memstore import AiMessage, ToolResult, UserMessage
from memstore.adapters.langchain import MemstoreMiddleware, RunKeys
from memstore.cli import cli
from memstore.core.window import INTERRUPTED_TEXT
from memstore.errors import ConfigurationError, InvalidAppIdError, InvalidInputError
from memstore.sql.schema import original
from tests.adapters.conftest import AdapterEnv
from tests.adapters.lc_agents import (
    ProviderLikeModel,
    ProviderRejected,
    check_like_provider,
    kinds,
    lc_ids,
    rows,
)


@pytest.fixture(autouse=True)
def _async_middleware_needs_python_311(request: pytest.FixtureRequest) -> None:
    if "env" in request.fixturenames and sys.version_info < (3, 11):
        if request.getfixturevalue("env").is_async:
            pytest.skip("Python 3.10: the async middleware is refused (see the test below)")


def test_the_async_middleware_is_refused_before_python_311(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore import Settings
    from memstore.aio import AsyncMemoryStore

    store = AsyncMemoryStore(Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}"))
    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    with pytest.raises(ConfigurationError, match=r"needs Python 3\.11 or later"):
        MemstoreMiddleware(store)
    monkeypatch.undo()
    asyncio.run(store.close())


@tool
def slow_add(a: int, b: int) -> str:
    """Add slowly."""
    time.sleep(0.05)
    return str(a + b)


@tool
def fast_mul(a: int, b: int) -> str:
    """Multiply."""
    return str(a * b)


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@tool
def broken(path: str) -> str:
    """Always fails."""
    raise ToolException("disk on fire")


broken.handle_tool_error = True

TOOLS = [slow_add, fast_mul, delete_file, broken]
PARALLEL = [("slow_add", {"a": 1, "b": 2}), ("fast_mul", {"a": 3, "b": 4})]
TOOL_TURN = ["UserMessage", "AiMessage", "ToolResult", "ToolResult", "AiMessage"]
"""The rows of a turn whose model makes the two ``PARALLEL`` calls, then answers."""


def config(app_id: str, **configurable: Any) -> Any:
    return {"configurable": {"thread_id": app_id, **configurable}}


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def call(env: AdapterEnv, agent: Any, payload: Any, cfg: Any) -> Any:
    """One run: ``invoke`` on a sync env, ``ainvoke`` on an async one."""
    if env.is_async:
        return env.run(agent.ainvoke(payload, cfg))
    return agent.invoke(payload, cfg)


def stream(env: AdapterEnv, agent: Any, payload: Any, cfg: Any) -> list[Any]:
    """One run through ``stream`` / ``astream``."""
    if env.is_async:

        async def collect() -> list[Any]:
            return [chunk async for chunk in agent.astream(payload, cfg, stream_mode="values")]

        return env.run(collect())
    return list(agent.stream(payload, cfg, stream_mode="values"))


def agent_for(store: Any, model: ProviderLikeModel, **options: Any) -> Any:
    checkpointer = options.pop("checkpointer", None)
    extra = options.pop("middleware", [])
    middleware = [MemstoreMiddleware(store, **options), *extra]
    return create_agent(model, TOOLS, middleware=middleware, checkpointer=checkpointer)


def row_types(env: AdapterEnv, app_id: str) -> list[str]:
    return [type(r.message).__name__ for r in rows(env.sync_store(), app_id)]


def test_parallel_calls_are_stored_in_call_order_and_come_back(
    env: AdapterEnv, app_id: str
) -> None:
    store = env.store()
    model = ProviderLikeModel([PARALLEL, "3 and 12", "ok"])
    agent = agent_for(store, model)
    call(env, agent, user("add and multiply"), config(app_id))

    stored = rows(env.sync_store(), app_id)
    assert [type(r.message).__name__ for r in stored] == TOOL_TURN
    request = stored[1].message
    assert isinstance(request, AiMessage)
    results = [r.message for r in stored[2:4]]
    assert [r.id for r in results if isinstance(r, ToolResult)] == [
        c.id for c in request.tool_requests
    ]
    assert [r.text for r in results if isinstance(r, ToolResult)] == ["3", "12"]
    # the model's own argument strings, not a re-dump of the parsed arguments
    assert [c.arguments for c in request.tool_requests] == [
        json.dumps(args, indent=1) for _, args in PARALLEL
    ]

    call(env, agent, user("again"), config(app_id))
    assert kinds(model.requests[-1]) == ["human", "ai", "tool", "tool", "ai", "human"]
    assert len(rows(env.sync_store(), app_id)) == 7


def test_restart_continues_with_the_calls_and_both_results(env: AdapterEnv, app_id: str) -> None:
    first = ProviderLikeModel([PARALLEL, "3 and 12"])
    call(env, agent_for(env.store(), first), user("compute"), config(app_id))
    calls = first.requests[1][1]
    assert isinstance(calls, AIMessage)

    # a new process: new store object (new engine, new cache client), new agent and model
    second = ProviderLikeModel(["still here"])
    call(env, agent_for(env.store(), second), user("and now?"), config(app_id))
    seen = second.requests[0]
    assert kinds(seen) == ["human", "ai", "tool", "tool", "ai", "human"]
    assert seen[1] == calls
    assert [(m.tool_call_id, m.content) for m in seen[2:4] if isinstance(m, ToolMessage)] == [
        (c["id"], text) for c, text in zip(calls.tool_calls, ["3", "12"], strict=True)
    ]


def test_max_messages_cutting_inside_a_tool_group_keeps_the_group(
    env: AdapterEnv, app_id: str
) -> None:
    store = env.store()
    model = ProviderLikeModel([PARALLEL, "3 and 12", "fine"])
    call(env, agent_for(store, model), user("compute"), config(app_id))
    history = model.requests[1] + [AIMessage("3 and 12"), HumanMessage("next")]
    with pytest.raises(ProviderRejected):  # the naive cut of the last 3 would be rejected
        check_like_provider(history[-3:])

    call(env, agent_for(store, model, max_messages=3), user("next"), config(app_id))
    seen = model.requests[-1]
    check_like_provider(seen)  # the model accepted it; and the group is whole:
    assert kinds(seen)[-5:] == ["ai", "tool", "tool", "ai", "human"]


def test_an_interrupted_tool_is_answered_as_interrupted_in_the_next_run(
    env: AdapterEnv, app_id: str
) -> None:
    started = threading.Event()

    @tool
    def hang(path: str) -> str:
        """Never finishes: the process dies (sync) or the run is cancelled (async)."""
        started.set()
        if not env.is_async:
            raise SystemExit(1)
        time.sleep(30)
        return "never"

    @tool
    async def ahang(path: str) -> str:
        """The async tool the cancelled run waits in."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    store = env.store()
    model = ProviderLikeModel([[("ahang" if env.is_async else "hang", {"path": "x"})], "sorry"])
    agent = create_agent(model, [hang, ahang], middleware=[MemstoreMiddleware(store)])
    if env.is_async:

        async def cancel_mid_tool() -> None:
            task = asyncio.ensure_future(agent.ainvoke(user("go"), config(app_id)))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        env.run(cancel_mid_tool())
    else:
        with pytest.raises(SystemExit):
            agent.invoke(user("go"), config(app_id))
    assert started.is_set()
    assert row_types(env, app_id) == ["UserMessage", "AiMessage"]

    call(env, agent_for(env.store(), model), user("what happened?"), config(app_id))
    seen = model.requests[-1]
    assert kinds(seen) == ["human", "ai", "tool", "human"]
    answer = seen[2]
    assert isinstance(answer, ToolMessage)
    assert answer.content == INTERRUPTED_TEXT and answer.status == "error"
    # the synthetic answer is never stored
    assert row_types(env, app_id) == ["UserMessage", "AiMessage", "UserMessage", "AiMessage"]


def test_twenty_runs_leave_one_row_per_message(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    script: list[Any] = []
    for turn in range(20):
        script += [[("fast_mul", {"a": turn, "b": 2})], f"it is {turn * 2}"]
    model = ProviderLikeModel(script)
    agent = agent_for(store, model, max_messages=10, checkpointer=InMemorySaver())
    for turn in range(20):
        call(env, agent, user(f"double {turn}"), config(app_id))
    stored = rows(env.sync_store(), app_id)
    assert len(stored) == 80
    assert len(set(lc_ids(stored))) == 80
    assert all(len(request) <= 12 for request in model.requests)  # bounded by the window


def test_stream_and_astream_store_like_invoke(env: AdapterEnv, app_id: str) -> None:
    model = ProviderLikeModel([PARALLEL, "done", "again"])
    agent = agent_for(env.store(), model)
    chunks = stream(env, agent, user("compute"), config(app_id))
    assert kinds(chunks[-1]["messages"]) == ["human", "ai", "tool", "tool", "ai"]
    stream(env, agent, user("more"), config(app_id))
    assert row_types(env, app_id) == [*TOOL_TURN, "UserMessage", "AiMessage"]
    assert kinds(model.requests[-1]) == ["human", "ai", "tool", "tool", "ai", "human"]


@pytest.mark.parametrize("memstore_first", [True, False], ids=["memstore-first", "hitl-first"])
def test_human_in_the_loop_interrupt_and_resume_store_each_message_once(
    env: AdapterEnv, app_id: str, memstore_first: bool
) -> None:
    store = env.store()
    model = ProviderLikeModel([[("delete_file", {"path": "a.txt"})], "deleted it", "bye"])
    memstore = MemstoreMiddleware(store)
    hitl = HumanInTheLoopMiddleware(interrupt_on={"delete_file": True})
    agent = create_agent(
        model,
        TOOLS,
        middleware=[memstore, hitl] if memstore_first else [hitl, memstore],
        checkpointer=InMemorySaver(),
    )
    paused = call(env, agent, user("delete a.txt"), config(app_id))
    assert "__interrupt__" in paused
    before = row_types(env, app_id)
    assert before == (["UserMessage"] if memstore_first else ["UserMessage", "AiMessage"])

    resume = Command(resume={"decisions": [{"type": "approve"}]})
    done = call(env, agent, resume, config(app_id))
    assert kinds(done["messages"]) == ["human", "ai", "tool", "ai"]
    stored = rows(env.sync_store(), app_id)
    assert [type(r.message).__name__ for r in stored] == [
        "UserMessage",
        "AiMessage",
        "ToolResult",
        "AiMessage",
    ]
    result = stored[2].message
    assert isinstance(result, ToolResult) and result.text == "deleted a.txt"

    call(env, agent, user("thanks"), config(app_id))
    assert len(rows(env.sync_store(), app_id)) == 6
    assert len(set(lc_ids(rows(env.sync_store(), app_id)))) == 6


def test_purge_by_user_id_empties_the_next_runs_memory(env: AdapterEnv, app_id: str) -> None:
    user_id = f"user-{uuid.uuid4().hex[:8]}"
    model = ProviderLikeModel([PARALLEL, "3 and 12", "who are you?"])
    agent = agent_for(env.store(), model, max_messages=20)
    call(env, agent, user("compute"), config(app_id, user_id=user_id))
    assert len(rows(env.sync_store(), app_id)) == 5

    args = ["purge", "--user-id", user_id, "--yes", "--database-url", env.url]
    if env.cache == "redis":
        args += ["--redis-url", env.settings().redis_url or ""]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert rows(env.sync_store(), app_id) == []

    call(env, agent, user("hello again"), config(app_id, user_id=user_id))
    assert kinds(model.requests[-1]) == ["human"]


def test_user_id_from_the_context_or_a_keys_function(env: AdapterEnv, app_id: str) -> None:
    model = ProviderLikeModel(["one", "two"])
    agent = agent_for(
        env.store(), model, keys=lambda cfg, ctx: RunKeys(f"{app_id}-custom", user_id="u-k")
    )
    call(env, agent, user("hi"), {"configurable": {}})  # no thread id: the function decides
    stored = rows(env.sync_store(), f"{app_id}-custom")
    assert [type(r.message).__name__ for r in stored] == ["UserMessage", "AiMessage"]


def test_wrong_store_kind_and_missing_thread_id_are_clear_errors(
    env: AdapterEnv, app_id: str
) -> None:
    agent = agent_for(env.store(), ProviderLikeModel(["never"]))
    if env.is_async:
        with pytest.raises(
            ConfigurationError,
            match=r"given an AsyncMemoryStore.*invoke/stream needs a MemoryStore",
        ):
            agent.invoke(user("hi"), config(app_id))
    else:
        with pytest.raises(
            ConfigurationError,
            match=r"given a MemoryStore.*ainvoke/astream needs an AsyncMemoryStore",
        ):
            env.run(agent.ainvoke(user("hi"), config(app_id)))
    with pytest.raises(InvalidAppIdError, match="thread id"):
        call(env, agent, user("hi"), {"configurable": {}})
    assert rows(env.sync_store(), app_id) == []


def test_window_only_mode_leaves_the_state_and_sends_the_window(
    env: AdapterEnv, app_id: str
) -> None:
    model = ProviderLikeModel([[("fast_mul", {"a": 2, "b": 2})], "4", "a", "b", "c", "d"])
    agent = agent_for(
        env.store(), model, rewrite_state=False, max_messages=4, checkpointer=InMemorySaver()
    )
    for text in ["double 2", "one", "two", "three", "four"]:
        out = call(env, agent, user(text), config(app_id))
    assert len(out["messages"]) == 12  # the checkpointer's state keeps everything
    assert len(rows(env.sync_store(), app_id)) == 12  # each message stored once
    last = model.requests[-1]
    assert len(last) == 4 and isinstance(last[-1], HumanMessage) and last[-1].content == "four"


def test_message_fidelity_error_results_and_content_blocks(env: AdapterEnv, app_id: str) -> None:
    model = ProviderLikeModel([[("broken", {"path": "x"})], "it failed", "seen"])
    agent = agent_for(env.store(), model)
    blocks = [
        {"type": "text", "text": "look at this"},
        {"type": "image", "url": "https://example.com/cat.png"},
    ]
    call(env, agent, {"messages": [HumanMessage(content=blocks)]}, config(app_id))
    stored = rows(env.sync_store(), app_id)
    first, result = stored[0].message, stored[2].message
    assert isinstance(first, UserMessage) and first.text == "look at this"
    assert isinstance(result, ToolResult) and result.is_error

    call(env, agent, user("and?"), config(app_id))
    seen = model.requests[-1]
    assert seen[0].content == blocks
    error = seen[2]
    assert isinstance(error, ToolMessage) and error.status == "error"


@tool(return_direct=True)
def lookup(key: str) -> str:
    """Answers the user directly."""
    return f"value of {key}"


def test_a_result_that_ends_the_run_is_stored_at_the_end(env: AdapterEnv, app_id: str) -> None:
    model = ProviderLikeModel([[("lookup", {"key": "k"})], "later"])
    agent = create_agent(model, [lookup], middleware=[MemstoreMiddleware(env.store())])
    out = call(env, agent, user("look k up"), config(app_id))
    assert kinds(out["messages"]) == ["human", "ai", "tool"]
    assert row_types(env, app_id) == ["UserMessage", "AiMessage", "ToolResult"]
    call(env, agent, user("thanks"), config(app_id))
    assert kinds(model.requests[-1]) == ["human", "ai", "tool", "human"]


def test_a_write_whose_step_died_before_the_graph_recorded_it_is_not_repeated(
    env: AdapterEnv, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The AI message is committed, then the step dies (the process exits, or the run is
    cancelled): the checkpoint holds the message but not the record of its storing."""
    from memstore.adapters._history import StoreAccess

    real_append, real_aappend = StoreAccess.append, StoreAccess.aappend
    dying = {"armed": False}

    def append(self: StoreAccess, *args: Any, **kwargs: Any) -> list[int]:
        ids = real_append(self, *args, **kwargs)
        if dying["armed"]:
            dying["armed"] = False
            raise SystemExit(1)
        return ids

    async def aappend(self: StoreAccess, *args: Any, **kwargs: Any) -> list[int]:
        ids = await real_aappend(self, *args, **kwargs)
        if dying["armed"]:
            dying["armed"] = False
            raise asyncio.CancelledError
        return ids

    monkeypatch.setattr(StoreAccess, "append", append)
    monkeypatch.setattr(StoreAccess, "aappend", aappend)

    class ArmAfterInput(MemstoreMiddleware):
        def before_model(self, state: Any, runtime: Any) -> Any:
            dying["armed"] = True
            return super().before_model(state, runtime)

        async def abefore_model(self, state: Any, runtime: Any) -> Any:
            dying["armed"] = True
            return await super().abefore_model(state, runtime)

    model = ProviderLikeModel([PARALLEL, "recovered"])
    saver = InMemorySaver()
    agent = create_agent(model, TOOLS, middleware=[ArmAfterInput(env.store())], checkpointer=saver)
    with pytest.raises(NodeCancelledError if env.is_async else SystemExit):
        call(env, agent, user("compute"), config(app_id))
    assert row_types(env, app_id) == ["UserMessage", "AiMessage"]

    agent = create_agent(
        model, TOOLS, middleware=[MemstoreMiddleware(env.store())], checkpointer=saver
    )
    call(env, agent, user("again"), config(app_id))
    assert row_types(env, app_id) == ["UserMessage", "AiMessage", "UserMessage", "AiMessage"]
    assert kinds(model.requests[-1]) == ["human", "ai", "tool", "tool", "human"]


def test_the_resumed_step_of_a_died_run_does_not_repeat_its_write(
    env: AdapterEnv, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but the graph resumes the died step itself (``invoke(None)``): its first
    write must still look for the committed message (the invocation's check mark is never
    checkpointed)."""
    from memstore.adapters._history import StoreAccess

    real_append, real_aappend = StoreAccess.append, StoreAccess.aappend
    appends = {"n": 0}

    def append(self: StoreAccess, *args: Any, **kwargs: Any) -> list[int]:
        ids = real_append(self, *args, **kwargs)
        appends["n"] += 1
        if appends["n"] == 2:  # the input, then the AI message: die after the AI message
            raise SystemExit(1)
        return ids

    async def aappend(self: StoreAccess, *args: Any, **kwargs: Any) -> list[int]:
        ids = await real_aappend(self, *args, **kwargs)
        appends["n"] += 1
        if appends["n"] == 2:
            raise asyncio.CancelledError
        return ids

    monkeypatch.setattr(StoreAccess, "append", append)
    monkeypatch.setattr(StoreAccess, "aappend", aappend)
    model = ProviderLikeModel([PARALLEL, "done"])
    agent = agent_for(env.store(), model, checkpointer=InMemorySaver())
    with pytest.raises(NodeCancelledError if env.is_async else SystemExit):
        call(env, agent, user("compute"), config(app_id))
    assert row_types(env, app_id) == ["UserMessage", "AiMessage"]
    call(env, agent, None, config(app_id))
    assert row_types(env, app_id) == TOOL_TURN


def test_only_the_first_write_of_an_invocation_reads_the_newest_rows(
    env: AdapterEnv, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one invocation every hook sees the writes of the hooks before it, so only the
    first write looks for messages an earlier attempt stored; each invocation checks anew."""
    from memstore.adapters import _lc_pending

    checks: list[int] = []
    real = _lc_pending._unseen

    def counted(batch: Any, stored_rows: Any) -> Any:
        checks.append(len(batch))
        return real(batch, stored_rows)

    monkeypatch.setattr(_lc_pending, "_unseen", counted)
    model = ProviderLikeModel([PARALLEL, "done", "bye"])
    agent = agent_for(env.store(), model, checkpointer=InMemorySaver())
    call(env, agent, user("compute"), config(app_id))  # input, AI call, 2 results, answer
    assert checks == [1]
    call(env, agent, user("thanks"), config(app_id))
    assert checks == [1, 1]
    assert row_types(env, app_id) == [*TOOL_TURN, "UserMessage", "AiMessage"]


@dataclass
class Context:
    user_id: str


def user_ids(env: AdapterEnv, app_id: str) -> set[str | None]:
    with env.sync_store().engine.connect() as conn:
        found = conn.execute(sa.select(original.c.user_id).where(original.c.app_id == app_id))
        return {row.user_id for row in found}


def test_one_middleware_serves_concurrent_runs_with_users_from_the_context(
    env: AdapterEnv, app_id: str
) -> None:
    model = ProviderLikeModel(
        respond=lambda request: PARALLEL if isinstance(request[-1], HumanMessage) else "done"
    )
    agent = create_agent(
        model, TOOLS, middleware=[MemstoreMiddleware(env.store())], context_schema=Context
    )
    apps = [f"{app_id}-a", f"{app_id}-b"]
    if env.is_async:

        async def both() -> None:
            await asyncio.gather(
                *(
                    agent.ainvoke(user("go"), config(app), context=Context(f"user-{app}"))
                    for app in apps
                )
            )

        env.run(both())
    else:
        workers = [
            threading.Thread(
                target=agent.invoke,
                args=(user("go"), config(app)),
                kwargs={"context": Context(f"user-{app}")},
            )
            for app in apps
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    for app in apps:
        assert row_types(env, app) == TOOL_TURN
        assert user_ids(env, app) == {f"user-{app}"}


def test_without_langchain_the_legacy_history_still_imports_and_the_middleware_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import sys

    from memstore import MissingExtraError

    for name in [n for n in sys.modules if n == "langchain" or n.startswith("langchain.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "langchain", None)  # `import langchain...` fails
    import memstore.adapters

    for module in ("memstore.adapters._lc_middleware", "memstore.adapters.langchain"):
        monkeypatch.delitem(sys.modules, module, raising=False)
        monkeypatch.delattr(memstore.adapters, module.rsplit(".", 1)[1], raising=False)
    legacy = importlib.import_module("memstore.adapters.langchain")
    assert legacy.MemstoreChatMessageHistory.__name__ == "MemstoreChatMessageHistory"
    with pytest.raises(MissingExtraError, match=r"pip install 'memstore\[langchain\]'"):
        legacy.MemstoreMiddleware  # noqa: B018
    for module in ("memstore.adapters._lc_middleware", "memstore.adapters.langchain"):
        monkeypatch.delitem(sys.modules, module, raising=False)
        monkeypatch.delattr(memstore.adapters, module.rsplit(".", 1)[1], raising=False)


@pytest.mark.parametrize("size", [0, -1, 100_001, 2**63, True])
def test_a_window_size_out_of_range_is_refused_like_load_window(
    sqlite_store: Any, size: Any
) -> None:
    with pytest.raises(InvalidInputError):
        MemstoreMiddleware(sqlite_store, max_messages=size)


def test_a_compacted_thread_gives_the_model_the_summary(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    model = ProviderLikeModel([PARALLEL, "3 and 12", "fine", "still fine"])
    agent = agent_for(store, model)
    call(env, agent, user("compute"), config(app_id))
    call(env, agent, user("and then?"), config(app_id))
    sync = env.sync_store()
    sync.memory(app_id).compact(lambda m: "the user computed things", keep_last_messages=2)
    store_rows = len(rows(sync, app_id))
    call(env, agent, user("what did I do?"), config(app_id))
    seen = model.requests[-1]
    assert kinds(seen) == ["system", "human", "ai", "human"]
    assert seen[0].content == "the user computed things"
    check_like_provider(seen)
    # the summary was not stored again as a message of the thread
    assert len(rows(sync, app_id)) == store_rows + 2
