"""memstore.formats: OpenAI, Anthropic and LangChain4j converters and the validator re-export.

Example tests per format, then property tests:

* canonical -> provider -> canonical equals what the format can carry (``expected_*`` below
  spell it out: the identity on LangChain4j but for system metadata; for OpenAI without
  ``is_error``, metadata and with tool names recovered from the requests; for Anthropic with
  the system text joined first, merged runs, normalised argument text, recovered tool names);
* provider -> canonical -> provider is stable;
* every window ``select_window`` returns converts to each format, is structurally what the
  provider accepts, and converts back to a list the validator finds clean.
"""

from __future__ import annotations

import doctest
import itertools
import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memstore.formats
import memstore.formats.anthropic
import memstore.formats.langchain4j
import memstore.formats.openai
import memstore.formats.responses
from memstore.core.validate import Violation as CoreViolation
from memstore.core.validate import validate as core_validate
from memstore.core.window import StoredMessage, select_window
from memstore.errors import FormatConversionError, InvalidMessageError
from memstore.formats import (
    PARTICIPANT_NAME_KEY,
    THINKING_KEY,
    AnthropicRequest,
    Violation,
    from_anthropic,
    from_langchain4j,
    from_openai,
    merge_turns,
    to_anthropic,
    to_langchain4j,
    to_langchain4j_json,
    to_openai,
    validate,
)
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from tests.unit.test_window_properties import PROPERTY, histories

ARGS_A = '{"path": "a.txt",  "content": "héllo 🌍"}'
ARGS_B = '{ "path":"b.txt" , "mode" : 420 }'


def call(call_id: str, name: str = "write_file", arguments: str = ARGS_A) -> ToolRequest:
    return ToolRequest(id=call_id, name=name, arguments=arguments)


def calls(*requests: ToolRequest, text: str | None = None) -> AiMessage:
    return AiMessage(text=text, tool_requests=list(requests))


def result(
    call_id: str, text: str = "ok", name: str = "write_file", error: bool = False
) -> ToolResult:
    return ToolResult(id=call_id, tool_name=name, text=text, is_error=error)


def turn_with_parallel_calls() -> list[Message]:
    return [
        SystemMessage(text="Be brief."),
        UserMessage(text="Create a.txt and b.txt"),
        calls(call("call_a"), call("call_b", arguments=ARGS_B)),
        result("call_b", "b written"),
        result("call_a", "disk full", error=True),
        AiMessage(text="b.txt is there; a.txt failed."),
    ]


def normalised(arguments: str) -> str:
    return json.dumps(json.loads(arguments), ensure_ascii=False)


# --- package surface ---------------------------------------------------------------------------


def test_validate_is_the_core_validator() -> None:
    assert memstore.formats.validate is core_validate
    assert memstore.formats.Violation is CoreViolation
    problems = validate([result("x")], "openai")
    assert sorted((v.index, v.code) for v in problems) == [
        (0, "orphan_result"),
        (0, "wrong_first_role"),
    ]
    assert all(isinstance(v, Violation) for v in problems)


def test_conversion_errors_are_invalid_message_errors() -> None:
    assert issubclass(FormatConversionError, InvalidMessageError)


@pytest.mark.parametrize(
    "module",
    [
        memstore.formats,
        memstore.formats.openai,
        memstore.formats.anthropic,
        memstore.formats.langchain4j,
        memstore.formats.responses,
    ],
)
def test_docstring_examples_run(module: ModuleType) -> None:
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0
    assert outcome.failed == 0


@pytest.mark.parametrize("convert", [to_openai, to_anthropic, to_langchain4j])
def test_to_functions_take_the_dict_form(convert: Any) -> None:
    as_dicts = [message.model_dump() for message in turn_with_parallel_calls()]
    assert convert(as_dicts) == convert(turn_with_parallel_calls())


@pytest.mark.parametrize("convert", [to_openai, to_anthropic, to_langchain4j])
def test_to_functions_name_a_bad_canonical_message(convert: Any) -> None:
    with pytest.raises(FormatConversionError) as caught:
        convert([UserMessage(text="hi"), {"type": "robot", "text": "beep"}])
    assert caught.value.index == 1
    assert "message 1" in caught.value.detail


# --- OpenAI ------------------------------------------------------------------------------------


