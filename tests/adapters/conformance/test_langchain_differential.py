"""LangChain and LangGraph on memstore against their own reference backends, same scenarios.

Two families, each scenario written once as a function of a backend that returns plain data:

* chat histories: :class:`~memstore.adapters.langchain.MemstoreChatMessageHistory` against
  langchain-core's ``InMemoryChatMessageHistory``;
* checkpointers: :class:`~memstore.adapters.langgraph.MemstoreMirrorSaver` around an
  ``InMemorySaver`` against an ``InMemorySaver`` alone, driven by the same graph run.

Every scenario runs on the reference backend and on memstore (each ``env`` backend: SQLite,
PostgreSQL, MariaDB, sync and async, with Redis where cached) in the same test, with the same
flavour of methods (``a*`` ones on the async backends), and the results must be equal, except
where :data:`KNOWN_DIFFERENCES` says how memstore deliberately differs: there the test
asserts that exact difference (nothing is skipped). ``docs/integrations/langchain.md`` lists
the same differences under "Known differences".

A *restart* is a new adapter object on a new store object (``env.store()``) reading what the
old one wrote; for the in-memory references it is a new object over the same storage (the
session dict, the same ``InMemorySaver``), which is what they can offer.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from memstore.adapters._history import StoreAccess
from memstore.adapters._lc_pending import window_messages
from memstore.adapters.langchain import FOREIGN_KEY, MemstoreChatMessageHistory
from memstore.adapters.langgraph import MemstoreMirrorSaver
from memstore.core.window import INTERRUPTED_TEXT, SYNTHETIC_MARK
from memstore.errors import InvalidMessageError
from tests.adapters.conftest import AdapterEnv

# InMemoryChatMessageHistory (the reference) is deprecated since langchain-core 1.6.4, like the
# BaseChatMessageHistory that MemstoreChatMessageHistory implements
pytestmark = pytest.mark.filterwarnings(
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)

# -- plain data ------------------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def plain(value: Any) -> Any:
    """``value`` as JSON-like data: messages as ``message_to_dict``, tuples as lists, and every
    UUID (message, checkpoint, task ids) replaced by its rank of first appearance, so two runs
    that differ only by their random ids compare equal."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"<id{len(names)}>")

    def walk(item: Any) -> Any:
        if isinstance(item, BaseMessage):
            return walk(message_to_dict(item))
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        if isinstance(item, str):
            return _UUID.sub(rename, item)
        return item

    return walk(value)


# -- chat histories --------------------------------------------------------------------------------


class Histories(Protocol):
    @property
    def is_async(self) -> bool: ...

    def open(self, session_id: str) -> BaseChatMessageHistory: ...

    def restarted(self) -> Histories: ...


@dataclass
class ReferenceHistories:
    """``InMemoryChatMessageHistory`` per session, as ``RunnableWithMessageHistory`` apps keep
    them (a dict of sessions)."""

    is_async: bool
    sessions: dict[str, InMemoryChatMessageHistory]

    def open(self, session_id: str) -> BaseChatMessageHistory:
        return self.sessions.setdefault(session_id, InMemoryChatMessageHistory())

    def restarted(self) -> Histories:
        return ReferenceHistories(self.is_async, self.sessions)


@dataclass
class MemstoreHistories:
    env: AdapterEnv
    store: Any
    window: bool = False

    @property
    def is_async(self) -> bool:
        return self.env.is_async

    def open(self, session_id: str) -> BaseChatMessageHistory:
        return MemstoreChatMessageHistory(self.store, session_id, window=self.window)

    def restarted(self) -> Histories:
        return MemstoreHistories(self.env, self.env.store(), self.window)


def _run(backend: Histories | Savers, coroutine: Any) -> Any:
    env = getattr(backend, "env", None)
    return env.run(coroutine) if env is not None else asyncio.run(coroutine)


def add(
    backend: Histories, history: BaseChatMessageHistory, messages: Sequence[BaseMessage]
) -> None:
    if backend.is_async:
        _run(backend, history.aadd_messages(messages))
    else:
        history.add_messages(messages)


def read(backend: Histories, history: BaseChatMessageHistory) -> Any:
    if backend.is_async:
        return plain(_run(backend, history.aget_messages()))
    return plain(history.messages)


def clear(backend: Histories, history: BaseChatMessageHistory) -> None:
    if backend.is_async:
        _run(backend, history.aclear())
    else:
        history.clear()


