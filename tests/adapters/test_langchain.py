"""``MemstoreChatMessageHistory`` against langchain-core's ``BaseChatMessageHistory`` contract.

From langchain-core's docs: ``messages`` (and ``aget_messages``) return the stored messages in
the order added, ``add_messages`` / ``aadd_messages`` append in bulk, ``clear`` / ``aclear``
remove everything, and ``RunnableWithMessageHistory`` loads the history before each call and
saves the turn's input and output after it. Plus memstore's promises: messages round-trip
equal, tool calls land as tool rows, and ``window=True`` gives the edge-checked window.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import warnings
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("langchain_core")

from langchain_core._api.deprecation import LangChainDeprecationWarning
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from memstore import AiMessage, MemoryStore, ToolRequest, ToolResult, UserMessage
from memstore.adapters.langchain import FOREIGN_KEY, MemstoreChatMessageHistory
from memstore.core.validate import validate
from memstore.core.window import INTERRUPTED_TEXT
from memstore.errors import InvalidInputError, InvalidMessageError
from memstore.sql.schema import original
from tests.adapters.conftest import AdapterEnv

RAW_ARGUMENTS = '{ "path":"a.txt",  "mode": "w" }'

CONVERSATION: list[BaseMessage] = [
    SystemMessage(content="You are terse."),
    HumanMessage(
        content="Schreib 'grüße 👋' in a.txt",
        id="h-1",
        name="alice",
        additional_kwargs={"client": {"ip": "10.0.0.1"}},
    ),
    AIMessage(
        content="",
        id="run-1",
        tool_calls=[
            {"name": "write_file", "args": {"path": "a.txt", "mode": "w"}, "id": "call_1"},
            {"name": "list_dir", "args": {}, "id": "call_2", "type": "tool_call"},
        ],
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": RAW_ARGUMENTS},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "list_dir", "arguments": "{}"},
                },
            ]
        },
        response_metadata={"model_name": "gpt-test", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    ),
    ToolMessage(content="written", tool_call_id="call_1", name="write_file", artifact={"bytes": 9}),
    ToolMessage(content="permission denied", tool_call_id="call_2", status="error"),
    AIMessage(
        content=[
            {"type": "text", "text": "Wrote it; "},
            {"type": "text", "text": "listing failed."},
        ],
        id="run-2",
    ),
    ChatMessage(role="critic", content="could be shorter"),
    ChatMessage(role="user", content="ok"),
    FunctionMessage(name="legacy_fn", content="legacy output"),
    AIMessageChunk(content="streamed", id="run-3"),
]


def history_of(
    env: AdapterEnv, app_id: str, store: Any = None, **kwargs: Any
) -> MemstoreChatMessageHistory:
    return MemstoreChatMessageHistory(store if store is not None else env.store(), app_id, **kwargs)


def test_is_a_chat_message_history(env: AdapterEnv, app_id: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a subclass is not the deprecated class itself
        history = history_of(env, app_id)
    assert isinstance(history, BaseChatMessageHistory)
    assert history.session_id == app_id
    assert history.messages == []


def test_messages_round_trip_equal_in_order(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)
    history.add_messages(CONVERSATION[:3])
    history.add_message(CONVERSATION[3])
    history.add_messages(CONVERSATION[4:])
    assert history.messages == CONVERSATION
    assert [type(m) for m in history.messages] == [type(m) for m in CONVERSATION]
    again = history_of(env, app_id)  # another store object
    assert again.messages == CONVERSATION
    assert env.run(again.aget_messages()) == CONVERSATION


def test_async_methods(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)

    async def scenario() -> None:
        await history.aadd_messages(CONVERSATION[:5])
        await history.aadd_messages(CONVERSATION[5:])
        assert await history.aget_messages() == CONVERSATION
        await history.aclear()
        assert await history.aget_messages() == []

    env.run(scenario())
    assert history.messages == []


def test_tool_calls_land_as_tool_rows(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)
    history.add_messages(CONVERSATION)
    store = env.sync_store()
    window = store.load_window(app_id, max_messages=100)
    assert [type(m).__name__ for m in window] == [
        "SystemMessage",
        "UserMessage",
        "AiMessage",
        "ToolResult",
        "ToolResult",
        "AiMessage",
        "SystemMessage",  # ChatMessage(role="critic"): opaque
        "UserMessage",
        "SystemMessage",  # FunctionMessage: opaque
        "AiMessage",
    ]
    request = window[2]
    assert isinstance(request, AiMessage)
    assert request.text is None
    assert request.tool_requests == [
        ToolRequest(id="call_1", name="write_file", arguments=RAW_ARGUMENTS),  # byte for byte
        ToolRequest(id="call_2", name="list_dir", arguments="{}"),
    ]
    first, second = window[3], window[4]
    assert isinstance(first, ToolResult) and isinstance(second, ToolResult)
    assert (first.id, first.tool_name, first.text, first.is_error) == (
        "call_1",
        "write_file",
        "written",
        False,
    )
    # no name on the ToolMessage: the request's name is filled in
    assert (second.id, second.tool_name, second.is_error) == ("call_2", "list_dir", True)
    assert window[5].text == "Wrote it; listing failed."
    assert validate(window, "openai") == validate(window, "anthropic") == []
    with store.engine.connect() as conn:
        types = conn.execute(
            sa.select(original.c.message_type)
            .where(original.c.app_id == app_id)
            .order_by(original.c.id)
        ).scalars()
        assert list(types)[2:5] == [
            "toolExecutionRequest",
            "toolExecutionResult",
            "toolExecutionResult",
        ]
    display = [entry.text for entry in reversed(store.history(app_id))]
    assert display[0] == "Schreib 'grüße 👋' in a.txt"
    assert "[tool] list_dir({}) -> error: permission denied" in display[1]


def test_arguments_without_a_raw_string_are_dumped(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)
    call = AIMessage(content="ok", tool_calls=[{"name": "f", "args": {"q": "ü"}, "id": "c"}])
    # a stale raw string (args edited afterwards) is not used
    stale = AIMessage(
        content="",
        tool_calls=[{"name": "g", "args": {"n": 2}, "id": "d"}],
        additional_kwargs={
            "tool_calls": [{"id": "d", "function": {"name": "g", "arguments": '{"n": 1}'}}]
        },
    )
    history.add_messages([HumanMessage("go"), call, ToolMessage("r", tool_call_id="c"), stale])
    window = env.sync_store().load_window(app_id)
    assert window[1].tool_requests[0].arguments == json.dumps({"q": "ü"}, ensure_ascii=False)
    assert window[3].tool_requests[0].arguments == '{"n": 2}'
    assert history.messages[1] == call and history.messages[3] == stale


def test_window_option_returns_the_edge_checked_window(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    full = MemstoreChatMessageHistory(store, app_id)
    messages = [HumanMessage(f"q{i}") for i in range(5)] + CONVERSATION[2:5]
    full.add_messages(messages)
    assert full.messages == messages
    # a window of 2 would start at a tool result: it widens to the request
    windowed = MemstoreChatMessageHistory(store, app_id, window=True, max_messages=2)
    got = windowed.messages if not env.is_async else env.run(windowed.aget_messages())
    assert got == CONVERSATION[2:5]
    cached = MemstoreChatMessageHistory(store, app_id, window=True)
    assert cached.messages == messages
    assert env.run(cached.aget_messages()) == messages


def test_window_answers_an_unfinished_tool_call(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id, window=True)
    pending = AIMessage(content="", tool_calls=[{"name": "slow", "args": {}, "id": "call_9"}])
    history.add_messages([HumanMessage("start"), pending])
    got = history.messages
    assert got[:2] == [HumanMessage("start"), pending]
    answer = got[2]
    assert isinstance(answer, ToolMessage)
    assert (answer.tool_call_id, answer.status, answer.content) == (
        "call_9",
        "error",
        INTERRUPTED_TEXT,
    )
    assert answer.response_metadata == {FOREIGN_KEY: {"memstore_synthetic": "interrupted"}}
    assert history_of(env, app_id).messages == [HumanMessage("start"), pending]  # full history


def test_window_leaves_out_a_result_whose_call_was_never_stored(
    env: AdapterEnv, app_id: str
) -> None:
    orphan = ToolMessage("stray", tool_call_id="never-called")
    sent = [HumanMessage("hi"), orphan, AIMessage("hello")]
    history_of(env, app_id).add_messages(sent)
    assert history_of(env, app_id).messages == sent  # the full history: exactly as stored
    windowed = history_of(env, app_id, window=True)
    got = windowed.messages if not env.is_async else env.run(windowed.aget_messages())
    assert got == [HumanMessage("hi"), AIMessage("hello")]  # no tool result without its call
    sized = history_of(env, app_id, window=True, max_messages=3)
    assert sized.messages == [HumanMessage("hi"), AIMessage("hello")]


def test_clear_and_isolation(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    first = MemstoreChatMessageHistory(store, app_id)
    second = MemstoreChatMessageHistory(store, app_id + "-2")
    lookalike = MemstoreChatMessageHistory(store, app_id.upper())
    first.add_messages([HumanMessage("mine")])
    second.add_messages([HumanMessage("theirs")])
    assert lookalike.messages == []
    first.clear()
    assert first.messages == []
    assert second.messages == [HumanMessage("theirs")]
    assert env.sync_store().history(app_id) == []
    first.add_messages([HumanMessage("after clear")])
    assert first.messages == [HumanMessage("after clear")]


def test_two_handles_and_concurrent_adds(env: AdapterEnv, app_id: str) -> None:
    one, two = history_of(env, app_id), history_of(env, app_id)
    one.add_messages([HumanMessage("a")])
    two.add_messages([AIMessage("b")])
    assert one.messages == two.messages == [HumanMessage("a"), AIMessage("b")]

    def writer(n: int) -> None:
        handle = one if n % 2 else two
        handle.add_messages([HumanMessage(f"{n}-q"), AIMessage(f"{n}-a")])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    texts = [m.content for m in one.messages]
    assert len(texts) == 18
    for n in range(8):
        assert texts[texts.index(f"{n}-q") + 1] == f"{n}-a"

    async def concurrently() -> None:
        await asyncio.gather(*(one.aadd_messages([HumanMessage(f"c{n}")]) for n in range(6)))

    env.run(concurrently())
    assert len(two.messages) == 24


def test_rows_written_elsewhere_read_as_langchain_messages(env: AdapterEnv, app_id: str) -> None:
    store = env.sync_store()
    store.append(
        app_id,
        [
            UserMessage(text="hi", metadata={"participant_name": "bob"}),
            AiMessage(
                text=None,
                tool_requests=[
                    ToolRequest(id="x1", name="f", arguments='{"a": 1}'),
                    ToolRequest(id="x2", name="g", arguments="not json"),
                ],
            ),
            ToolResult(id="x1", tool_name="f", text="1"),
            ToolResult(id="x2", tool_name="g", text="bad", is_error=True),
        ],
    )
    got = history_of(env, app_id).messages
    assert got[0] == HumanMessage(
        "hi", response_metadata={FOREIGN_KEY: {"participant_name": "bob"}}
    )
    ai = got[1]
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls == [{"name": "f", "args": {"a": 1}, "id": "x1", "type": "tool_call"}]
    assert [(c["id"], c["args"]) for c in ai.invalid_tool_calls] == [("x2", "not json")]
    assert got[2] == ToolMessage("1", tool_call_id="x1", name="f", status="success")
    assert got[3] == ToolMessage("bad", tool_call_id="x2", name="g", status="error")


def test_unstorable_messages_are_rejected_before_writing(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)
    with pytest.raises(InvalidMessageError, match="not JSON"):
        history.add_messages(
            [HumanMessage("ok"), ToolMessage("r", tool_call_id="c", artifact=object())]
        )
    with pytest.raises(InvalidMessageError):
        history.add_messages(["not a message"])  # type: ignore[list-item]
    assert history.messages == []
    with pytest.raises(InvalidInputError):
        MemstoreChatMessageHistory(env.store(), app_id, max_messages=5)


def test_a_tool_message_for_an_unknown_call_is_kept(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)
    stray = ToolMessage("late", tool_call_id="never-requested")
    history.add_messages([HumanMessage("hi"), stray])
    # named: written without a lookup first; the write finds no request, then it is looked up
    named = ToolMessage("later", tool_call_id="also-never-requested", name="lookup")
    history.add_messages([named])
    assert history.messages == [HumanMessage("hi"), stray, named]
    window = env.sync_store().load_window(app_id)
    assert [type(m).__name__ for m in window] == ["UserMessage", "SystemMessage", "SystemMessage"]
    assert validate(window, "openai") == validate(window, "anthropic") == []


def test_a_named_result_of_a_stored_call_is_written_without_looking_the_call_up(
    env: AdapterEnv, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore.adapters import _history

    lookups: list[set[str]] = []
    real = _history._requested_tools

    def counted(conn: Any, app: str, call_ids: set[str], cipher: Any) -> dict[str, str]:
        lookups.append(set(call_ids))
        return real(conn, app, call_ids, cipher)

    monkeypatch.setattr(_history, "_requested_tools", counted)
    history = history_of(env, app_id)
    calls = [{"name": "lookup", "args": {"key": k}, "id": f"call-{k}"} for k in "ab"]
    history.add_messages([HumanMessage("look a and b up"), AIMessage("", tool_calls=calls)])
    history.add_messages([ToolMessage("v", tool_call_id="call-a", name="lookup")])
    assert lookups == []
    history.add_messages([ToolMessage("w", tool_call_id="call-b")])  # no name: looked up
    assert lookups == [{"call-b"}]
    stored = env.sync_store().load_window(app_id)
    assert [type(m).__name__ for m in stored][-2:] == ["ToolResult", "ToolResult"]
    assert {m.tool_name for m in stored if isinstance(m, ToolResult)} == {"lookup"}


# -- RunnableWithMessageHistory ----------------------------------------------------------------


def _chain(env: AdapterEnv, replies: list[str], seen: list[list[BaseMessage]]) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )

    def record(value: Any) -> Any:
        seen.append(list(value.to_messages()))
        return value

    model = GenericFakeChatModel(messages=iter(AIMessage(reply) for reply in replies))
    store = env.store()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangChainDeprecationWarning)
        return RunnableWithMessageHistory(
            prompt | RunnableLambda(record) | model,
            lambda session_id: MemstoreChatMessageHistory(store, session_id),
            input_messages_key="question",
            history_messages_key="history",
        )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_runnable_with_message_history(env: AdapterEnv, app_id: str, mode: str) -> None:
    seen: list[list[BaseMessage]] = []
    chain = _chain(env, ["Paris.", "About 2.1 million."], seen)
    config = {"configurable": {"session_id": app_id}}

    def ask(question: str) -> str:
        if mode == "invoke":
            return str(chain.invoke({"question": question}, config=config).content)
        return str(env.run(chain.ainvoke({"question": question}, config=config)).content)

    assert ask("Capital of France?") == "Paris."
    assert ask("Its population?") == "About 2.1 million."
    assert [type(m).__name__ for m in seen[1]] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
    ]
    assert [m.content for m in seen[1][1:]] == ["Capital of France?", "Paris.", "Its population?"]
    # a restart: a new chain, a new store object, the same database
    later: list[list[BaseMessage]] = []
    restarted = _chain(env, ["Yes."], later)
    restarted.invoke({"question": "Sure?"}, config=config)
    assert [m.content for m in later[0][1:]] == [
        "Capital of France?",
        "Paris.",
        "Its population?",
        "About 2.1 million.",
        "Sure?",
    ]


def test_missing_extra_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from memstore import ConfigurationError, MissingExtraError

    cases = [
        ("memstore.adapters.langchain", "langchain_core", "pip install 'memstore[langchain]'"),
        ("memstore.adapters.openai_agents", "agents", "pip install 'memstore[openai-agents]'"),
    ]
    for module, framework, line in cases:
        with monkeypatch.context() as patch:
            patch.delitem(sys.modules, module, raising=False)
            for name in [n for n in sys.modules if n == framework or n.startswith(framework + ".")]:
                patch.delitem(sys.modules, name)
            patch.setitem(sys.modules, framework, None)  # makes `import framework` fail
            with pytest.raises(MissingExtraError) as raised:
                __import__(module)
            assert line in str(raised.value)
            assert raised.value.install == line
            assert isinstance(raised.value, ConfigurationError)
            assert isinstance(raised.value, ImportError)  # `except ImportError` still works
            patch.delitem(sys.modules, module, raising=False)
    import memstore.adapters as adapters

    assert adapters.MemstoreChatMessageHistory is MemstoreChatMessageHistory
    with pytest.raises(AttributeError):
        adapters.Nothing  # noqa: B018


def test_sync_store_async_methods_use_a_worker_thread(
    sqlite_store: MemoryStore, app_id: str
) -> None:
    history = MemstoreChatMessageHistory(sqlite_store, app_id)
    asyncio.run(history.aadd_messages([HumanMessage("one")]))
    asyncio.run(history.aadd_messages([HumanMessage("two")]))  # another loop: still fine
    assert asyncio.run(history.aget_messages()) == [HumanMessage("one"), HumanMessage("two")]