def test_openai_turn_with_parallel_calls() -> None:
    history = turn_with_parallel_calls()
    assert to_openai(history) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Create a.txt and b.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": ARGS_A},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": ARGS_B},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "b written"},
        {"role": "tool", "tool_call_id": "call_a", "content": "disk full"},
        {"role": "assistant", "content": "b.txt is there; a.txt failed."},
    ]
    back = from_openai(to_openai(history))
    # Everything but is_error survives; tool names come back from the requests.
    assert back == [
        m.model_copy(update={"is_error": False}) if isinstance(m, ToolResult) else m
        for m in history
    ]
    assert validate(back, "openai") == []


def test_openai_keeps_arguments_byte_for_byte_and_unicode() -> None:
    weird = '{ "q" :"日本語 \\u00e9 🌍",\n"n":1.50 }'
    history: list[Message] = [
        UserMessage(text="naïve 🌍 — 日本語"),
        calls(call("call_é", "search", weird), text="Looking… 🔎"),
        result("call_é", "résultat ✓", name="search"),
    ]
    wire = to_openai(history)
    assert wire[1]["tool_calls"][0]["function"]["arguments"] == weird
    assert wire[1]["content"] == "Looking… 🔎"
    assert from_openai(json.loads(json.dumps(wire))) == history


def test_openai_tool_name_comes_from_the_latest_earlier_request() -> None:
    wire = [
        {"role": "tool", "tool_call_id": "early", "content": "orphan"},
        *to_openai([calls(call("c", "first"))]),
        {"role": "tool", "tool_call_id": "c", "content": "one"},
        *to_openai([calls(call("c", "second"))]),
        {"role": "tool", "tool_call_id": "c", "content": "two"},
        {"role": "tool", "tool_call_id": "c", "content": "three", "name": "explicit"},
    ]
    names = [m.tool_name for m in from_openai(wire) if isinstance(m, ToolResult)]
    assert names == ["", "first", "second", "explicit"]


def test_openai_participant_name_round_trips() -> None:
    history: list[Message] = [
        SystemMessage(text="rules", metadata={PARTICIPANT_NAME_KEY: "ops"}),
        UserMessage(text="hi", metadata={PARTICIPANT_NAME_KEY: "alice", "other": 1}),
        AiMessage(text="hello", metadata={PARTICIPANT_NAME_KEY: "bot"}),
    ]
    wire = to_openai(history)
    assert [entry.get("name") for entry in wire] == ["ops", "alice", "bot"]
    assert "other" not in json.dumps(wire)
    back = from_openai(wire)
    assert [m.metadata for m in back] == [
        {PARTICIPANT_NAME_KEY: "ops"},
        {PARTICIPANT_NAME_KEY: "alice"},
        {PARTICIPANT_NAME_KEY: "bot"},
    ]


def test_openai_empty_text_next_to_calls_is_kept() -> None:
    history: list[Message] = [UserMessage(text=""), calls(call("c"), text=""), result("c")]
    wire = to_openai(history)
    assert wire[1]["content"] == ""
    assert from_openai(wire) == history


def test_openai_reads_response_dumps_parts_and_developer() -> None:
    wire: list[dict[str, Any]] = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "audio": None,
            "function_call": None,
            "annotations": [],
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "done"}]},
        {"role": "assistant", "content": "ok", "tool_calls": None},
    ]
    assert from_openai(wire) == [
        SystemMessage(text="Be brief."),
        UserMessage(text="hi", metadata={PARTICIPANT_NAME_KEY: "alice"}),
        calls(call("c1", "t", "{}")),
        result("c1", "done", name="t"),
        AiMessage(text="ok"),
    ]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"role": "function", "name": "f", "content": "x"}, "unknown role"),
        ("not a dict", "must be an object"),
        ({"role": "user", "content": "x", "extra": 1}, "unknown keys"),
        ({"role": "user"}, "no content"),
        ({"role": "user", "content": 5}, "list of text parts"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            "'image_url'",
        ),
        ({"role": "assistant", "content": None}, "needs text or at least one tool request"),
        ({"role": "assistant", "content": None, "refusal": "no"}, "'refusal'"),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "t"}}],
            },
            "unknown keys",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "custom", "function": {}}],
            },
            "expected 'function'",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "t", "arguments": {"a": 1}}}],
            },
            "arguments must be a string",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "function": {"name": "t", "arguments": "{}"}},
                    {"id": "c", "function": {"name": "t", "arguments": "{}"}},
                ],
            },
            "duplicate tool call ids",
        ),
        ({"role": "tool", "content": "x"}, "tool_call_id must be a string"),
    ],
)
def test_openai_rejects_what_it_cannot_convert(bad: Any, words: str) -> None:
    with pytest.raises(FormatConversionError) as caught:
        from_openai([{"role": "user", "content": "first"}, bad])
    assert caught.value.index == 1
    assert caught.value.provider == "openai"
    assert "openai message 1" in caught.value.detail
    assert words in caught.value.detail


