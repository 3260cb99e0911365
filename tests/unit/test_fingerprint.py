"""Canonical arguments, digests and the pure no-progress decision (memstore.core.fingerprint)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.core.fingerprint import (
    GUARD_MARK,
    arguments_digest,
    call_fingerprint,
    canonical_arguments,
    decide_from_newest_rows,
    decide_no_progress,
    idempotency_key,
    is_guard_result,
    recent_rounds,
    result_digest,
)
from memstore.core.rows import encode_payload, message_type
from memstore.core.window import StoredMessage, interrupted_result
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage

# -- canonical arguments: examples ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ('{"b": 1, "a": 2}', '{"a":2,"b":1}'),
        (' {\n\t"a" : [ 1 , 2 ] } \r\n', '{"a":[1,2]}'),
        ('{"z": {"y": 1, "x": {"w": null, "v": true}}}', '{"z":{"x":{"v":true,"w":null},"y":1}}'),
        ('{"a": "\\u00e9\\n\\"", "b": "é"}', '{"a":"é\\n\\"","b":"é"}'),
        ('{"a": "\\/"}', '{"a":"/"}'),
        ("[3, 1, 2]", "[3,1,2]"),
        ('{"a": {}, "b": []}', '{"a":{},"b":[]}'),
        ('"just a string"', '"just a string"'),
        ("  42  ", "42"),
    ],
)
def test_canonical_form_examples(written: str, canonical: str) -> None:
    assert canonical_arguments(written) == canonical


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ('{"n": 1}', '{"n": 1.0}'),  # number spelling is kept: never merged
        ('{"n": 100}', '{"n": 1e2}'),
        ('{"n": 0}', '{"n": -0}'),
        ('{"n": 12345678901234567890123}', '{"n": 12345678901234567890124}'),  # big ints exact
        ('{"n": 0.10000000000000000001}', '{"n": 0.1}'),  # float64 would merge these
        ('{"n": 1e400}', '{"n": 2e400}'),  # both infinity as floats
        ('{"a": null}', "{}"),  # null is not a missing key
        ('{"a": null}', '{"a": "null"}'),
        ('{"a": true}', '{"a": 1}'),
        ("[1, 2]", "[2, 1]"),  # array order is kept
        ("{}", "[]"),
        ('{"a": 1, "a": 2}', '{"a": 2}'),  # a repeated key is kept, not dropped
        ('{"a": 1, "a": 2}', '{"a": 2, "a": 1}'),
        ('{"a": "x"}', '{"a": "X"}'),
        ('{"a": "x "}', '{"a": "x"}'),  # whitespace inside strings is a value
    ],
)
def test_every_value_difference_keeps_fingerprints_apart(one: str, other: str) -> None:
    assert canonical_arguments(one) != canonical_arguments(other)
    assert arguments_digest(one) != arguments_digest(other)


def test_number_literals_are_kept_as_written() -> None:
    assert canonical_arguments('{"n": [1.0, 1E+2, -0.0, 12345678901234567890123]}') == (
        '{"n":[1.0,1E+2,-0.0,12345678901234567890123]}'
    )


def test_repeated_keys_are_kept_in_their_relative_order() -> None:
    assert canonical_arguments('{"b": 0, "a": 1, "a": 2}') == '{"a":1,"a":2,"b":0}'


@pytest.mark.parametrize(
    "text",
    ['{"a": 1', "not json", '{"a": NaN}', "Infinity", '{"a": 1} {"b": 2}', "", "[" * 100_000],
)
def test_text_that_is_not_json_is_its_own_canonical_form(text: str) -> None:
    assert canonical_arguments(text) == text
    assert len(arguments_digest(text)) == 64


def test_lone_surrogates_still_have_a_digest() -> None:
    text = '{"a": "\\ud800"}'
    assert canonical_arguments(text) == '{"a":"\ud800"}'
    assert arguments_digest(text) == arguments_digest('{ "a":"\\ud800" }')


def test_digests_and_keys() -> None:
    assert result_digest("ok") != result_digest("ok ")
    base = call_fingerprint("ls", '{"d": "/"}', "a b")
    assert base == call_fingerprint("ls", '{ "d" : "/" }', "a b")
    assert base.digest == call_fingerprint("ls", '{ "d" : "/" }', "a b").digest
    for other in (
        call_fingerprint("ls2", '{"d": "/"}', "a b"),
        call_fingerprint("ls", '{"d": "/tmp"}', "a b"),
        call_fingerprint("ls", '{"d": "/"}', "a  b"),
    ):
        assert other.digest != base.digest

    key = idempotency_key("app-1", "send", '{"to": "b", "n": 1}')
    assert key.startswith("sha256:") and len(key) == 71
    assert key == idempotency_key("app-1", "send", '{ "n":1,\n "to":"b" }')
    assert key != idempotency_key("app-2", "send", '{"to": "b", "n": 1}')
    assert key != idempotency_key("app-1", "send2", '{"to": "b", "n": 1}')
    assert key != idempotency_key("app-1", "send", '{"to": "b", "n": 2}')
    # the parts are delimited: moving text between them makes another key
    assert idempotency_key("a", "bc", "{}") != idempotency_key("ab", "c", "{}")


# -- canonical arguments: properties -------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**20, max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=16,
)
WHITESPACE = ["", " ", "  ", "\n", "\t", "\r\n", " \n\t "]


def render(value: Any, data: st.DataObject) -> str:
    """``value`` as JSON text with random member order, whitespace and string escaping."""

    def gap() -> str:
        return data.draw(st.sampled_from(WHITESPACE))

    def string(text: str) -> str:
        return json.dumps(text, ensure_ascii=data.draw(st.booleans()))

    if isinstance(value, dict):
        members = data.draw(st.permutations(list(value.items())))
        body = ",".join(
            f"{gap()}{string(key)}{gap()}:{gap()}{render(member, data)}{gap()}"
            for key, member in members
        )
        return "{" + (body or gap()) + "}"
    if isinstance(value, list):
        body = ",".join(f"{gap()}{render(element, data)}{gap()}" for element in value)
        return "[" + (body or gap()) + "]"
    if isinstance(value, str):
        return string(value)
    return json.dumps(value)


def same(one: Any, other: Any) -> bool:
    """JSON equality that tells 1, 1.0 and true apart (and -0.0 from 0.0)."""
    if type(one) is not type(other):
        return False
    if isinstance(one, dict):
        return one.keys() == other.keys() and all(same(one[k], other[k]) for k in one)
    if isinstance(one, list):
        return len(one) == len(other) and all(map(same, one, other))
    if isinstance(one, float):
        return json.dumps(one) == json.dumps(other)
    return bool(one == other)


def mutate(value: Any, data: st.DataObject) -> Any:
    """A copy of ``value`` with one change somewhere: a leaf replaced, an element or member
    added, dropped or renamed, or two different array elements swapped."""
    options = ["replace"]
    if isinstance(value, list):
        options += ["append", "recurse", "drop"] if value else ["append"]
        if any(not same(value[0], element) for element in value):
            options.append("swap")
    if isinstance(value, dict):
        options += ["add", "recurse", "drop", "rename"] if value else ["add"]
    action = data.draw(st.sampled_from(options))
    if action == "replace":
        return data.draw(json_values.filter(lambda new: not same(new, value)))
    if isinstance(value, list):
        copy = list(value)
        if action == "append":
            copy.insert(data.draw(st.integers(0, len(copy))), data.draw(json_values))
        elif action == "drop":
            del copy[data.draw(st.integers(0, len(copy) - 1))]
        elif action == "swap":
            other = next(i for i, element in enumerate(copy) if not same(copy[0], element))
            copy[0], copy[other] = copy[other], copy[0]
        else:
            index = data.draw(st.integers(0, len(copy) - 1))
            copy[index] = mutate(copy[index], data)
        return copy
    assert isinstance(value, dict)
    members = dict(value)
    if action == "add":
        members[data.draw(st.text(max_size=6).filter(lambda k: k not in value))] = data.draw(
            json_values
        )
        return members
    key = data.draw(st.sampled_from(sorted(value)))
    if action == "drop":
        del members[key]
    elif action == "rename":
        members[data.draw(st.text(max_size=6).filter(lambda k: k not in value))] = members.pop(key)
    else:
        members[key] = mutate(members[key], data)
    return members


@given(json_values, st.data())
def test_member_order_whitespace_and_escaping_never_change_a_fingerprint(
    value: Any, data: st.DataObject
) -> None:
    plain = json.dumps(value)
    written = render(value, data)
    assert json.loads(written) == json.loads(plain)  # the rendering is the same value
    assert canonical_arguments(written) == canonical_arguments(plain)
    assert call_fingerprint("tool", written, "r") == call_fingerprint("tool", plain, "r")
    assert idempotency_key("app", "tool", written) == idempotency_key("app", "tool", plain)


@given(json_values, st.data())
def test_any_value_change_changes_the_fingerprint(value: Any, data: st.DataObject) -> None:
    changed = mutate(value, data)
    assert not same(changed, value)
    one, other = render(value, data), render(changed, data)
    assert canonical_arguments(one) != canonical_arguments(other)
    assert call_fingerprint("tool", one, "r") != call_fingerprint("tool", other, "r")
    assert idempotency_key("app", "tool", one) != idempotency_key("app", "tool", other)


@given(json_values, json_values)
def test_canonical_forms_are_equal_exactly_when_the_values_are(one: Any, other: Any) -> None:
    equal = canonical_arguments(json.dumps(one)) == canonical_arguments(json.dumps(other))
    assert equal == same(one, other)


@given(json_values)
def test_the_canonical_form_is_json_of_the_same_value_and_a_fixed_point(value: Any) -> None:
    canonical = canonical_arguments(json.dumps(value))
    assert same(json.loads(canonical), value)
    assert canonical_arguments(canonical) == canonical


# -- the no-progress decision --------------------------------------------------------------------

ARGS = '{"path": "a.txt"}'


def numbered(messages: list[Message]) -> list[StoredMessage]:
    return [StoredMessage(index + 1, message) for index, message in enumerate(messages)]


def call(
    call_id: str, result: str | None = "same", *, name: str = "read", arguments: str = ARGS
) -> list[Message]:
    request = AiMessage(tool_requests=[ToolRequest(id=call_id, name=name, arguments=arguments)])
    if result is None:
        return [request]
    return [request, ToolResult(id=call_id, tool_name=name, text=result)]


def decide(messages: list[Message], repeats: int = 2, arguments: str = ARGS) -> bool:
    return decide_no_progress(numbered(messages), "read", arguments, repeats).blocked


def test_blocked_after_the_configured_identical_calls_with_identical_results() -> None:
    history: list[Message] = [UserMessage(text="go"), *call("c1")]
    assert not decide(history)
    history += call("c2")
    decision = decide_no_progress(numbered(history), "read", ARGS, 2)
    assert decision.blocked
    assert decision.repeats == 2
    assert decision.checkpoint_id == len(history)  # the newest row read
    assert decision.result_digests == (result_digest("same"), result_digest("same"))
    assert decide(history, arguments='{ "path" : "a.txt" }')  # canonical arguments match
    assert not decide(history, repeats=3)
    assert decide([*history, *call("c3")], repeats=3)
    assert decide(call("c1"), repeats=1)


def test_changed_arguments_or_another_tool_are_allowed() -> None:
    history = [*call("c1"), *call("c2")]
    assert not decide(history, arguments='{"path": "b.txt"}')
    assert not decide_no_progress(numbered(history), "write", ARGS, 2).blocked


def test_a_changed_result_is_progress() -> None:
    assert not decide([*call("c1", "v1"), *call("c2", "v2")])
    assert not decide([*call("c1", "v1"), *call("c2", "v2"), *call("c3", "v1")])
    assert decide([*call("c1", "v1"), *call("c2", "v2"), *call("c3", "v2")])


def test_an_error_result_repeated_is_no_progress() -> None:
    request = call("c1", None)
    failure = ToolResult(id="c1", tool_name="read", text="timeout", is_error=True)
    again = call("c2", None)
    failure_2 = ToolResult(id="c2", tool_name="read", text="timeout", is_error=True)
    assert decide([*request, failure, *again, failure_2])


def test_another_call_in_between_breaks_the_run() -> None:
    history = [*call("c1"), *call("o1", name="list", arguments="{}"), *call("c2")]
    assert not decide(history)
    assert decide([*history, *call("c3")])


def test_a_user_message_starts_a_new_run() -> None:
    history = [*call("c1"), UserMessage(text="try again"), *call("c2")]
    assert not decide(history)
    assert len(recent_rounds(numbered(history))) == 1


def test_ai_text_between_rounds_does_not_break_the_run() -> None:
    assert decide([*call("c1"), AiMessage(text="Let me look again."), *call("c2")])


def test_calls_that_did_not_run_are_passed_over() -> None:
    blocked = json.dumps(
        {
            "status": "blocked_no_progress",
            "reason": "same_tool_same_arguments_no_state_change",
            "action": "human_review_required",
            "checkpoint_id": 9,
        }
    )
    verdict_result = ToolResult(id="c3", tool_name="read", text=blocked, is_error=True)
    marked = ToolResult(
        id="c4", tool_name="read", text="{}", is_error=True, metadata={GUARD_MARK: "blocked_budget"}
    )
    history = [
        *call("c1"),
        *call("c2"),
        *call("c3", None),
        verdict_result,  # the guard's verdict stored as the tool's result
        *call("c4", None),
        marked,
        *call("c5", None),  # no result (still running, or the process died)
    ]
    assert decide(history)
    # the current round, already written with its request, is passed over too
    assert decide([*call("c1"), *call("c2"), *call("c3", None)])


def test_parallel_rounds_count_per_round() -> None:
    def round_of(suffix: str, results: tuple[str, str]) -> list[Message]:
        return [
            AiMessage(
                tool_requests=[
                    ToolRequest(id=f"r{suffix}", name="read", arguments=ARGS),
                    ToolRequest(id=f"l{suffix}", name="list", arguments="{}"),
                ]
            ),
            ToolResult(id=f"l{suffix}", tool_name="list", text=results[1]),
            ToolResult(id=f"r{suffix}", tool_name="read", text=results[0]),
        ]

    history = [*round_of("1", ("a", "x")), *round_of("2", ("a", "y"))]
    assert decide(history)  # `read` repeated in consecutive rounds with the same result
    assert not decide([*round_of("1", ("a", "x")), *round_of("2", ("b", "x"))])


def test_results_bind_to_the_newest_request_with_the_call_id() -> None:
    history = [
        *call("c1", "old"),
        *call("c1", None),
        ToolResult(id="c1", tool_name="read", text="old"),
    ]
    assert decide(history)
    first_wins = [
        *call("c1", "a"),
        ToolResult(id="c1", tool_name="read", text="b"),
        *call("c2", "a"),
    ]
    assert decide(first_wins)


def test_is_guard_result() -> None:
    assert is_guard_result(interrupted_result("c1", "read"))
    assert is_guard_result(
        ToolResult(id="c", tool_name="t", text="x", metadata={GUARD_MARK: "human_review_required"})
    )
    replay = ToolResult(id="c", tool_name="t", text="x", metadata={GUARD_MARK: "already_succeeded"})
    assert not is_guard_result(replay)  # a replayed result is a real result
    lookalike = '{"status": "blocked_budget", "action": "end_turn"}'
    assert is_guard_result(ToolResult(id="c", tool_name="t", text=lookalike, is_error=True))
    assert not is_guard_result(ToolResult(id="c", tool_name="t", text=lookalike))
    assert not is_guard_result(ToolResult(id="c", tool_name="t", text='{"status": "ok"}'))


def test_empty_history_and_bad_repeat() -> None:
    decision = decide_no_progress([], "read", ARGS, 2)
    assert not decision.blocked and decision.checkpoint_id is None
    with pytest.raises(ValueError):
        decide_no_progress([], "read", ARGS, 0)


def raw_newest_first(messages: list[Message]) -> list[tuple[int, str, str]]:
    rows = [(m.id, message_type(m.message), encode_payload(m.message)) for m in numbered(messages)]
    return rows[::-1]


def test_raw_rows_decode_only_what_the_decision_uses() -> None:
    history: list[Message] = [*call("c0"), UserMessage(text="go"), *call("c1"), *call("c2")]
    rows = raw_newest_first([*history, AiMessage(text="Still the same.")])
    corrupt = [
        (row_id, kind, "{corrupt" if row_id <= 3 else payload) for row_id, kind, payload in rows
    ]
    # rows older than the newest user message are never decoded (the corrupt ones included)
    decision = decide_from_newest_rows(corrupt, "read", ARGS, 2)
    assert decision.blocked
    assert decision.checkpoint_id == len(history) + 1  # the newest row, an AI text row
    assert not decide_from_newest_rows(corrupt, "read", ARGS, 3).blocked
    assert decide_from_newest_rows([], "read", ARGS, 2).checkpoint_id is None


def test_raw_rows_without_a_user_message_are_all_used() -> None:
    rows = raw_newest_first([*call("c1"), AiMessage(text="hm"), *call("c2")])
    assert decide_from_newest_rows(rows, "read", ARGS, 2).blocked
