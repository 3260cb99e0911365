"""What does ``MemstoreMiddleware`` cost per agent step, and what does it save in model input?

The same ``create_agent`` agent (a scripted fake chat model, one tool) runs the same
conversation twice, turn for turn in alternation: with ``InMemorySaver`` alone (the state keeps
every message), and with ``InMemorySaver`` plus ``MemstoreMiddleware(store, max_messages=W)``
(SQLite file or PostgreSQL, in-process window cache). Each turn is two agent steps: a model call
that requests a tool, the tool, and a model call that answers. Reported: the wall time per step
of both, the middleware's added time per step against its floor (two bare ``store.append``
calls of one message on the same database: a turn stores four messages, each durably as it
happens), and the size of the model's input (messages and characters) at the
last turn: bounded by the window with memstore, growing with every turn with the checkpointer.

    python -m benchmarks.langchain_agent [--quick] [--databases sqlite,postgres]
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.common import (
    Check,
    Options,
    Report,
    checks_table,
    markdown_table,
    ms,
    ratio,
    run_main,
    scratch_database,
)

TURNS_FULL = 200
TURNS_QUICK = 60
WINDOW = 40
OVERHEAD_TARGET = 2.5
"""The middleware's added time per step / the floor (``APPENDS_PER_STEP`` bare appends) must
be at most this."""
APPENDS_PER_STEP = 2
"""Separate commits a turn needs, per step: user input, AI call, tool result, AI answer are
stored as they happen (4 commits per 2-step turn)."""


def _agent_parts() -> tuple[Any, Any, Any]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"the value of {key} is {len(key) * 7}"

    class ScriptedModel(GenericFakeChatModel):
        """Requests ``lookup`` after each user message, then answers; records input sizes."""

        sizes: list[tuple[int, int]]

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            self.sizes.append((len(messages), sum(len(str(m.content)) for m in messages)))
            last = messages[-1]
            if isinstance(last, HumanMessage):
                key = str(last.content)[:12]
                call = {"name": "lookup", "args": {"key": key}, "id": f"call_{uuid.uuid4().hex}"}
                reply = AIMessage(content="", tool_calls=[call])
            else:
                reply = AIMessage(content=f"Done: {last.content}. " + "details " * 20)
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return create_agent, ScriptedModel, lookup


def _bench_database(name: str, url: str, turns: int, log: Callable[[str], None]) -> list[Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    from memstore import MemoryStore, Settings, UserMessage
    from memstore.adapters.langchain import MemstoreMiddleware

    create_agent, model_class, lookup = _agent_parts()
    store = MemoryStore(Settings(database_url=url))
    try:
        plain_model = model_class(messages=iter(()), sizes=[])
        memstore_model = model_class(messages=iter(()), sizes=[])
        plain = create_agent(plain_model, [lookup], checkpointer=InMemorySaver())
        with_memstore = create_agent(
            memstore_model,
            [lookup],
            checkpointer=InMemorySaver(),
            middleware=[MemstoreMiddleware(store, max_messages=WINDOW)],
        )
        thread = f"bench-{uuid.uuid4().hex[:10]}"
        config = {"configurable": {"thread_id": thread}}
        times: dict[str, list[float]] = {"plain": [], "memstore": []}
        for turn in range(turns):
            question = {"messages": [{"role": "user", "content": f"question {turn} " * 10}]}
            order = [("plain", plain), ("memstore", with_memstore)]
            for label, agent in order if turn % 2 else order[::-1]:
                begin = time.perf_counter()
                agent.invoke(question, config)
                times[label].append((time.perf_counter() - begin) / 2)  # two steps per turn
            if turn and turn % 50 == 0:
                log(f"  {name}: {turn} turns")
        store.purge(thread)
        appends = []
        for turn in range(turns):
            begin = time.perf_counter()
            store.append(thread, [UserMessage(text=f"question {turn} " * 10)])
            appends.append(time.perf_counter() - begin)
        store.purge(thread)
    finally:
        store.close()
    warm = turns // 10  # leave out the first turns (imports, caches, JIT of the graph)
    plain_step = statistics.median(times["plain"][warm:])
    memstore_step = statistics.median(times["memstore"][warm:])
    return [
        name,
        plain_step,
        memstore_step,
        statistics.median(appends[warm:]),
        plain_model.sizes[-1],
        memstore_model.sizes[-1],
        max(size[0] for size in memstore_model.sizes),
    ]


def run(options: Options, log: Callable[[str], None]) -> Report:
    turns = TURNS_QUICK if options.quick else TURNS_FULL
    report = Report(f"LangChain agent: MemstoreMiddleware vs InMemorySaver alone ({turns} turns)")
    rows: list[list[str]] = []
    for name in options.databases:
        log(f"langchain_agent: {name}")
        with scratch_database(name, options, "lcagent") as url:
            db, plain, memstore, append, plain_size, memstore_size, memstore_max = _bench_database(
                name, url, turns, log
            )
        added = (memstore - plain) / (APPENDS_PER_STEP * append)
        rows.append(
            [
                db,
                ms(plain),
                ms(memstore),
                ratio(memstore / plain),
                ms(append),
                ratio(added),
                f"{plain_size[0]} msgs / {plain_size[1]:,} chars",
                f"{memstore_size[0]} msgs / {memstore_size[1]:,} chars",
            ]
        )
        report.checks.append(
            Check(
                scope=f"{db} step time",
                what=f"added per step / {APPENDS_PER_STEP} appends",
                target=f"<= {OVERHEAD_TARGET:.1f}x",
                measured=ratio(added),
                passed=added <= OVERHEAD_TARGET,
            )
        )
        report.checks.append(
            Check(
                scope=f"{db} model input, turn {turns}",
                what="messages (memstore)",
                # the window, one tool group widening its edge, and the current turn's step
                target=f"<= {WINDOW + 4}",
                measured=str(memstore_max),
                passed=memstore_max <= WINDOW + 4,
            )
        )
    report.blocks.append(
        markdown_table(
            [
                "database",
                "ms/step InMemorySaver",
                "ms/step + memstore",
                "ratio",
                "ms/append",
                f"added / {APPENDS_PER_STEP} appends",
                f"model input at turn {turns}: InMemorySaver",
                "with memstore",
            ],
            rows,
        )
    )
    report.blocks.append(checks_table(report.checks))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, argv, (__doc__ or "").splitlines()[0])


if __name__ == "__main__":
    raise SystemExit(main())