# --- Anthropic ---------------------------------------------------------------------------------


def test_anthropic_turn_with_parallel_calls() -> None:
    request = to_anthropic(turn_with_parallel_calls())
    assert isinstance(request, AnthropicRequest)
    system, messages = request
    assert system == "Be brief."
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "Create a.txt and b.txt"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_a",
                    "name": "write_file",
                    "input": {"path": "a.txt", "content": "héllo 🌍"},
                },
                {
                    "type": "tool_use",
                    "id": "call_b",
                    "name": "write_file",
                    "input": {"path": "b.txt", "mode": 420},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b",
                    "content": "b written",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_a",
                    "content": "disk full",
                    "is_error": True,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "b.txt is there; a.txt failed."}],
        },
    ]
    back = from_anthropic(messages, system=system)
    expected = turn_with_parallel_calls()
    expected[2] = calls(
        call("call_a", arguments=normalised(ARGS_A)), call("call_b", arguments=normalised(ARGS_B))
    )
    assert back == expected
    assert validate(back, "anthropic") == []


def test_anthropic_merging_keeps_every_result_and_puts_results_first() -> None:
    history: list[Message] = [
        UserMessage(text="go"),
        SystemMessage(text="first rule"),
        calls(call("a"), call("b"), call("c")),
        result("a", "A"),
        UserMessage(text="meanwhile"),  # a user message between results of one group
        result("c", "C"),
        SystemMessage(text="second rule"),  # system messages do not break a run
        result("b", "B"),
        UserMessage(text="and then"),
    ]
    system, messages = to_anthropic(history)
    assert system == "first rule\n\nsecond rule"
    assert [turn["role"] for turn in messages] == ["user", "assistant", "user"]
    merged = messages[2]["content"]
    assert [(b["type"], b.get("tool_use_id") or b.get("text")) for b in merged] == [
        ("tool_result", "a"),
        ("tool_result", "c"),
        ("tool_result", "b"),
        ("text", "meanwhile"),
        ("text", "and then"),
    ]
    back = from_anthropic(messages, system=system)
    assert back == [
        SystemMessage(text="first rule\n\nsecond rule"),
        UserMessage(text="go"),
        calls(
            call("a", arguments=normalised(ARGS_A)),
            call("b", arguments=normalised(ARGS_A)),
            call("c", arguments=normalised(ARGS_A)),
        ),
        result("a", "A"),
        result("c", "C"),
        result("b", "B"),
        UserMessage(text="meanwhile"),
        UserMessage(text="and then"),
    ]


def test_anthropic_merges_consecutive_ai_messages() -> None:
    history: list[Message] = [
        UserMessage(text="hi"),
        AiMessage(text="Let me look."),
        calls(call("x", "search", "{}")),
        result("x", "found", name="search"),
        AiMessage(text="One."),
        AiMessage(text="Two."),
    ]
    _, messages = to_anthropic(history)
    assert messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "x", "name": "search", "input": {}},
        ],
    }
    assert messages[3]["content"] == [
        {"type": "text", "text": "One."},
        {"type": "text", "text": "Two."},
    ]
    back = from_anthropic(messages)
    # A textless AI message joins the one before it; text blocks stay separate messages.
    assert back == [
        UserMessage(text="hi"),
        calls(call("x", "search", "{}"), text="Let me look."),
        result("x", "found", name="search"),
        AiMessage(text="One."),
        AiMessage(text="Two."),
    ]


def test_anthropic_fast_path_returns_an_alternating_list_as_is() -> None:
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "x"}, {"type": "text", "text": "t"}],
        },
    ]
    assert merge_turns(turns) is turns
    # to_anthropic's own output is already merged: merging it again changes nothing.
    _, messages = to_anthropic(turn_with_parallel_calls())
    assert merge_turns(messages) is messages


