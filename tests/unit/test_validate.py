"""Example tests for memstore.core.validate: every code, both providers."""

from __future__ import annotations

import pytest

from memstore.core.validate import Violation, validate
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)

PROVIDERS = ("openai", "anthropic")


def user(text: str = "hi") -> UserMessage:
    return UserMessage(text=text)


def system(text: str = "be brief") -> SystemMessage:
    return SystemMessage(text=text)


def ai(text: str | None = "ok") -> AiMessage:
    return AiMessage(text=text)


def calls(*ids: str, arguments: str = '{"x": 1}') -> AiMessage:
    return AiMessage(
        text=None,
        tool_requests=[ToolRequest(id=i, name="tool", arguments=arguments) for i in ids],
    )


def result(call_id: str, text: str = "done") -> ToolResult:
    return ToolResult(id=call_id, tool_name="tool", text=text)


def codes(messages: list[Message], provider: str) -> list[tuple[int, str]]:
    return [(v.index, v.code) for v in validate(messages, provider)]  # type: ignore[arg-type]


# --- accepted lists ------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_valid_history_with_parallel_calls_is_clean(provider: str) -> None:
    messages: list[Message] = [
        system(),
        user("make two files"),
        calls("a", "b"),
        result("b"),  # results of one group may come in any order
        result("a"),
        ai("Both written."),
        user("thanks"),
        user("and again"),  # consecutive user messages are fine (merged for Anthropic)
        AiMessage(text="Sure.", tool_requests=[ToolRequest(id="c", name="t", arguments="{}")]),
        result("c"),
        system("mid-conversation instruction"),
        user("bye"),
    ]
    assert validate(messages, provider) == []  # type: ignore[arg-type]


def test_openai_accepts_assistant_first_and_system_only() -> None:
    assert validate([ai("hello")], "openai") == []
    assert validate([system(), ai("hello")], "openai") == []
    assert validate([system()], "openai") == []
    assert validate([], "openai") == []


def test_anthropic_ignores_system_messages_between_request_and_results() -> None:
    messages: list[Message] = [user(), calls("a"), system(), result("a")]
    assert validate(messages, "anthropic") == []
    # OpenAI sends the system message as a message of its own, which breaks the group.
    assert codes(messages, "openai") == [(1, "unanswered_request"), (3, "orphan_result")]


def test_unknown_provider_raises() -> None:
    with pytest.raises(ValueError, match="gemini"):
        validate([user()], "gemini")  # type: ignore[arg-type]


def test_violation_is_frozen_and_detail_names_the_call() -> None:
    [violation] = validate([user(), calls("call_42")], "openai")
    assert violation == Violation(1, "unanswered_request", violation.detail)
    assert "call_42" in violation.detail
    with pytest.raises(AttributeError):
        violation.index = 3  # type: ignore[misc]


# --- orphan_result -----------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_result_after_other_message_is_orphan(provider: str) -> None:
    messages: list[Message] = [user(), calls("a"), user("wait"), result("a")]
    assert codes(messages, provider) == [(1, "unanswered_request"), (3, "orphan_result")]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_result_for_never_requested_id_is_orphan(provider: str) -> None:
    messages: list[Message] = [user(), ai(), result("ghost")]
    found = validate(messages, provider)  # type: ignore[arg-type]
    assert [(v.index, v.code) for v in found] == [(2, "orphan_result")]
    assert "ghost" in found[0].detail


