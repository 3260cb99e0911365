"""LangChain reasoning kept with its calls: the reasoning in an ``AIMessage`` (langchain-anthropic
``thinking`` / ``redacted_thinking`` blocks, langchain-openai Responses ``reasoning`` items,
LangChain 1.x standard ``reasoning`` blocks, ``additional_kwargs["reasoning_content"]``)
becomes memstore ``Reasoning`` parts of the message's row, in place, so a window rebuilt from
SQL renders it for its provider, while reading back still returns the messages as added.

The messages are built by hand in the shapes the integrations produce (langchain-anthropic and
langchain-openai are not test dependencies); the LangChain 1.x blocks come from langchain-core's
own translators (``AIMessage.content_blocks``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)

from memstore import MemoryStore
from memstore.adapters.langchain import LANGCHAIN_KEY, MemstoreChatMessageHistory, to_canonical
from memstore.formats import to_anthropic, to_openai, to_responses
from memstore.messages import AiMessage, Reasoning
from tests.adapters.conftest import AdapterEnv
from tests.unit.test_reasoning import (
    assert_anthropic_request,
    assert_chat_messages,
    assert_responses_input,
    signature,
)

THOUGHT_1 = "The user wants two files: a first."
THOUGHT_2 = "Now b.txt."


def calls(*ids: str) -> list[dict[str, Any]]:
    return [
        {"name": "write_file", "args": {"path": f"{n}.txt"}, "id": call_id, "type": "tool_call"}
        for n, call_id in enumerate(ids)
    ]


def tool_use(call_id: str, n: int) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "write_file", "input": {"path": f"{n}.txt"}}


def function_call(call_id: str, n: int) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": call_id,
        "name": "write_file",
        "arguments": json.dumps({"path": f"{n}.txt"}),
        "status": "completed",
    }


THINKING_BLOCK = {"type": "thinking", "thinking": THOUGHT_1, "signature": signature(1)}
REDACTED_BLOCK = {"type": "redacted_thinking", "data": signature(2)}
LATE_THINKING = {"type": "thinking", "thinking": THOUGHT_2, "signature": signature(3), "index": 3}

ANTHROPIC_REPLY = AIMessage(
    content=[
        THINKING_BLOCK,
        REDACTED_BLOCK,
        {"type": "text", "text": "Writing both."},
        tool_use("toolu_1", 0),
        LATE_THINKING,  # after a call: goes back right before the next one
        tool_use("toolu_2", 1),
    ],
    tool_calls=calls("toolu_1", "toolu_2"),
    id="msg_01",
    response_metadata={"model_provider": "anthropic", "stop_reason": "tool_use"},
)

RS_1 = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [
        {"type": "summary_text", "text": "**Plan**", "index": 0},
        {"type": "summary_text", "text": "two writes", "index": 1},
    ],
    "encrypted_content": signature(4),
    "index": 0,
}
RS_2 = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": signature(5)}

OPENAI_REPLY = AIMessage(
    content=[RS_1, function_call("call_1", 0), RS_2, function_call("call_2", 1)],
    tool_calls=calls("call_1", "call_2"),
    id="resp_1",
    response_metadata={"model_provider": "openai", "id": "resp_1"},
)


def history_of(env: AdapterEnv, app_id: str) -> MemstoreChatMessageHistory:
    return MemstoreChatMessageHistory(env.store(), app_id)


def turn(reply: AIMessage, *ids: str) -> list[BaseMessage]:
    results = [ToolMessage("ok", tool_call_id=call_id, name="write_file") for call_id in ids]
    return [HumanMessage("Write a.txt and b.txt"), reply, *results]


def ai_row(window: list[Any]) -> AiMessage:
    rows = [message for message in window if isinstance(message, AiMessage)]
    assert len(rows) == 1
    return rows[0]


def rebuilt(env: AdapterEnv, app_id: str) -> list[Any]:
    """The window of a new store object on the same database, its cached window dropped (as
    after a restart)."""
    store: MemoryStore = env.sync_store()
    store.memory(app_id).invalidate()
    return store.memory(app_id).messages()


# --- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_thinking_and_tool_calls_round_trip(env: AdapterEnv, app_id: str) -> None:
    sent = turn(ANTHROPIC_REPLY, "toolu_1", "toolu_2")
    history = history_of(env, app_id)
    history.add_messages(sent)
    assert history.messages == sent  # read back from the metadata copy, unchanged

    window = env.sync_store().load_window(app_id, max_messages=10)
    row = ai_row(window)
    assert row.reasoning == [
        Reasoning(provider="anthropic", kind="thinking", text=THOUGHT_1, signature=signature(1)),
        Reasoning(provider="anthropic", kind="redacted_thinking", signature=signature(2)),
        Reasoning(
            provider="anthropic",
            kind="thinking",
            text=THOUGHT_2,
            signature=signature(3),
            before_call="toolu_2",
        ),
    ]
    _, messages = to_anthropic(window)
    assert_anthropic_request(messages)
    assert messages[1]["content"] == [
        THINKING_BLOCK,
        REDACTED_BLOCK,
        {"type": "text", "text": "Writing both."},
        tool_use("toolu_1", 0),
        {key: value for key, value in LATE_THINKING.items() if key != "index"},
        tool_use("toolu_2", 1),
    ]
    assert not any(item.get("type") == "reasoning" for item in to_responses(window))


def test_a_restart_renders_the_signature_intact(env: AdapterEnv, app_id: str) -> None:
    history_of(env, app_id).add_messages(turn(ANTHROPIC_REPLY, "toolu_1"))  # toolu_2 unanswered
    window = rebuilt(env, app_id)
    _, messages = to_anthropic(window)
    assert_anthropic_request(messages)
    blocks = messages[1]["content"]
    assert blocks[0] == THINKING_BLOCK and blocks[1] == REDACTED_BLOCK
    assert [block["type"] for block in blocks[3:]] == ["tool_use", "thinking", "tool_use"]
    assert blocks[4]["signature"] == signature(3)
    # the unanswered call is answered by the loader, and the reasoning stays with its call
    assert messages[2]["content"][1]["tool_use_id"] == "toolu_2"


def test_standard_blocks_of_an_anthropic_reply_are_the_same_parts() -> None:
    """LangChain 1.x blocks (``output_version="v1"``): a ``reasoning`` block with the signature
    in ``extras``, ``redacted_thinking`` as a ``non_standard`` block."""
    standard = ANTHROPIC_REPLY.content_blocks
    assert standard[0] == {
        "type": "reasoning",
        "reasoning": THOUGHT_1,
        "extras": {"signature": signature(1)},
    }
    assert standard[1] == {"type": "non_standard", "value": REDACTED_BLOCK}
    v1 = ANTHROPIC_REPLY.model_copy(
        update={
            "content": standard,
            "response_metadata": {"model_provider": "anthropic", "output_version": "v1"},
        }
    )
    native = to_canonical(ANTHROPIC_REPLY)
    converted = to_canonical(v1)
    assert isinstance(native, AiMessage) and isinstance(converted, AiMessage)
    assert converted.reasoning == native.reasoning
    assert converted.metadata[LANGCHAIN_KEY]["data"]["content"] == standard


# --- OpenAI Responses ----------------------------------------------------------------------------


def test_responses_reasoning_items_go_before_their_calls(env: AdapterEnv, app_id: str) -> None:
    sent = turn(OPENAI_REPLY, "call_1", "call_2")
    history = history_of(env, app_id)
    history.add_messages(sent)
    assert history.messages == sent

    window = rebuilt(env, app_id)
    row = ai_row(window)
    first, second = row.reasoning
    assert (first.id, first.signature, first.text, first.before_call) == (
        "rs_1",
        signature(4),
        "**Plan**\n\ntwo writes",
        None,
    )
    assert (second.id, second.signature, second.text, second.before_call) == (
        "rs_2",
        signature(5),
        None,
        "call_2",
    )
    items = to_responses(window)
    assert_responses_input(items)
    assert [(item.get("type"), item.get("id") or item.get("call_id")) for item in items[1:5]] == [
        ("reasoning", "rs_1"),
        ("function_call", "call_1"),
        ("reasoning", "rs_2"),
        ("function_call", "call_2"),
    ]
    # the items as the API sent them, without LangChain's streaming ``index`` keys
    assert items[1] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [
            {"type": "summary_text", "text": "**Plan**"},
            {"type": "summary_text", "text": "two writes"},
        ],
        "encrypted_content": signature(4),
    }
    assert items[3] == RS_2
    _, messages = to_anthropic(window)
    assert all(
        block.get("type") not in ("thinking", "redacted_thinking")
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
    )


def test_standard_blocks_of_an_openai_reply_are_the_same_items() -> None:
    """LangChain 1.x splits a reasoning item into one ``reasoning`` block per summary text,
    its other fields in the first block's ``extras``; they are joined back as langchain-openai
    does before sending."""
    standard = OPENAI_REPLY.content_blocks
    assert [block["type"] for block in standard] == [
        "reasoning",
        "reasoning",
        "tool_call",
        "reasoning",
        "tool_call",
    ]
    v1 = OPENAI_REPLY.model_copy(
        update={
            "content": standard,
            "response_metadata": {"model_provider": "openai", "output_version": "v1"},
        }
    )
    native = to_canonical(OPENAI_REPLY)
    converted = to_canonical(v1)
    assert isinstance(native, AiMessage) and isinstance(converted, AiMessage)
    assert converted.reasoning == native.reasoning


def test_a_v0_reasoning_item_in_additional_kwargs_is_kept() -> None:
    reply = AIMessage(
        content=[{"type": "text", "text": "Writing."}],
        additional_kwargs={"reasoning": RS_2},
        tool_calls=calls("call_1"),
    )
    row = to_canonical(reply)
    assert isinstance(row, AiMessage)
    assert [(part.id, part.signature, part.before_call) for part in row.reasoning] == [
        ("rs_2", signature(5), None)
    ]


def test_reasoning_after_the_last_call_or_before_an_unknown_call() -> None:
    """A part is placed before the next call the row holds; with none after it, at the head."""
    reply = AIMessage(
        content=[
            tool_use("toolu_1", 0),
            THINKING_BLOCK,
            tool_use("toolu_x", 9),  # not in tool_calls (an invalid call): not a place
            REDACTED_BLOCK,
            tool_use("toolu_2", 1),
            LATE_THINKING,
        ],
        tool_calls=calls("toolu_1", "toolu_2"),
    )
    row = to_canonical(reply)
    assert isinstance(row, AiMessage)
    assert [part.before_call for part in row.reasoning] == ["toolu_2", "toolu_2", None]


# --- reasoning_content ---------------------------------------------------------------------------


def test_reasoning_content_goes_back_on_chat_completions(env: AdapterEnv, app_id: str) -> None:
    reply = AIMessage(
        content="",
        additional_kwargs={"reasoning_content": THOUGHT_1},
        tool_calls=calls("call_1"),
        response_metadata={"model_provider": "deepseek"},
    )
    sent = turn(reply, "call_1")
    history = history_of(env, app_id)
    history.add_messages(sent)
    assert history.messages == sent
    window = rebuilt(env, app_id)
    assert ai_row(window).reasoning == [
        Reasoning(provider="openai", kind="reasoning_content", text=THOUGHT_1)
    ]
    messages = to_openai(window)
    assert_chat_messages(messages)
    assert messages[1]["reasoning_content"] == THOUGHT_1
    assert not any(item.get("type") == "reasoning" for item in to_responses(window))


# --- what is not kept ----------------------------------------------------------------------------

MALFORMED: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    # (case, content block, additional_kwargs, response_metadata)
    ("thinking-no-signature", {"type": "thinking", "thinking": "x"}, {}, {}),
    ("thinking-empty-signature", {"type": "thinking", "thinking": "x", "signature": ""}, {}, {}),
    ("thinking-int-signature", {"type": "thinking", "thinking": "x", "signature": 5}, {}, {}),
    ("thinking-list-text", {"type": "thinking", "thinking": ["x"], "signature": "s"}, {}, {}),
    ("redacted-int-data", {"type": "redacted_thinking", "data": 5}, {}, {}),
    ("thinking-of-gemini", THINKING_BLOCK, {}, {"model_provider": "google_genai"}),
    ("item-summary-str", {"type": "reasoning", "id": "rs_1", "summary": "x"}, {}, {}),
    (
        "item-summary-part",
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text"}]},
        {},
        {},
    ),
    (
        "item-summary-part-type",
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "x", "text": "y"}]},
        {},
        {},
    ),
    ("item-no-id", {"type": "reasoning", "summary": []}, {}, {}),
    ("item-int-id", {"type": "reasoning", "id": 1, "summary": []}, {}, {}),
    (
        "item-int-encrypted",
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": 7},
        {},
        {},
    ),
    ("item-of-anthropic", RS_2, {}, {"model_provider": "anthropic"}),
    ("standard-no-provider", {"type": "reasoning", "reasoning": "x", "id": "rs_1"}, {}, {}),
    (
        "standard-anthropic-no-signature",
        {"type": "reasoning", "reasoning": "x"},
        {},
        {"model_provider": "anthropic"},
    ),
    (
        "standard-anthropic-extras-str",
        {"type": "reasoning", "reasoning": "x", "extras": "s"},
        {},
        {"model_provider": "anthropic"},
    ),
    (
        "standard-openai-extras-str",
        {"type": "reasoning", "reasoning": "x", "id": "rs_1", "extras": "s"},
        {},
        {"model_provider": "openai"},
    ),
    (
        "standard-openai-no-id",
        {"type": "reasoning", "reasoning": "x"},
        {},
        {"model_provider": "openai"},
    ),
    (
        "standard-openai-int-text",
        {"type": "reasoning", "reasoning": 5, "id": "rs_1"},
        {},
        {"model_provider": "openai"},
    ),
    (
        "non-standard-str",
        {"type": "non_standard", "value": "redacted_thinking"},
        {},
        {"model_provider": "anthropic"},
    ),
    (
        "non-standard-int-data",
        {"type": "non_standard", "value": {"type": "redacted_thinking", "data": 1}},
        {},
        {"model_provider": "anthropic"},
    ),
    ("reasoning-content-int", {"type": "text", "text": "t"}, {"reasoning_content": 5}, {}),
    ("reasoning-content-empty", {"type": "text", "text": "t"}, {"reasoning_content": ""}, {}),
    ("v0-item-list", {"type": "text", "text": "t"}, {"reasoning": [RS_2]}, {}),
    ("v0-item-no-id", {"type": "text", "text": "t"}, {"reasoning": {"summary": []}}, {}),
    ("model-provider-int", THINKING_BLOCK, {}, {"model_provider": 5}),
]


@pytest.mark.parametrize(
    ("block", "kwargs", "response_metadata"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_reasoning_that_cannot_go_back_is_left_in_the_metadata_copy(
    block: dict[str, Any], kwargs: dict[str, Any], response_metadata: dict[str, Any]
) -> None:
    reply = AIMessage(
        content=[block, tool_use("toolu_1", 0)],
        additional_kwargs=kwargs,
        tool_calls=calls("toolu_1"),
        response_metadata=response_metadata,
    )
    row = to_canonical(reply)
    assert isinstance(row, AiMessage)
    if response_metadata.get("model_provider") == 5:
        # an unusable provider name counts as none: the block's own shape decides
        assert [part.kind for part in row.reasoning] == ["thinking"]
        return
    assert row.reasoning == []
    assert row.metadata[LANGCHAIN_KEY]["data"]["content"][0] == block
    assert row.metadata[LANGCHAIN_KEY]["data"]["additional_kwargs"] == kwargs


def test_a_streamed_chunk_keeps_its_reasoning(env: AdapterEnv, app_id: str) -> None:
    chunk = AIMessageChunk(
        content=[{**THINKING_BLOCK, "index": 0}, {**tool_use("toolu_1", 0), "index": 1}],
        tool_call_chunks=[
            {"name": "write_file", "args": '{"path": "0.txt"}', "id": "toolu_1", "index": 1}
        ],
        response_metadata={"model_provider": "anthropic"},
    )
    sent = turn(chunk, "toolu_1")
    history = history_of(env, app_id)
    history.add_messages(sent)
    assert history.messages == sent
    _, messages = to_anthropic(rebuilt(env, app_id))
    assert_anthropic_request(messages)
    assert messages[1]["content"][0] == THINKING_BLOCK


def test_reasoning_never_reaches_the_display_history(env: AdapterEnv, app_id: str) -> None:
    history = history_of(env, app_id)
    history.add_messages(turn(ANTHROPIC_REPLY, "toolu_1", "toolu_2"))
    history.add_messages(turn(OPENAI_REPLY, "call_1", "call_2"))
    reply = AIMessage("Done.", additional_kwargs={"reasoning_content": "secret musing"})
    history.add_messages([HumanMessage("and?"), reply])
    secrets = [THOUGHT_1, THOUGHT_2, "**Plan**", "two writes", "secret musing"]
    secrets += [signature(seed) for seed in range(1, 6)]
    display = env.sync_store().history(app_id, limit=100)
    assert display
    shown = repr(display)
    for secret in secrets:
        assert secret not in shown