def test_merge_turns_merges_and_reorders() -> None:
    text = {"type": "text", "text": "t"}
    answer = {"type": "tool_result", "tool_use_id": "x", "content": "r"}
    assistant = {"role": "assistant", "content": "a"}
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": "one"},
        {"role": "user", "content": [text]},
        assistant,
        {"role": "user", "content": [text, answer]},  # alone, but its result is not first
    ]
    merged = merge_turns(turns)
    assert merged is not turns
    assert merged == [
        {"role": "user", "content": [{"type": "text", "text": "one"}, text]},
        assistant,
        {"role": "user", "content": [answer, text]},
    ]
    assert merged[1] is assistant
    assert merged[2]["content"][0] is answer
    with pytest.raises(FormatConversionError) as caught:
        merge_turns([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}])
    assert caught.value.index == 1


def test_anthropic_empty_ai_text_is_left_out_only_next_to_calls() -> None:
    _, messages = to_anthropic([UserMessage(text="q"), calls(call("c"), text=""), result("c")])
    assert [b["type"] for b in messages[1]["content"]] == ["tool_use"]
    _, messages = to_anthropic([UserMessage(text="q"), AiMessage(text="")])
    assert messages[1]["content"] == [{"type": "text", "text": ""}]


@pytest.mark.parametrize(
    "arguments", ["[1, 2]", "not json", '{"x": NaN}', '{"x": 1e999}', "", "null"]
)
def test_anthropic_refuses_arguments_that_are_not_an_object(arguments: str) -> None:
    history: list[Message] = [UserMessage(text="q"), calls(call("c", arguments=arguments))]
    if arguments != '{"x": 1e999}':  # strict JSON to the validator, but no finite number
        assert [v.code for v in validate(history, "anthropic")].count("arguments_not_object") == 1
    with pytest.raises(FormatConversionError) as caught:
        to_anthropic(history)
    assert caught.value.index == 1
    assert caught.value.provider == "anthropic"
    assert "'c'" in caught.value.detail


def test_anthropic_arguments_survive_as_json_not_bytes() -> None:
    raw = '{ "b":1,\n  "a" : [true, null, 2.50], "u": "\\u00e9🌍" }'
    _, messages = to_anthropic([UserMessage(text="q"), calls(call("c", arguments=raw))])
    back = from_anthropic(messages)
    assert isinstance(back[1], AiMessage)
    returned = back[1].tool_requests[0].arguments
    assert returned == '{"b": 1, "a": [true, null, 2.5], "u": "é🌍"}'
    assert json.loads(returned) == json.loads(raw)


def test_anthropic_splits_a_user_turn_into_results_then_user_messages() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both.", "citations": None},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "timeout",
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "Also Rome, please."},
            ],
        },
    ]
    system = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use °C."}]
    assert from_anthropic(messages, system=system) == [
        SystemMessage(text="Be brief."),
        SystemMessage(text="Use °C."),
        UserMessage(text="Weather in Paris and Oslo?"),
        calls(
            call("toolu_1", "weather", '{"city": "Paris"}'),
            call("toolu_2", "weather", '{"city": "Oslo"}'),
            text="Checking both.",
        ),
        result("toolu_1", "sunny", name="weather"),
        result("toolu_2", "timeout", name="weather", error=True),
        UserMessage(text="Also Rome, please."),
    ]


def test_anthropic_tool_result_without_content_or_request() -> None:
    back = from_anthropic(
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "gone"}]}]
    )
    assert back == [ToolResult(id="gone", tool_name="", text="")]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"role": "system", "content": "x"}, "unknown role"),
        ({"role": "assistant", "content": []}, "non-empty list"),
        ({"role": "assistant", "content": None}, "non-empty list"),
        ({"role": "assistant", "content": "x", "id": "msg_1"}, "unknown keys"),
        (
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
            },
            "thinking only",
        ),
        ({"role": "user", "content": [{"type": "image", "source": {}}]}, "'image'"),
        (
            {
                "role": "user",
                "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {}}],
            },
            "user turn",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "c"}]},
            "assistant turn",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "t", "input": "{}"}],
            },
            "input",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "x", "citations": [{"c": 1}]}],
            },
            "citations",
        ),
        (
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "image"}]}
                ],
            },
            "'image'",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c", "is_error": "yes"}],
            },
            "boolean",
        ),
        ({"role": "user", "content": [{"type": "text"}]}, "text must be a string"),
    ],
)
def test_anthropic_rejects_what_it_cannot_convert(bad: Any, words: str) -> None:
    with pytest.raises(FormatConversionError) as caught:
        from_anthropic([{"role": "user", "content": "first"}, bad])
    assert caught.value.index == 1
    assert caught.value.provider == "anthropic"
    assert words in caught.value.detail


