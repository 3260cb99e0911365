"""pydantic-ai thinking kept with its calls: ``ThinkingPart``s become memstore ``Reasoning``
parts of the response's row, in place, so a window rebuilt from SQL renders them for their
provider (and ``load`` still returns the messages exactly as saved)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memstore.adapters.pydantic_ai import MemstoreConversationStore, entry_to_messages
from memstore.formats import to_anthropic, to_openai, to_responses
from memstore.messages import AiMessage
from tests.adapters.conftest import AdapterEnv
from tests.unit.test_reasoning import (
    assert_anthropic_request,
    assert_chat_messages,
    assert_responses_input,
    signature,
)

ANTHROPIC_PARTS: list[Any] = [
    ThinkingPart(content="Two files.", signature=signature(1), provider_name="anthropic"),
    ThinkingPart(
        content="", id="redacted_thinking", signature=signature(2), provider_name="anthropic"
    ),
    TextPart(content="Writing."),
    ToolCallPart("write", {"p": "a"}, tool_call_id="toolu_1"),
    ThinkingPart(content="Now b.", signature=signature(3), provider_name="anthropic"),
    ToolCallPart("write", {"p": "b"}, tool_call_id="toolu_2"),
]
OPENAI_PARTS: list[Any] = [
    ThinkingPart(content="**Plan**", id="rs_1", signature=signature(4), provider_name="openai"),
    ThinkingPart(content="two writes", id="rs_1", provider_name="openai"),
    ToolCallPart("write", '{"p": "a"}', tool_call_id="call_1"),
    ThinkingPart(content="", id="rs_2", signature=signature(5), provider_name="openai"),
    ToolCallPart("write", '{"p": "b"}', tool_call_id="call_2"),
]
CHAT_PARTS: list[Any] = [
    ThinkingPart(content="The user wants a.", id="reasoning_content", provider_name="openai"),
    ToolCallPart("write", '{"p": "a"}', tool_call_id="call_1"),
]
UNKEPT_PARTS: list[Any] = [
    ThinkingPart(content="no signature", provider_name="anthropic"),
    ThinkingPart(content="someone else's", signature="x", provider_name="bedrock"),
    ThinkingPart(content="nobody's"),
    ToolCallPart("write", '{"p": "a"}', tool_call_id="call_1"),
]


class Scripted:
    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(part, UserPromptPart) for part in last.parts):
            return ModelResponse(parts=list(self.parts), model_name="scripted")
        return ModelResponse(parts=[TextPart(content="Done.")], model_name="scripted")


def run_once(env: AdapterEnv, app_id: str, parts: list[Any]) -> list[ModelMessage]:
    agent = Agent(FunctionModel(Scripted(parts)))

    @agent.tool_plain
    def write(p: str) -> str:
        return f"wrote {p}"

    store = MemstoreConversationStore(env.store())

    async def go() -> list[ModelMessage]:
        result = await agent.run("write a and b", conversation=Conversation(conversation_id=app_id))
        await store.save(result)
        loaded = await store.load(app_id)
        assert loaded is not None
        return list(loaded.messages)

    return env.loop.run_until_complete(go())


def rebuilt_reply(env: AdapterEnv, app_id: str) -> tuple[list[Any], AiMessage]:
    sync = env.sync_store()
    sync.memory(app_id).invalidate()  # as after a restart
    window = sync.memory(app_id).messages()
    replies = [m for m in window if isinstance(m, AiMessage) and m.tool_requests]
    return window, replies[0]


def test_anthropic_thinking_goes_back_in_place(env: AdapterEnv, app_id: str) -> None:
    loaded = run_once(env, app_id, ANTHROPIC_PARTS)
    response = next(m for m in loaded if isinstance(m, ModelResponse))
    assert [type(p).__name__ for p in response.parts] == [type(p).__name__ for p in ANTHROPIC_PARTS]
    window, reply = rebuilt_reply(env, app_id)
    assert [(p.kind, p.signature, p.before_call) for p in reply.reasoning] == [
        ("thinking", signature(1), None),
        ("redacted_thinking", signature(2), None),
        ("thinking", signature(3), "toolu_2"),
    ]
    _, turns = to_anthropic(window)
    assert_anthropic_request(turns)
    blocks = next(t["content"] for t in turns if t["role"] == "assistant")
    assert [b["type"] for b in blocks] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
        "thinking",
        "tool_use",
    ]
    assert blocks[0]["signature"] == signature(1) and blocks[1]["data"] == signature(2)
    shown = " ".join(entry.text for entry in env.sync_store().history(app_id))
    for hidden in ("Two files.", "Now b.", signature(1), signature(2), signature(3)):
        assert hidden not in shown


def test_responses_reasoning_items_go_back_before_their_calls(env: AdapterEnv, app_id: str) -> None:
    run_once(env, app_id, OPENAI_PARTS)
    window, reply = rebuilt_reply(env, app_id)
    assert [(p.id, p.text, p.signature, p.before_call) for p in reply.reasoning] == [
        ("rs_1", "**Plan**\n\ntwo writes", signature(4), None),
        ("rs_2", None, signature(5), "call_2"),
    ]
    items = to_responses(window)
    assert_responses_input(items)
    kinds = [(item.get("type"), item.get("id") or item.get("call_id")) for item in items]
    at = kinds.index(("reasoning", "rs_1"))
    assert kinds[at : at + 4] == [
        ("reasoning", "rs_1"),
        ("function_call", "call_1"),
        ("reasoning", "rs_2"),
        ("function_call", "call_2"),
    ]
    assert items[at]["summary"] == [
        {"type": "summary_text", "text": "**Plan**"},
        {"type": "summary_text", "text": "two writes"},
    ]
    assert items[at]["encrypted_content"] == signature(4)


def test_reasoning_content_goes_back_on_chat_completions(env: AdapterEnv, app_id: str) -> None:
    run_once(env, app_id, CHAT_PARTS)
    window, reply = rebuilt_reply(env, app_id)
    assert [(p.kind, p.text) for p in reply.reasoning] == [
        ("reasoning_content", "The user wants a.")
    ]
    messages = to_openai(window)
    assert_chat_messages(messages)
    assert any(m.get("reasoning_content") == "The user wants a." for m in messages)


def test_thinking_no_provider_takes_back_stays_in_the_metadata_only() -> None:
    response = ModelResponse(parts=list(UNKEPT_PARTS), model_name="scripted")
    (row,) = entry_to_messages(ConversationEntry(id="e1", parent_id=None, message=response))
    assert isinstance(row, AiMessage) and list(row.reasoning) == []


def test_thinking_only_response_is_still_an_opaque_row() -> None:
    response = ModelResponse(parts=[ANTHROPIC_PARTS[0]], model_name="scripted")
    (row,) = entry_to_messages(ConversationEntry(id="e1", parent_id=None, message=response))
    assert not isinstance(row, AiMessage)


def test_parallel_calls_sharing_one_call_id_make_a_valid_row() -> None:
    response = ModelResponse(
        parts=[
            ToolCallPart("add", {"a": 1}, tool_call_id="call_0"),
            ToolCallPart("add", {"a": 2}, tool_call_id="call_0"),
        ],
        model_name="scripted",
    )
    (row,) = entry_to_messages(ConversationEntry(id="e1", parent_id=None, message=response))
    assert isinstance(row, AiMessage) and [r.id for r in row.tool_requests] == ["call_0"]
