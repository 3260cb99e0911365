"""Messages handed to ``append`` or returned by ``messages()`` are frozen all the way down:
no mutation a caller can make changes what a later reader gets (every cache, both stores).
"""

from __future__ import annotations

import contextlib
import copy
import pickle
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from memstore import AiMessage, MemoryStore, ToolRequest, ToolResult, UserMessage
from memstore.messages import Message

REFUSED = (TypeError, AttributeError, ValidationError, ValueError, IndexError, KeyError)


def turn(tag: str) -> list[Message]:
    meta: dict[str, Any] = {"trace": tag, "tags": ["a", "b"], "usage": {"in": 3, "by": [1, {}]}}
    return [
        UserMessage(text=f"hello {tag}", metadata=meta),
        AiMessage(
            text=None,
            tool_requests=[
                ToolRequest(id=f"{tag}-1", name="read", arguments='{"p": 1}'),
                ToolRequest(id=f"{tag}-2", name="read", arguments='{"p": 2}'),
            ],
            metadata={"model": "m", "nested": [[1, 2], {"k": [3]}]},
        ),
        ToolResult(id=f"{tag}-1", tool_name="read", text="one", metadata={"ms": [5]}),
        ToolResult(id=f"{tag}-2", tool_name="read", text="two"),
        AiMessage(text="done", metadata={"stop": "end"}),
    ]


def reachable(value: Any) -> Iterator[Any]:
    """Every object a caller can reach from ``value`` that could hold state."""
    if isinstance(value, BaseModel):
        yield value
        for name in type(value).model_fields:
            yield from reachable(getattr(value, name))
    elif isinstance(value, dict):
        yield value
        for item in value.values():
            yield from reachable(item)
    elif isinstance(value, (list, tuple)):
        yield value
        for item in value:
            yield from reachable(item)


def mutations(target: Any) -> list[Callable[[], object]]:
    """Each way a caller could change ``target`` in place (most must raise)."""
    if isinstance(target, BaseModel):
        out: list[Callable[[], object]] = []
        for name in type(target).model_fields:
            out.append(lambda name=name: setattr(target, name, None))
        return out
    if isinstance(target, dict):
        key = next(iter(target), "k")
        return [
            lambda: target.__setitem__("injected", 1),
            lambda: target.__setitem__(key, "changed"),
            lambda: target.__delitem__(key),
            lambda: target.pop(key),
            lambda: target.popitem(),
            lambda: target.clear(),
            lambda: target.update({"injected": 2}),
            lambda: target.setdefault("injected", 3),
            lambda: target.__ior__({"injected": 4}),
        ]
    if isinstance(target, list):
        return [
            lambda: target.append("injected"),
            lambda: target.extend(["injected"]),
            lambda: target.insert(0, "injected"),
            lambda: target.pop(),
            lambda: target.remove(target[0]),
            lambda: target.clear(),
            lambda: target.__setitem__(0, "changed"),
            lambda: target.__delitem__(0),
            lambda: target.sort(key=repr),
            lambda: target.reverse(),
            lambda: target.__iadd__(["injected"]),
            lambda: target.__imul__(2),
        ]
    return []


def attack(messages: list[Message], picks: list[int]) -> None:
    """Try mutations picked by index over everything reachable from ``messages``."""
    targets = [t for m in messages for t in reachable(m)]
    candidates = [change for t in targets for change in mutations(t)]
    for pick in picks:
        with contextlib.suppress(REFUSED):
            candidates[pick % len(candidates)]()


def snapshot(messages: list[Message]) -> list[str]:
    return [m.model_dump_json() for m in messages]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(picks=st.lists(st.integers(min_value=0), min_size=1, max_size=40))
def test_mutating_messages_never_changes_later_reads(store: MemoryStore, picks: list[int]) -> None:
    app = f"imm-{uuid.uuid4().hex[:12]}"
    first = turn("t1")
    store.append(app, first[:1])
    expected = store.memory(app).messages()  # a cached window exists: appends extend it
    expected_dump = snapshot(expected)
    store.append(app, first[1:])
    after_append = snapshot(store.load_window(app))
    attack(first, picks)  # the caller's own objects, after append
    attack(expected, picks)  # a window handed out earlier
    read = store.memory(app).messages()
    assert snapshot(read) == after_append
    attack(read, picks)  # the window just handed out
    assert snapshot(store.memory(app).messages()) == after_append
    assert snapshot(store.load_window(app)) == after_append
    assert snapshot(expected) == expected_dump


def test_mutating_a_read_window_in_place_is_refused(store: MemoryStore, app_id: str) -> None:
    """The regression: a request that was never stored appeared in every later read."""
    store.append(app_id, turn("r"))
    window = store.memory(app_id).messages()
    request = next(m for m in window if isinstance(m, AiMessage) and m.tool_requests)
    with pytest.raises(TypeError):
        request.tool_requests.append(ToolRequest(id="ghost", name="rm", arguments="{}"))  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        window[0].metadata["tags"].append("ghost")
    with pytest.raises(TypeError):
        window[0].metadata["injected"] = True  # type: ignore[index]
    assert store.memory(app_id).messages() == store.load_window(app_id)


def test_frozen_messages_still_behave_like_plain_data() -> None:
    message = AiMessage(
        text=None,
        tool_requests=[ToolRequest(id="c", name="n", arguments="{}")],
        metadata={"a": [1, {"b": (2, 3)}]},
    )
    assert message.tool_requests == [ToolRequest(id="c", name="n", arguments="{}")]
    assert isinstance(message.tool_requests, list) and isinstance(message.metadata, dict)
    assert message.metadata == {"a": [1, {"b": [2, 3]}]}  # tuples stored as (frozen) lists
    dumped = message.model_dump()
    dumped["metadata"]["a"].append("mine")  # a dump is the caller's own mutable copy
    dumped["tool_requests"].append({})
    assert message.metadata == {"a": [1, {"b": [2, 3]}]} and len(message.tool_requests) == 1
    assert pickle.loads(pickle.dumps(message)) == message
    assert copy.deepcopy(message) == message
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(message)).metadata["a"].append(0)
    mutable = copy.copy(message.metadata)
    mutable["x"] = 1
    assert "x" not in message.metadata


def test_a_message_built_around_validation_is_frozen_at_the_store(
    store: MemoryStore, app_id: str
) -> None:
    store.append(app_id, [UserMessage(text="first")])
    store.memory(app_id).messages()  # a cached window exists: the append extends it
    sneaky = UserMessage(text="hi").model_copy(update={"metadata": {"tags": ["a"]}})
    store.append(app_id, [sneaky])
    sneaky.metadata["tags"].append("ghost")
    assert store.memory(app_id).messages()[1].metadata == {"tags": ["a"]}
