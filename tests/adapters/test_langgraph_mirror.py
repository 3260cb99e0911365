"""``MemstoreMirrorSaver`` around ``InMemorySaver`` in a custom ``StateGraph``.

The graph is the classic tool loop (model node, tool node), with a tool node that returns the
results of parallel calls in reverse order, as they would arrive when the first call is the
slowest. Every case runs on SQLite, PostgreSQL and MariaDB, sync (``invoke``, ``put``) and
async (``ainvoke``, ``aput``), with and without Redis.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from memstore.adapters.langgraph import MemstoreMirrorSaver
from memstore.messages import AiMessage, ToolResult
from tests.adapters.conftest import AdapterEnv
from tests.adapters.lc_agents import ProviderLikeModel, kinds, lc_ids, rows

PARALLEL = [("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})]
RESULTS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}


def build(model: ProviderLikeModel, saver: MemstoreMirrorSaver) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        results = [
            ToolMessage(str(RESULTS[c["name"]](**c["args"])), tool_call_id=c["id"], name=c["name"])
            for c in last.tool_calls
        ]
        return {"messages": results[::-1]}  # arrival order: the first call finished last

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def config(app_id: str) -> Any:
    return {"configurable": {"thread_id": app_id}}


def call(env: AdapterEnv, graph: Any, text: str, app_id: str) -> Any:
    payload = {"messages": [{"role": "user", "content": text}]}
    if env.is_async:
        return env.run(graph.ainvoke(payload, config(app_id)))
    return graph.invoke(payload, config(app_id))


def types(env: AdapterEnv, app_id: str) -> list[str]:
    return [type(r.message).__name__ for r in rows(env.sync_store(), app_id)]


def test_parallel_results_are_mirrored_in_call_order(env: AdapterEnv, app_id: str) -> None:
    saver = MemstoreMirrorSaver(InMemorySaver(), env.store())
    out = call(env, build(ProviderLikeModel([PARALLEL, "3 and 12"]), saver), "go", app_id)
    calls = out["messages"][1]
    assert [m.tool_call_id for m in out["messages"][2:4]] == [  # the state: arrival order
        c["id"] for c in reversed(calls.tool_calls)
    ]
    stored = rows(env.sync_store(), app_id)
    assert [type(r.message).__name__ for r in stored] == [
        "UserMessage",
        "AiMessage",
        "ToolResult",
        "ToolResult",
        "AiMessage",
    ]
    request = stored[1].message
    assert isinstance(request, AiMessage)
    assert [r.message.id for r in stored[2:4] if isinstance(r.message, ToolResult)] == [
        c.id for c in request.tool_requests
    ]
    assert env.sync_store().history(app_id)  # the display history is written too


def test_restart_continues_the_thread_and_stores_nothing_twice(
    env: AdapterEnv, app_id: str
) -> None:
    inner = InMemorySaver()  # outlives the "process", like a PostgresSaver would
    first = ProviderLikeModel([PARALLEL, "3 and 12"])
    call(env, build(first, MemstoreMirrorSaver(inner, env.store())), "compute", app_id)
    calls = first.requests[1][1]

    second = ProviderLikeModel(["still here", "yes"])
    saver = MemstoreMirrorSaver(inner, env.store())  # new store object, new saver
    graph = build(second, saver)
    call(env, graph, "and now?", app_id)
    seen = second.requests[0]
    assert kinds(seen) == ["human", "ai", "tool", "tool", "ai", "human"]
    assert seen[1] == calls
    call(env, graph, "sure?", app_id)
    stored = rows(env.sync_store(), app_id)
    assert len(stored) == 9
    assert len(set(lc_ids(stored))) == 9


def test_delete_thread_purges_the_checkpoints_and_the_app(env: AdapterEnv, app_id: str) -> None:
    inner = InMemorySaver()
    saver = MemstoreMirrorSaver(inner, env.store())
    call(env, build(ProviderLikeModel([PARALLEL, "done"]), saver), "go", app_id)
    assert inner.get_tuple(config(app_id)) is not None
    assert len(types(env, app_id)) == 5
    if env.is_async:
        env.run(saver.adelete_thread(app_id))
    else:
        saver.delete_thread(app_id)
    assert inner.get_tuple(config(app_id)) is None
    assert types(env, app_id) == []
    assert env.sync_store().history(app_id) == []

    call(env, build(ProviderLikeModel(["fresh"]), saver), "hello", app_id)
    assert types(env, app_id) == ["UserMessage", "AiMessage"]  # mirrored again from scratch


def test_delete_thread_with_custom_keys_purges_the_mirrored_app_only(
    env: AdapterEnv, app_id: str
) -> None:
    from memstore import UserMessage
    from memstore.errors import InvalidInputError

    def tenant_keys(cfg: Any) -> tuple[str, None]:
        return f"tenant-a:{cfg['configurable']['thread_id']}", None

    neighbour = env.sync_store()
    neighbour.append(app_id, [UserMessage(text="someone else's app named like the thread")])
    inner = InMemorySaver()
    saver = MemstoreMirrorSaver(inner, env.store(), keys=tenant_keys)
    call(env, build(ProviderLikeModel(["hello"]), saver), "hi", app_id)
    assert types(env, f"tenant-a:{app_id}") == ["UserMessage", "AiMessage"]
    if env.is_async:
        env.run(saver.adelete_thread(app_id))
    else:
        saver.delete_thread(app_id)
    assert types(env, f"tenant-a:{app_id}") == []  # the mirrored app is purged
    assert types(env, app_id) == ["UserMessage"]  # the app named like the thread is untouched

    def needs_more(cfg: Any) -> tuple[str, None]:
        return f"{cfg['configurable']['tenant']}:{cfg['configurable']['thread_id']}", None

    strict = MemstoreMirrorSaver(InMemorySaver(), env.store(), keys=needs_more)
    with pytest.raises(InvalidInputError, match="thread_app"):
        strict.delete_thread(app_id)
    assert types(env, app_id) == ["UserMessage"]
    named = MemstoreMirrorSaver(
        InMemorySaver(), env.store(), keys=needs_more, thread_app=lambda t: f"tenant-a:{t}"
    )
    named.delete_thread(app_id)  # names its app: nothing left to purge, nothing else touched
    assert types(env, app_id) == ["UserMessage"]


def trim(env: AdapterEnv, graph: Any, app_id: str, keep_last: int) -> None:
    """Remove every message of the thread's state but the first and the ``keep_last`` newest."""
    state = graph.get_state(config(app_id)).values["messages"]
    removes = [RemoveMessage(id=m.id) for m in state[1:-keep_last]]
    if env.is_async:
        env.run(graph.aupdate_state(config(app_id), {"messages": removes}))
    else:
        graph.update_state(config(app_id), {"messages": removes})