def test_anthropic_rejects_a_malformed_system() -> None:
    with pytest.raises(FormatConversionError) as caught:
        from_anthropic([], system=[{"type": "image"}])
    assert caught.value.index == -1


# --- LangChain4j -------------------------------------------------------------------------------


def test_langchain4j_json_matches_the_serializer_format() -> None:
    history: list[Message] = [
        SystemMessage(text="Be brief."),
        UserMessage(text="Weather in Munich?", metadata={PARTICIPANT_NAME_KEY: "Klaus"}),
        calls(call("call_1", "weather", '{"city": "Munich"}')),
        result("call_1", "sunny", name="weather"),
        AiMessage(text="Sunny."),
    ]
    expected = (
        '[{"text":"Be brief.","type":"SYSTEM"},'
        '{"name":"Klaus","contents":[{"text":"Weather in Munich?","type":"TEXT"}],"type":"USER"},'
        '{"toolExecutionRequests":[{"id":"call_1","name":"weather",'
        '"arguments":"{\\"city\\": \\"Munich\\"}"}],"type":"AI"},'
        '{"id":"call_1","toolName":"weather","text":"sunny","type":"TOOL_EXECUTION_RESULT"},'
        '{"text":"Sunny.","type":"AI"}]'
    )
    assert to_langchain4j_json(history) == expected
    assert from_langchain4j(expected) == history
    assert from_langchain4j(expected.encode()) == history
    assert from_langchain4j(json.loads(expected)) == history


def test_langchain4j_round_trips_is_error_metadata_and_thinking() -> None:
    history: list[Message] = [
        UserMessage(text="hi", metadata={"tenant": "t1", PARTICIPANT_NAME_KEY: "ann"}),
        AiMessage(
            text="x",
            tool_requests=[call("c", arguments=ARGS_B)],
            metadata={THINKING_KEY: "let me think", "cost": [1, 2.5, None]},
        ),
        ToolResult(id="c", tool_name="write_file", text="boom", is_error=True, metadata={"ms": 12}),
    ]
    wire = to_langchain4j(history)
    assert wire[0] == {
        "name": "ann",
        "contents": [{"text": "hi", "type": "TEXT"}],
        "attributes": {"tenant": "t1"},
        "type": "USER",
    }
    assert wire[1]["thinking"] == "let me think"
    assert wire[1]["attributes"] == {"cost": [1, 2.5, None]}
    assert wire[1]["toolExecutionRequests"][0]["arguments"] == ARGS_B  # verbatim
    assert wire[2] == {
        "id": "c",
        "toolName": "write_file",
        "text": "boom",
        "isError": True,
        "attributes": {"ms": 12},
        "type": "TOOL_EXECUTION_RESULT",
    }
    assert from_langchain4j(to_langchain4j_json(history)) == history


def test_langchain4j_legacy_leaves_out_newer_fields() -> None:
    history: list[Message] = [
        UserMessage(text="hi", metadata={"tenant": "t1", PARTICIPANT_NAME_KEY: "ann"}),
        AiMessage(text="x", tool_requests=[call("c")], metadata={THINKING_KEY: "hm"}),
        ToolResult(id="c", tool_name="write_file", text="boom", is_error=True, metadata={"ms": 12}),
    ]
    wire = to_langchain4j(history, legacy=True)
    assert wire[0] == {"name": "ann", "contents": [{"text": "hi", "type": "TEXT"}], "type": "USER"}
    assert set(wire[1]) == {"text", "toolExecutionRequests", "type"}
    assert wire[2] == {
        "id": "c",
        "toolName": "write_file",
        "text": "boom",
        "type": "TOOL_EXECUTION_RESULT",
    }
    back = from_langchain4j(wire)
    assert isinstance(back[2], ToolResult) and back[2].is_error is False
    assert back[0].metadata == {PARTICIPANT_NAME_KEY: "ann"}