def conversation(tag: str) -> list[BaseMessage]:
    """Every kind of message, with every field a history must keep."""
    call = {"name": "lookup", "args": {"q": tag, "n": 2}, "id": f"call-{tag}", "type": "tool_call"}
    return [
        SystemMessage("be brief", id=f"{tag}-s"),
        HumanMessage("what is the weather?", id=f"{tag}-h", additional_kwargs={"x": [1, 2]}),
        AIMessage(
            "",
            id=f"{tag}-a",
            tool_calls=[call],
            response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        ),
        ToolMessage("sunny", tool_call_id=f"call-{tag}", name="lookup", artifact={"t": 21}),
        AIMessage([{"type": "text", "text": "It is sunny."}], id=f"{tag}-b", name="bot"),
        ChatMessage(content="a note", role="user", id=f"{tag}-c"),
    ]


def h_order_and_fields(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    add(backend, history, conversation("x")[:3])
    add(backend, history, conversation("x")[3:])
    return read(backend, history)


def h_single_adds(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    history.add_user_message("hi")
    history.add_ai_message("hello")
    history.add_message(SystemMessage("sys"))
    if backend.is_async:
        _run(backend, history.aadd_messages([HumanMessage("async")]))
    return read(backend, history)


def h_clear(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    add(backend, history, conversation("c"))
    clear(backend, history)
    emptied = read(backend, history)
    add(backend, history, [HumanMessage("again", id="again")])
    return [emptied, read(backend, history)]


def h_unknown_session(backend: Histories, session: str) -> Any:
    return read(backend, backend.open(session))


def h_sessions_apart(backend: Histories, session: str) -> Any:
    one, two = backend.open(session), backend.open(f"{session}-2")
    add(backend, one, [HumanMessage("one")])
    add(backend, two, [HumanMessage("two")])
    clear(backend, two)
    return [read(backend, one), read(backend, two)]


def h_unicode_and_large(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    text = "héllo wörld — 你好 — 🦜🔗 — \u2028sep \U0001f9ea\u200d " * 3
    big = "0123456789abcdef" * 2048  # 32 KiB in the text
    add(backend, history, [HumanMessage(text), AIMessage(big, additional_kwargs={"k": "ß"})])
    return read(backend, history)


def h_nul_character(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    try:
        add(backend, history, [HumanMessage("a\u0000b")])
    except InvalidMessageError:
        return ["refused", read(backend, history)]
    return ["stored", read(backend, history)]


def h_non_json(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    odd = ToolMessage(
        "t", tool_call_id="c1", artifact={"when": datetime(2026, 1, 1, tzinfo=timezone.utc)}
    )
    try:
        add(backend, history, [HumanMessage("before"), odd])
    except InvalidMessageError:
        return ["refused", read(backend, history)]
    return ["stored", len(read(backend, history))]


def h_restart(backend: Histories, session: str) -> Any:
    add(backend, backend.open(session), conversation("r"))
    later = backend.restarted()
    history = later.open(session)
    add(later, history, [HumanMessage("after restart", id="after")])
    return read(later, history)


def h_concurrent_appends(backend: Histories, session: str) -> Any:
    writers, per_writer = 4, 5
    barrier = threading.Barrier(writers)

    def write(writer: int) -> None:
        history = backend.open(session)
        barrier.wait()
        for n in range(per_writer):
            history.add_messages([HumanMessage(f"{writer}:{n}")])  # blocking: from threads

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    texts = [m["data"]["content"] for m in read(backend, backend.open(session))]
    in_writer_order = all(
        [t for t in texts if t.startswith(f"{w}:")] == [f"{w}:{n}" for n in range(per_writer)]
        for w in range(writers)
    )
    return [sorted(texts), in_writer_order]


def h_interrupted_call(backend: Histories, session: str) -> Any:
    history = backend.open(session)
    call = {"name": "slow", "args": {}, "id": "call-int", "type": "tool_call"}
    add(backend, history, [HumanMessage("go", id="h"), AIMessage("", id="a", tool_calls=[call])])
    add(backend, history, [HumanMessage("still there?", id="h2")])
    return read(backend, history)


HISTORY_SCENARIOS: dict[str, Callable[[Histories, str], Any]] = {
    "order_and_fields": h_order_and_fields,
    "single_adds": h_single_adds,
    "clear": h_clear,
    "unknown_session": h_unknown_session,
    "sessions_apart": h_sessions_apart,
    "unicode_and_large": h_unicode_and_large,
    "nul_character": h_nul_character,
    "non_json": h_non_json,
    "restart": h_restart,
    "concurrent_appends": h_concurrent_appends,
    "interrupted_call": h_interrupted_call,
}

# -- checkpointers ---------------------------------------------------------------------------------


@dataclass
class Savers:
    """Checkpointers on one storage: ``open()`` is a new saver object over it (a restart)."""

    is_async: bool
    open: Callable[[], BaseCheckpointSaver[Any]]
    mirrored: Callable[[str, list[BaseMessage]], list[BaseMessage]]
    """``(thread id, the graph's state messages) -> the thread's messages as the backend keeps
    them for the model`` (the state itself for the reference, memstore's window for the mirror)."""
    env: AdapterEnv | None = None


def reference_savers(is_async: bool) -> Savers:
    inner = InMemorySaver()
    return Savers(is_async, lambda: inner, lambda _thread, state: state)


def memstore_savers(env: AdapterEnv) -> Savers:
    inner = InMemorySaver()  # outlives each saver object, as a database-backed one would

    def window(thread: str, _state: list[BaseMessage]) -> list[BaseMessage]:
        return window_messages(StoreAccess(env.sync_store()).window(thread, None))

    return Savers(env.is_async, lambda: MemstoreMirrorSaver(inner, env.store()), window, env)


def script(*replies: AIMessage) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(replies))


def calls(*names: str) -> AIMessage:
    return AIMessage(
        "",
        id=f"ai-{'-'.join(names)}",
        tool_calls=[
            {"name": n, "args": {"x": i}, "id": f"call-{n}", "type": "tool_call"}
            for i, n in enumerate(names)
        ],
    )


def tool_graph(model: GenericFakeChatModel, saver: BaseCheckpointSaver[Any], **compile: Any) -> Any:
    """Model node and tool node; the tool node returns parallel results in reverse call order
    (the first call finished last)."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        results = [
            ToolMessage(
                f"{c['name']} done ✓", tool_call_id=c["id"], name=c["name"], id=f"r-{c['id']}"
            )
            for c in last.tool_calls
        ]
        return {"messages": results[::-1]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver, **compile)


def cfg(thread: str, **more: Any) -> Any:
    return {"configurable": {"thread_id": thread, **more}}


def invoke(backend: Savers, graph: Any, payload: Any, thread: str) -> Any:
    if backend.is_async:
        return _run(backend, graph.ainvoke(payload, cfg(thread)))
    return graph.invoke(payload, cfg(thread))


def tuples(
    backend: Savers, saver: BaseCheckpointSaver[Any], config: Any, **kwargs: Any
) -> list[Any]:
    if backend.is_async:

        async def collect() -> list[Any]:
            return [t async for t in saver.alist(config, **kwargs)]

        found = _run(backend, collect())
    else:
        found = list(saver.list(config, **kwargs))
    return [checkpoint_view(t) for t in found]


def latest(backend: Savers, saver: BaseCheckpointSaver[Any], config: Any) -> Any:
    found = _run(backend, saver.aget_tuple(config)) if backend.is_async else saver.get_tuple(config)
    return None if found is None else checkpoint_view(found)


def checkpoint_view(item: Any) -> dict[str, Any]:
    """What a checkpoint tuple shows its user (ids and timestamps aside)."""
    return {
        "config": item.config["configurable"],
        "parent": None if item.parent_config is None else item.parent_config["configurable"],
        "metadata": {k: v for k, v in item.metadata.items() if k in ("source", "step")},
        "values": item.checkpoint["channel_values"],
        "next_versions": sorted(item.checkpoint["channel_versions"]),
        "pending_writes": [[channel, value] for _task, channel, value in item.pending_writes or ()],
    }


def s_tool_loop_history(backend: Savers, thread: str) -> Any:
    saver = backend.open()
    graph = tool_graph(script(calls("add", "mul"), AIMessage("3 and 12", id="ai-final")), saver)
    out = invoke(backend, graph, {"messages": [HumanMessage("compute", id="h")]}, thread)
    return plain([out["messages"], tuples(backend, saver, cfg(thread))])


def s_list_limit_before_filter(backend: Savers, thread: str) -> Any:
    saver = backend.open()
    graph = tool_graph(script(calls("add"), AIMessage("3", id="ai-final")), saver)
    invoke(backend, graph, {"messages": [HumanMessage("go", id="h")]}, thread)
    every = list(saver.list(cfg(thread)))
    middle = every[2].config
    return plain(
        [
            tuples(backend, saver, cfg(thread), limit=2),
            tuples(backend, saver, cfg(thread), before=middle),
            tuples(backend, saver, cfg(thread), filter={"source": "input"}),
            tuples(backend, saver, None, filter={"step": 1}),  # every thread (a fresh saver)
            latest(backend, saver, middle),
        ]
    )


def s_put_writes(backend: Savers, thread: str) -> Any:
    saver = backend.open()
    invoke(
        backend,
        tool_graph(script(AIMessage("hi", id="ai")), saver),
        {"messages": [HumanMessage("x", id="h")]},
        thread,
    )
    config = saver.get_tuple(cfg(thread))
    assert config is not None
    writes = [("messages", [HumanMessage("pending ✓", id="w")]), ("extra", {"k": 1})]
    if backend.is_async:
        _run(backend, saver.aput_writes(config.config, writes, "task-1"))
    else:
        saver.put_writes(config.config, writes, "task-1")
    return plain(latest(backend, saver, cfg(thread)))


def s_delete_thread(backend: Savers, thread: str) -> Any:
    saver = backend.open()
    for name in (thread, f"{thread}-other"):
        graph = tool_graph(script(AIMessage("hi", id="ai")), saver)
        invoke(backend, graph, {"messages": [HumanMessage("x", id="h")]}, name)
    if backend.is_async:
        _run(backend, saver.adelete_thread(thread))
    else:
        saver.delete_thread(thread)
    return plain(
        [
            latest(backend, saver, cfg(thread)),
            tuples(backend, saver, cfg(thread)),
            len(tuples(backend, saver, cfg(f"{thread}-other"))),
            backend.mirrored(thread, []),
        ]
    )


def s_restart(backend: Savers, thread: str) -> Any:
    graph = tool_graph(script(calls("add"), AIMessage("3", id="ai-1")), backend.open())
    invoke(backend, graph, {"messages": [HumanMessage("first", id="h1")]}, thread)
    later = tool_graph(script(AIMessage("still here", id="ai-2")), backend.open())
    out = invoke(backend, later, {"messages": [HumanMessage("again", id="h2")]}, thread)
    return plain([out["messages"], backend.mirrored(thread, out["messages"])])


def s_unicode_and_large(backend: Savers, thread: str) -> Any:
    saver = backend.open()
    big = "—ü你🦜 " * 4000
    graph = tool_graph(script(AIMessage(big, id="ai")), saver)
    out = invoke(backend, graph, {"messages": [HumanMessage(big[::-1], id="h")]}, thread)
    return plain([out["messages"], backend.mirrored(thread, out["messages"])])


def s_mirrored_parallel_calls(backend: Savers, thread: str) -> Any:
    graph = tool_graph(
        script(calls("add", "mul"), AIMessage("done", id="ai-final")), backend.open()
    )
    out = invoke(backend, graph, {"messages": [HumanMessage("go", id="h")]}, thread)
    return plain(backend.mirrored(thread, out["messages"]))


def s_mirrored_interrupted_call(backend: Savers, thread: str) -> Any:
    graph = tool_graph(script(calls("slow")), backend.open(), interrupt_before=["tools"])
    out = invoke(backend, graph, {"messages": [HumanMessage("go", id="h")]}, thread)
    return plain(backend.mirrored(thread, out["messages"]))


def s_mirrored_after_trim(backend: Savers, thread: str) -> Any:
    saver = backend.open()
    graph = tool_graph(script(AIMessage("one", id="ai-1"), AIMessage("two", id="ai-2")), saver)
    invoke(backend, graph, {"messages": [HumanMessage("a", id="h1")]}, thread)
    before = invoke(backend, graph, {"messages": [HumanMessage("b", id="h2")]}, thread)
    remove = {"messages": [RemoveMessage(id="h1"), RemoveMessage(id="ai-1")]}
    if backend.is_async:
        _run(backend, graph.aupdate_state(cfg(thread), remove))
        state = _run(backend, graph.aget_state(cfg(thread))).values["messages"]
    else:
        graph.update_state(cfg(thread), remove)
        state = graph.get_state(cfg(thread)).values["messages"]
    return plain([before["messages"], state, backend.mirrored(thread, state)])


SAVER_SCENARIOS: dict[str, Callable[[Savers, str], Any]] = {
    "tool_loop_history": s_tool_loop_history,
    "list_limit_before_filter": s_list_limit_before_filter,
    "put_writes": s_put_writes,
    "delete_thread": s_delete_thread,
    "saver_restart": s_restart,
    "saver_unicode_and_large": s_unicode_and_large,
    "mirrored_parallel_calls": s_mirrored_parallel_calls,
    "mirrored_interrupted_call": s_mirrored_interrupted_call,
    "mirrored_after_trim": s_mirrored_after_trim,
}

# -- the deliberate differences, all in one place --------------------------------------------------


@dataclass(frozen=True)
class Difference:
    reason: str
    expected: Callable[[Any], Any]
    """The reference's result -> the result memstore must give instead."""


def _refused_non_json(reference: Any) -> Any:
    assert reference == ["stored", 2]
    return ["refused", []]  # nothing of the batch is written


def _refused_nul(reference: Any) -> Any:
    assert reference[0] == "stored"
    return ["refused", []]


def _interrupted_answered(reference: Any) -> Any:
    human, request = reference
    call = request["data"]["tool_calls"][0]
    answer = ToolMessage(
        INTERRUPTED_TEXT,
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
        id="memstore-00000000-0000-0000-0000-000000000000",  # random: compared by rank
        response_metadata={FOREIGN_KEY: {SYNTHETIC_MARK: "interrupted"}},
    )
    return [human, request, plain(answer)]


def _results_in_call_order(reference: Any) -> Any:
    human, request, *results, final = reference
    order = [call["id"] for call in request["data"]["tool_calls"]]
    results.sort(key=lambda r: order.index(r["data"]["tool_call_id"]))
    return [human, request, *results, final]


def _history_kept(reference: Any) -> Any:
    before, after, mirrored = reference
    assert mirrored == after
    return [before, after, before]


KNOWN_DIFFERENCES: dict[str, Difference] = {
    "non_json": Difference(
        "memstore stores messages as JSON: a batch holding a value JSON cannot carry (a "
        "datetime artifact) raises InvalidMessageError and nothing of it is written; the "
        "in-memory history keeps the Python object",
        _refused_non_json,
    ),
    "nul_character": Difference(
        "memstore refuses a text holding a NUL character (PostgreSQL rejects it) with "
        "InvalidMessageError, and writes nothing of the batch",
        _refused_nul,
    ),
    "mirrored_parallel_calls": Difference(
        "the mirror stores each step's tool results in the order of their AI message's calls "
        "(the state keeps their arrival order)",
        _results_in_call_order,
    ),
    "mirrored_interrupted_call": Difference(
        "memstore's window answers a call that has no result (the graph stopped before its "
        "tool ran) with a synthetic error result, so a model can be called on it; the state "
        "keeps the bare call",
        _interrupted_answered,
    ),
    "mirrored_after_trim": Difference(
        "the mirror only appends: messages a RemoveMessage drops from the state stay in "
        "memstore's history (and window)",
        _history_kept,
    ),
}


def compare(name: str, reference: Any, memstore: Any) -> None:
    difference = KNOWN_DIFFERENCES.get(name)
    expected = reference if difference is None else difference.expected(reference)
    assert memstore == expected


# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(HISTORY_SCENARIOS))
def test_chat_history_matches_in_memory_history(env: AdapterEnv, app_id: str, name: str) -> None:
    scenario = HISTORY_SCENARIOS[name]
    reference = scenario(ReferenceHistories(env.is_async, {}), app_id)
    memstore = scenario(MemstoreHistories(env, env.store()), app_id)
    compare(name, reference, memstore)


@pytest.mark.parametrize("name", list(SAVER_SCENARIOS))
def test_mirror_saver_matches_in_memory_saver(env: AdapterEnv, app_id: str, name: str) -> None:
    scenario = SAVER_SCENARIOS[name]
    reference = scenario(reference_savers(env.is_async), app_id)
    memstore = scenario(memstore_savers(env), app_id)
    compare(name, reference, memstore)