def test_restart_after_trimming_does_not_store_the_kept_first_message_again(
    env: AdapterEnv, app_id: str
) -> None:
    inner = InMemorySaver()
    graph = build(
        ProviderLikeModel([f"reply {n}" for n in range(8)]), MemstoreMirrorSaver(inner, env.store())
    )
    for n in range(8):
        call(env, graph, f"turn {n}", app_id)
    trim(env, graph, app_id, keep_last=2)  # the state: the first message and the last turn
    assert len(rows(env.sync_store(), app_id)) == 16

    restarted = MemstoreMirrorSaver(inner, env.store())  # a new process: new saver, new store
    call(env, build(ProviderLikeModel(["after restart"]), restarted), "turn 8", app_id)
    stored = rows(env.sync_store(), app_id)
    assert len(stored) == 18
    assert len(set(lc_ids(stored))) == 18  # the kept first message is not appended again


def test_two_replicas_taking_turns_store_each_message_once(env: AdapterEnv, app_id: str) -> None:
    inner = InMemorySaver()  # the checkpointer both replicas share (a PostgresSaver in production)
    model = ProviderLikeModel([PARALLEL, *[f"reply {n}" for n in range(12)]])
    replicas = [build(model, MemstoreMirrorSaver(inner, env.store())) for _ in range(2)]
    for n in range(12):
        replica = replicas[0] if n < 8 else replicas[n % 2]  # the second joins after a trim
        call(env, replica, f"turn {n}", app_id)
        if n in (7, 10):
            trim(env, replica, app_id, keep_last=2)
    stored = rows(env.sync_store(), app_id)
    assert len(stored) == 2 * 12 + 3  # the first turn also has two calls and their results
    assert len(set(lc_ids(stored))) == len(stored)


def test_replicas_putting_the_same_checkpoint_at_once_store_it_once(
    env: AdapterEnv, app_id: str
) -> None:
    inner = InMemorySaver()
    call(
        env,
        build(ProviderLikeModel(["hello"]), MemstoreMirrorSaver(inner, env.store())),
        "hi",
        app_id,
    )
    saved = inner.get_tuple(config(app_id))
    assert saved is not None
    messages = list(saved.checkpoint["channel_values"]["messages"])
    follow_up = [*messages, HumanMessage("again", id="h-2"), AIMessage("yes", id="a-2")]
    checkpoint: Any = {**saved.checkpoint, "channel_values": {"messages": follow_up}}
    versions: Any = {"messages": 99}
    put_config: Any = {"configurable": {"thread_id": app_id, "checkpoint_ns": ""}}
    replicas = [MemstoreMirrorSaver(InMemorySaver(), env.store()) for _ in range(4)]
    for replica in replicas:  # each met the thread already (its ledger is warm)
        replica.put(put_config, saved.checkpoint, saved.metadata, versions)
    barrier = threading.Barrier(len(replicas))

    def put(replica: MemstoreMirrorSaver) -> None:
        barrier.wait()
        if env.is_async:
            asyncio.run(replica.aput(put_config, checkpoint, saved.metadata, versions))
        else:
            replica.put(put_config, checkpoint, saved.metadata, versions)

    with ThreadPoolExecutor(len(replicas)) as pool:
        list(pool.map(put, replicas))
    assert lc_ids(rows(env.sync_store(), app_id))[-2:] == ["h-2", "a-2"]
    assert len(rows(env.sync_store(), app_id)) == 4