def test_langchain4j_reads_other_schema_versions() -> None:
    stored = json.dumps(
        [
            {"text": "old user schema", "type": "USER"},
            {
                "text": None,
                "thinking": "plan",
                "toolExecutionRequests": [{"id": "c", "name": "t", "arguments": "{}"}],
                "attributes": {},
                "type": "AI",
            },
            {
                "id": "c",
                "toolName": "t",
                "contents": [{"text": "newer result schema", "type": "TEXT"}],
                "isError": False,
                "attributes": {"k": "v"},
                "type": "TOOL_EXECUTION_RESULT",
            },
            {"id": "d", "text": "no tool name", "type": "TOOL_EXECUTION_RESULT"},
            {"text": "hello", "toolExecutionRequests": [], "attributes": {}, "type": "AI"},
        ]
    )
    assert from_langchain4j(stored) == [
        UserMessage(text="old user schema"),
        AiMessage(text=None, tool_requests=[call("c", "t", "{}")], metadata={THINKING_KEY: "plan"}),
        ToolResult(id="c", tool_name="t", text="newer result schema", metadata={"k": "v"}),
        ToolResult(id="d", tool_name="", text="no tool name"),
        AiMessage(text="hello"),
    ]
    assert from_langchain4j(None) == []
    assert from_langchain4j("null") == []
    assert from_langchain4j("[]") == []


def test_langchain4j_unicode_is_written_raw_and_arguments_verbatim() -> None:
    escaped = '{"q": "\\u00e9t\\u00e9"}'
    history: list[Message] = [
        UserMessage(text="Grüße 🌍 日本語"),
        calls(call("c", "search", escaped)),
        result("c", "été ✓", name="search"),
    ]
    text = to_langchain4j_json(history)
    assert "Grüße 🌍 日本語" in text
    assert "été ✓" in text
    back = from_langchain4j(text)
    assert back == history
    assert isinstance(back[1], AiMessage) and back[1].tool_requests[0].arguments == escaped


def test_langchain4j_refuses_metadata_that_is_not_json() -> None:
    # Construction refuses it now; a message built around validation still gets a typed error.
    with pytest.raises(InvalidMessageError):
        UserMessage(text="b", metadata={"x": {1, 2}})
    bypass = UserMessage.model_construct(text="b", metadata={"x": {1, 2}})
    with pytest.raises(FormatConversionError) as caught:
        to_langchain4j([UserMessage(text="a"), bypass])
    assert caught.value.index == 1
    assert caught.value.provider == "langchain4j"


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"attributes": {"k": "v"}, "type": "CUSTOM"}, "unknown message type 'CUSTOM'"),
        ({"text": "x"}, "unknown message type None"),
        ({"contents": [{"image": {"url": "u"}, "type": "IMAGE"}], "type": "USER"}, "'IMAGE'"),
        (
            {
                "contents": [{"text": "a", "type": "TEXT"}, {"text": "b", "type": "TEXT"}],
                "type": "USER",
            },
            "exactly one",
        ),
        ({"contents": [{"text": "a", "type": "TEXT"}], "text": "a", "type": "USER"}, "both"),
        ({"text": "x", "type": "SYSTEM", "name": "n"}, "unknown keys"),
        ({"type": "AI"}, "needs text or at least one tool request"),
        (
            {"toolExecutionRequests": [{"name": "t", "arguments": "{}"}], "type": "AI"},
            "id must be a string",
        ),
        ({"toolExecutionRequests": {"id": "c"}, "type": "AI"}, "must be a list"),
        (
            {
                "id": "c",
                "toolName": "t",
                "text": "x",
                "isError": "no",
                "type": "TOOL_EXECUTION_RESULT",
            },
            "boolean",
        ),
        (
            {
                "name": "a",
                "contents": [{"text": "x", "type": "TEXT"}],
                "attributes": {PARTICIPANT_NAME_KEY: "b"},
                "type": "USER",
            },
            "both",
        ),
        ({"text": "x", "attributes": [1], "type": "AI"}, "attributes must be an object"),
        (7, "must be an object"),
    ],
)
def test_langchain4j_rejects_what_it_cannot_convert(bad: Any, words: str) -> None:
    with pytest.raises(FormatConversionError) as caught:
        from_langchain4j(json.dumps([{"text": "first", "type": "SYSTEM"}, bad]))
    assert caught.value.index == 1
    assert caught.value.provider == "langchain4j"
    assert words in caught.value.detail


@pytest.mark.parametrize("bad", ['{"type": "USER"}', "[", "[NaN]", "42", b"\xff"])
def test_langchain4j_rejects_input_that_is_not_a_json_list(bad: str | bytes) -> None:
    with pytest.raises(FormatConversionError) as caught:
        from_langchain4j(bad)
    assert caught.value.index == -1


# --- property tests: round trips ---------------------------------------------------------------

