"""A tool result of hundreds of KiB (a file, a page, a query) through every adapter, on every
backend: the store takes texts up to MEMSTORE_MAX_TEXT_BYTES, and the adapter's copy of the
framework message in ``metadata`` may repeat those texts, so it is never refused for it."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest

from memstore.errors import MessageTooLargeError
from memstore.messages import ToolResult, UserMessage
from tests.adapters.conftest import AdapterEnv

BIG = "a line of a file, é and 🌍\n" * 12_000  # ~330 KB, over the 64 KiB metadata limit


def test_langchain_history_keeps_a_large_tool_result(env: AdapterEnv) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from memstore.adapters.langchain import MemstoreChatMessageHistory

    app = f"lc-{uuid.uuid4().hex[:8]}"
    call = {"id": "c1", "name": "read", "args": {"path": "big.txt"}}
    sent = [
        HumanMessage("read it"),
        AIMessage("", tool_calls=[call]),
        ToolMessage(BIG, tool_call_id="c1"),
    ]
    history = MemstoreChatMessageHistory(env.sync_store(), app)
    history.add_messages(sent)
    assert MemstoreChatMessageHistory(env.sync_store(), app).messages == sent
    result = env.sync_store().load_window(app)[-1]
    assert isinstance(result, ToolResult) and result.text == BIG


def test_agents_session_keeps_a_large_tool_result(env: AdapterEnv) -> None:
    pytest.importorskip("agents")
    from memstore.adapters.openai_agents import MemstoreSession

    items = [
        {"role": "user", "content": "read it"},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": BIG},
    ]
    session_id = f"ag-{uuid.uuid4().hex[:8]}"
    env.run(MemstoreSession(session_id, env.store()).add_items(items))  # type: ignore[arg-type]
    assert env.run(MemstoreSession(session_id, env.store()).get_items()) == items


def test_adk_keeps_a_large_tool_response(env: AdapterEnv) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.genai import types

    from memstore.adapters.google_adk import MemstoreSessionService

    async def scenario() -> None:
        service = MemstoreSessionService(env.store())
        session = await service.create_session(app_name="big", user_id="u")
        call = types.FunctionCall(id="c1", name="read", args={})
        response = types.FunctionResponse(id="c1", name="read", response={"text": BIG})
        for role, part in (
            ("model", types.Part(function_call=call)),
            ("user", types.Part(function_response=response)),
        ):
            event = Event(
                author="big", invocation_id="i", content=types.Content(role=role, parts=[part])
            )
            await service.append_event(session, event)
        stored = await MemstoreSessionService(env.store()).get_session(
            app_name="big", user_id="u", session_id=session.id
        )
        assert stored is not None
        kept = stored.events[-1].content.parts[0].function_response  # type: ignore[union-attr,index]
        assert kept is not None and kept.response == {"text": BIG}

    env.run(scenario())


def test_metadata_beyond_its_limit_and_the_texts_is_still_refused(env: AdapterEnv) -> None:
    store = env.sync_store()
    padding = "x" * (store.settings.max_metadata_bytes + 100)
    with pytest.raises(MessageTooLargeError):
        store.append(
            f"m-{uuid.uuid4().hex[:8]}", [UserMessage(text="short", metadata={"pad": padding})]
        )
    store.append(
        f"m-{uuid.uuid4().hex[:8]}", [UserMessage(text=padding, metadata={"copy": padding})]
    )


def test_the_langchain_middleware_keeps_a_large_tool_result(env: AdapterEnv) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    from memstore.adapters.langchain import MemstoreMiddleware
    from tests.adapters.lc_agents import ProviderLikeModel

    @tool
    def read(path: str) -> str:
        """Read a file."""
        return BIG

    if env.is_async and sys.version_info < (3, 11):
        pytest.skip("Python 3.10: the async middleware is refused (test_langchain_middleware)")
    app = f"mw-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": app}}
    payload: Any = {"messages": [{"role": "user", "content": "read big.txt"}]}

    def run(model: ProviderLikeModel) -> None:
        agent = create_agent(model, [read], middleware=[MemstoreMiddleware(env.store())])
        if env.is_async:
            env.run(agent.ainvoke(payload, config))
        else:
            agent.invoke(payload, config)

    run(ProviderLikeModel([[("read", {"path": "big.txt"})], "it is long"]))
    stored = env.sync_store().load_window(app, 50)
    assert [type(m).__name__ for m in stored] == [
        "UserMessage",
        "AiMessage",
        "ToolResult",
        "AiMessage",
    ]
    assert isinstance(stored[2], ToolResult) and stored[2].text == BIG
    # a new process sees the result, not an interrupted call
    later = ProviderLikeModel(["still long"])
    run(later)
    seen = [m for m in later.requests[0] if isinstance(m, ToolMessage)]
    assert [m.content for m in seen] == [BIG]


def test_pydantic_ai_keeps_a_large_tool_result(env: AdapterEnv) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from memstore.adapters.pydantic_ai import MemstoreConversationStore

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(
            isinstance(part, ToolReturnPart) for part in last.parts
        ):
            return ModelResponse(parts=[TextPart(content="it is long")])
        return ModelResponse(parts=[ToolCallPart("read", {"path": "big.txt"}, tool_call_id="c1")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def read(path: str) -> str:
        return BIG

    conversation_id = f"pa-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        store = MemstoreConversationStore(env.store())
        result = await agent.run(
            "read big.txt", conversation=Conversation(conversation_id=conversation_id)
        )
        await store.save(result)
        loaded = await MemstoreConversationStore(env.store()).load(conversation_id)
        assert loaded is not None
        returns = [
            part
            for message in loaded.messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        assert [part.content for part in returns] == [BIG]

    env.run(scenario())