@pytest.mark.parametrize("provider", PROVIDERS)
def test_result_in_run_of_another_group_is_orphan(provider: str) -> None:
    messages: list[Message] = [user(), calls("a"), result("a"), calls("b"), result("a")]
    assert codes(messages, provider) == [
        (3, "unanswered_request"),
        (4, "orphan_result"),
        (4, "duplicate_call_id"),
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_result_before_its_request_is_orphan(provider: str) -> None:
    messages: list[Message] = [user(), result("a"), calls("a"), result("a")]
    assert (1, "orphan_result") in codes(messages, provider)
    assert (3, "duplicate_call_id") not in codes(messages, provider)


# --- unanswered_request --------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_trailing_request_without_results_is_unanswered(provider: str) -> None:
    messages: list[Message] = [user(), calls("a", "b"), result("a")]
    found = validate(messages, provider)  # type: ignore[arg-type]
    assert [(v.index, v.code) for v in found] == [(1, "unanswered_request")]
    assert "'b'" in found[0].detail


@pytest.mark.parametrize("provider", PROVIDERS)
def test_request_followed_by_ai_message_is_unanswered(provider: str) -> None:
    messages: list[Message] = [user(), calls("a"), ai("never mind")]
    assert codes(messages, provider) == [(1, "unanswered_request")]


# --- duplicate_call_id ---------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_id_requested_again_in_a_later_turn_is_duplicate(provider: str) -> None:
    messages: list[Message] = [
        user(),
        calls("call_0"),
        result("call_0"),
        user(),
        calls("call_0"),
        result("call_0"),
    ]
    found = validate(messages, provider)  # type: ignore[arg-type]
    assert [(v.index, v.code) for v in found] == [(4, "duplicate_call_id")]
    assert "call_0" in found[0].detail


@pytest.mark.parametrize("provider", PROVIDERS)
def test_result_repeated_in_its_run_is_duplicate(provider: str) -> None:
    messages: list[Message] = [user(), calls("a"), result("a"), result("a", "again")]
    assert codes(messages, provider) == [(3, "duplicate_call_id")]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_result_repeated_later_is_duplicate_and_orphan(provider: str) -> None:
    messages: list[Message] = [user(), calls("a"), result("a"), user(), result("a")]
    assert codes(messages, provider) == [(4, "orphan_result"), (4, "duplicate_call_id")]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_same_id_twice_in_one_message_is_duplicate(provider: str) -> None:
    # AiMessage's validator refuses this; model_construct bypasses it like a foreign converter.
    request = ToolRequest(id="a", name="tool", arguments="{}")
    message = AiMessage.model_construct(text=None, tool_requests=[request, request], metadata={})
    messages: list[Message] = [user(), message, result("a")]
    assert codes(messages, provider) == [(1, "duplicate_call_id")]


# --- arguments_not_object ------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "arguments",
    ["", "[]", '"text"', "1", "null", "{", "{'a': 1}", '{"a": NaN}', '{"a": 1} x'],
)
def test_arguments_must_be_a_json_object(provider: str, arguments: str) -> None:
    messages: list[Message] = [user(), calls("a", arguments=arguments), result("a")]
    found = validate(messages, provider)  # type: ignore[arg-type]
    assert [(v.index, v.code) for v in found] == [(1, "arguments_not_object")]
    assert "'a'" in found[0].detail


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("arguments", ["{}", ' {"a": [1, {"b": null}]} ', '{"é": "\\u00e9"}'])
def test_json_object_arguments_are_accepted(provider: str, arguments: str) -> None:
    messages: list[Message] = [user(), calls("a", arguments=arguments), result("a")]
    assert validate(messages, provider) == []  # type: ignore[arg-type]


# --- wrong_first_role ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_result_first_is_wrong_first_role(provider: str) -> None:
    messages: list[Message] = [system(), result("a"), user()]
    assert codes(messages, provider) == [(1, "wrong_first_role"), (1, "orphan_result")]


def test_anthropic_needs_user_first() -> None:
    assert codes([ai("hello"), user()], "anthropic") == [(0, "wrong_first_role")]
    assert codes([system(), ai("hello")], "anthropic") == [(1, "wrong_first_role")]
    first_call: list[Message] = [system(), calls("a"), result("a"), user()]
    assert codes(first_call, "anthropic") == [(1, "wrong_first_role")]
    assert validate(first_call, "openai") == []


# --- empty ---------------------------------------------------------------------------------


def test_anthropic_rejects_no_messages() -> None:
    for messages in ([], [system()], [system(), system("more")]):
        found = validate(messages, "anthropic")
        assert [(v.index, v.code) for v in found] == [(-1, "empty")]
        assert validate(messages, "openai") == []


# --- empty_content -------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n\t", "\u3000"])
def test_anthropic_rejects_blank_ai_text(text: str) -> None:
    messages: list[Message] = [user(), ai(text)]
    assert codes(messages, "anthropic") == [(1, "empty_content")]
    assert validate(messages, "openai") == []


def test_anthropic_rejects_ai_message_without_text_or_requests() -> None:
    empty = AiMessage.model_construct(text=None, tool_requests=[], metadata={})
    assert codes([user(), empty], "anthropic") == [(1, "empty_content")]


def test_anthropic_accepts_blank_text_next_to_tool_requests() -> None:
    message = AiMessage(text="  ", tool_requests=[ToolRequest(id="a", name="t", arguments="{}")])
    assert validate([user(), message, result("a")], "anthropic") == []


def test_anthropic_rejects_empty_user_text() -> None:
    messages: list[Message] = [user("hi"), ai(), user("")]
    assert codes(messages, "anthropic") == [(2, "empty_content")]
    assert validate(messages, "openai") == []


def test_violations_are_sorted_by_index() -> None:
    messages: list[Message] = [ai(" "), result("x"), user(""), calls("y", arguments="[]")]
    found = codes(messages, "anthropic")
    assert [index for index, _ in found] == sorted(index for index, _ in found)
    assert set(found) == {
        (0, "wrong_first_role"),
        (0, "empty_content"),
        (1, "orphan_result"),
        (2, "empty_content"),
        (3, "arguments_not_object"),
        (3, "unanswered_request"),
    }