texts = st.text(max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(texts, inner, max_size=2),
    max_leaves=4,
)
metadatas = st.dictionaries(
    st.sampled_from(["k", "é", PARTICIPANT_NAME_KEY, THINKING_KEY]), json_values, max_size=2
)
json_object_texts = st.builds(
    lambda value, indent, ascii_only: json.dumps(value, indent=indent, ensure_ascii=ascii_only),
    st.dictionaries(texts, json_values, max_size=3),
    st.sampled_from([None, 0, 2]),
    st.booleans(),
)


@st.composite
def conversations(draw: st.DrawFn, arguments: st.SearchStrategy[str] = texts) -> list[Message]:
    """Any canonical list (not necessarily valid), call ids unique across requests."""
    messages: list[Message] = []
    requested: list[str] = []
    for step in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "system", "ai", "ai", "result", "result"]))
        metadata = draw(metadatas)
        if kind == "user":
            messages.append(UserMessage(text=draw(texts), metadata=metadata))
        elif kind == "system":
            messages.append(SystemMessage(text=draw(texts), metadata=metadata))
        elif kind == "ai":
            requests = [
                ToolRequest(
                    id=f"call_{step}_{n}{draw(st.text(max_size=2))}",
                    name=draw(st.text(min_size=1, max_size=6)),
                    arguments=draw(arguments),
                )
                for n in range(draw(st.integers(0, 3)))
            ]
            text = draw(st.none() | texts) if requests else draw(texts)
            requested.extend(request.id for request in requests)
            messages.append(AiMessage(text=text, tool_requests=requests, metadata=metadata))
        else:
            answer_a_request = bool(requested) and draw(st.booleans())
            call_id = draw(st.sampled_from(requested)) if answer_a_request else f"orphan_{step}"
            messages.append(
                ToolResult(
                    id=call_id,
                    tool_name=draw(texts),
                    text=draw(texts),
                    is_error=draw(st.booleans()),
                    metadata=metadata,
                )
            )
    return messages


def expected_openai(messages: Sequence[Message]) -> list[Message]:
    """What survives OpenAI: no is_error, no metadata but the participant name."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for message in messages:
        if isinstance(message, ToolResult):
            out.append(
                ToolResult(id=message.id, tool_name=names.get(message.id, ""), text=message.text)
            )
            continue
        name = message.metadata.get(PARTICIPANT_NAME_KEY)
        kept = {PARTICIPANT_NAME_KEY: name} if isinstance(name, str) else {}
        out.append(message.model_copy(update={"metadata": kept}))
        if isinstance(message, AiMessage):
            names.update((request.id, request.name) for request in message.tool_requests)
    return out


def expected_anthropic(messages: Sequence[Message]) -> list[Message]:
    """What survives Anthropic: see the module docstring of memstore.formats.anthropic."""
    system = [m.text for m in messages if isinstance(m, SystemMessage)]
    out: list[Message] = [SystemMessage(text="\n\n".join(system))] if system else []
    names: dict[str, str] = {}
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    for is_ai, run in itertools.groupby(rest, key=lambda m: isinstance(m, AiMessage)):
        if not is_ai:
            members = list(run)
            for answer in [m for m in members if isinstance(m, ToolResult)]:
                out.append(
                    ToolResult(
                        id=answer.id,
                        tool_name=names.get(answer.id, ""),
                        text=answer.text,
                        is_error=answer.is_error,
                    )
                )
            out.extend(UserMessage(text=m.text) for m in members if isinstance(m, UserMessage))
            continue
        pieces: list[tuple[str | None, list[ToolRequest]]] = []
        for message in run:
            assert isinstance(message, AiMessage)
            text = message.text if message.text or not message.tool_requests else None
            requests = [
                r.model_copy(update={"arguments": normalised(r.arguments)})
                for r in message.tool_requests
            ]
            if text is None and pieces and pieces[-1] != ("", []):
                pieces[-1][1].extend(requests)
            else:
                pieces.append((text, requests))
        for text, requests in pieces:
            out.append(AiMessage(text=text, tool_requests=requests))
            names.update((request.id, request.name) for request in requests)
    return out


def expected_langchain4j(messages: Sequence[Message]) -> list[Message]:
    """What survives LangChain4j: everything but a system message's metadata."""
    return [SystemMessage(text=m.text) if isinstance(m, SystemMessage) else m for m in messages]


@PROPERTY
@given(conversations())
def test_openai_round_trip(messages: list[Message]) -> None:
    wire = to_openai(messages)
    back = from_openai(json.loads(json.dumps(wire)))
    assert back == expected_openai(messages)
    assert to_openai(back) == wire  # and the provider side is stable


@PROPERTY
@given(conversations(arguments=json_object_texts))
def test_anthropic_round_trip(messages: list[Message]) -> None:
    system, turns = to_anthropic(messages)
    back = from_anthropic(json.loads(json.dumps(turns)), system=system)
    assert back == expected_anthropic(messages)
    # Arguments are equal as JSON, and the provider side is stable.
    sent = [r.arguments for m in messages if isinstance(m, AiMessage) for r in m.tool_requests]
    got = [r.arguments for m in back if isinstance(m, AiMessage) for r in m.tool_requests]
    assert [json.loads(a) for a in got] == [json.loads(a) for a in sent]
    assert to_anthropic(back) == (system, turns)


@PROPERTY
@given(conversations())
def test_langchain4j_round_trip(messages: list[Message]) -> None:
    text = to_langchain4j_json(messages)
    assert from_langchain4j(text) == expected_langchain4j(messages)
    assert from_langchain4j(to_langchain4j(messages)) == expected_langchain4j(messages)
    assert to_langchain4j_json(from_langchain4j(text)) == text


# --- property tests: every loader window is sendable -------------------------------------------


def check_openai_wire(wire: list[dict[str, Any]]) -> None:
    """Chat Completions' tool-call rules, checked on the dicts themselves."""
    first = next((entry for entry in wire if entry["role"] != "system"), None)
    assert first is None or first["role"] != "tool"
    seen: set[str] = set()
    position = 0
    while position < len(wire):
        entry = wire[position]
        position += 1
        assert entry["role"] != "tool", "a tool message that follows no tool call"
        if entry["role"] != "assistant" or "tool_calls" not in entry:
            continue
        ids = [c["id"] for c in entry["tool_calls"]]
        assert all(c["type"] == "function" for c in entry["tool_calls"])
        assert all(
            isinstance(json.loads(c["function"]["arguments"]), dict) for c in entry["tool_calls"]
        )
        assert not seen & set(ids)
        seen.update(ids)
        answers = [m["tool_call_id"] for m in wire[position : position + len(ids)]]
        assert sorted(answers) == sorted(ids)
        assert all(m["role"] == "tool" for m in wire[position : position + len(ids)])
        position += len(ids)


def check_anthropic_wire(turns: list[dict[str, Any]]) -> None:
    """Anthropic's turn rules, checked on the dicts themselves."""
    assert turns and turns[0]["role"] == "user"
    seen: set[str] = set()
    for index, turn in enumerate(turns):
        assert index == 0 or turn["role"] != turns[index - 1]["role"], "roles must alternate"
        blocks = turn["content"]
        assert blocks
        kinds = [block["type"] for block in blocks]
        if turn["role"] == "assistant":
            assert "tool_result" not in kinds
            uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
            assert all(isinstance(b["input"], dict) for b in blocks if b["type"] == "tool_use")
            assert not seen & set(uses)
            seen.update(uses)
            if uses:
                following = turns[index + 1]["content"]
                answered = [b["tool_use_id"] for b in following if b["type"] == "tool_result"]
                assert sorted(answered) == sorted(uses)
        else:
            assert "tool_use" not in kinds
            results = kinds.count("tool_result")
            assert kinds[:results] == ["tool_result"] * results, "tool results come first"
            if results:
                previous = turns[index - 1]["content"]
                requested = {b["id"] for b in previous if b["type"] == "tool_use"}
                assert {b["tool_use_id"] for b in blocks[:results]} <= requested


@PROPERTY
@given(histories(), st.integers(1, 40), st.booleans())
def test_every_window_converts_and_validates_clean(
    rows: list[StoredMessage], max_messages: int, start: bool
) -> None:
    window = select_window(rows, max_messages, start_at_user=start).messages

    wire = to_openai(window)
    check_openai_wire(wire)
    assert validate(from_openai(wire), "openai") == []

    assert from_langchain4j(to_langchain4j_json(window)) == window

    window = select_window(rows, max_messages, start_at_user=True).messages
    if not window:
        return
    system, turns = to_anthropic(window)
    check_anthropic_wire(turns)
    problems = validate(from_anthropic(turns, system=system), "anthropic")
    # Blank texts are the caller's data (the loader keeps them), not the conversion's doing.
    assert [v for v in problems if v.code != "empty_content"] == []
