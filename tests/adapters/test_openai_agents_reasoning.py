"""``MemstoreSession`` with reasoning items (issue 31).

A ``function_call`` row carries the ``reasoning`` items right before it as reasoning parts, so
memstore's own window (rebuilt from SQL after a restart) never holds a call without its
reasoning, and :func:`memstore.formats.to_responses` renders each reasoning item right before
its call, ``encrypted_content`` byte for byte. ``get_items`` still returns exactly the items
given, and ``keep_reasoning_with_calls`` widens ``get_items(limit)`` to a call's reasoning.
Rendered inputs are validated against the ``openai`` SDK's own request types.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Runner
from agents.memory import SessionSettings
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary

from memstore import AiMessage, Message, SystemMessage
from memstore.adapters.openai_agents import AGENTS_KEY, MemstoreSession
from memstore.core.validate import validate
from memstore.errors import InvalidInputError
from memstore.formats import to_responses
from memstore.formats.responses import ITEM_IDS_KEY
from tests.adapters.conftest import AdapterEnv
from tests.adapters.test_openai_agents import ScriptedModel, _agent, _call, _say, user
from tests.unit.test_reasoning import assert_responses_input, signature


def reasoning(item_id: str, seed: int, summary: str | None = None) -> dict[str, Any]:
    """A reasoning item as the SDK stores it with ``store=False`` (``encrypted_content``)."""
    parts = [] if summary is None else [{"type": "summary_text", "text": summary}]
    return {
        "id": item_id,
        "summary": parts,
        "type": "reasoning",
        "encrypted_content": signature(seed),
    }


def call(call_id: str, arguments: str = '{"a": 1, "b": 2}') -> dict[str, Any]:
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": "add",
        "type": "function_call",
        "id": f"fc_{call_id}",
        "status": "completed",
    }


def output(call_id: str, text: str = "3") -> dict[str, Any]:
    return {"call_id": call_id, "output": text, "type": "function_call_output"}


def reply(text: str) -> dict[str, Any]:
    return {
        "id": f"msg_{abs(hash(text))}",
        "content": [{"annotations": [], "text": text, "type": "output_text", "logprobs": []}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    }


SUMMARY = "SECRET-SUMMARY: the user wants a sum"
ONE_CALL: list[dict[str, Any]] = [
    user("What is 1 + 2?"),
    reasoning("rs_1", 1, SUMMARY),
    call("call_1"),
    output("call_1"),
    reply("1 + 2 = 3"),
]


async def _window(env: AdapterEnv, store: Any, app_id: str) -> list[Message]:
    """The cached window as after a restart: invalidated, rebuilt from SQL."""
    memory = store.memory(app_id)
    if env.is_async:
        await memory.invalidate()
        return list(await memory.messages())
    memory.invalidate()
    return list(memory.messages())


async def _load(env: AdapterEnv, store: Any, app_id: str, max_messages: int) -> list[Message]:
    if env.is_async:
        return list(await store.load_window(app_id, max_messages))
    return list(store.load_window(app_id, max_messages))


def rendered(window: list[Message]) -> list[dict[str, Any]]:
    """``to_responses`` of a window, checked against the SDK's request types."""
    items = to_responses(window)
    assert_responses_input(items)
    return items


def model_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reasoning, call and output items of a rendered input (no messages)."""
    return [item for item in items if item.get("type") not in (None, "message")]


def sent_call(call_id: str, arguments: str = '{"a": 1, "b": 2}') -> dict[str, Any]:
    """A call as ``to_responses`` renders it with its reasoning (item id included)."""
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "add",
        "arguments": arguments,
        "id": f"fc_{call_id}",
    }


def test_items_round_trip_exactly(env: AdapterEnv, app_id: str) -> None:
    session = MemstoreSession(app_id, env.store())
    given = copy.deepcopy(ONE_CALL)

    async def scenario() -> None:
        await session.add_items(given)
        assert await session.get_items() == ONE_CALL
        fresh = MemstoreSession(app_id, env.store())  # nothing served from memory
        assert await fresh.get_items() == ONE_CALL
        for limit in range(1, len(ONE_CALL) + 2):  # the SDK's plain count by default
            assert await fresh.get_items(limit) == ONE_CALL[-limit:]

    env.run(scenario())
    assert given == ONE_CALL


def test_the_window_after_a_restart_keeps_reasoning_before_its_call(
    env: AdapterEnv, app_id: str
) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)

    async def scenario() -> None:
        await session.add_items(ONE_CALL)
        window = await _window(env, store, app_id)
        assert validate(window, "openai") == []
        request = next(m for m in window if isinstance(m, AiMessage) and m.tool_requests)
        assert request.metadata[ITEM_IDS_KEY] == {"call_1": "fc_call_1"}
        assert [part.signature for part in request.reasoning] == [signature(1)]
        items = model_items(rendered(window))
        assert items == [ONE_CALL[1], sent_call("call_1"), ONE_CALL[3]]
        assert [i["type"] for i in items].count("reasoning") == 1  # the opaque row: no copy
        # the issue: a window starting at the call still has its reasoning
        small = await _load(env, store, app_id, 3)
        assert [m.type for m in small] == ["ai", "tool_result", "ai"]
        assert model_items(rendered(small)) == [ONE_CALL[1], sent_call("call_1"), ONE_CALL[3]]

    env.run(scenario())


def test_reasoning_stored_in_an_earlier_batch_goes_with_the_call(
    env: AdapterEnv, app_id: str
) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    foreign = SystemMessage(text="", metadata={"memstore_opaque": True, "other": 1})
    first, second = reasoning("rs_1", 1, SUMMARY), reasoning("rs_2", 2)

    async def scenario() -> None:
        await session.add_items([user("add"), first])
        if env.is_async:  # another adapter's row in between is no item of this session
            await store.append(app_id, [foreign])
        else:
            store.append(app_id, [foreign])
        await session.add_items([second, call("call_1")])
        await session.add_items([output("call_1")])
        await session.add_items([reasoning("rs_3", 3), reply("done")])  # a reply: no call
        await session.add_items([call("call_2")])  # after a reply: no reasoning
        await session.add_items([output("call_2")])
        items = model_items(rendered(await _window(env, store, app_id)))
        assert items == [
            first,
            second,
            sent_call("call_1"),
            output("call_1"),
            {k: v for k, v in call("call_2").items() if k not in ("id", "status")},
            output("call_2"),
        ]
        assert await session.get_items() == [
            user("add"),
            first,
            second,
            call("call_1"),
            output("call_1"),
            reasoning("rs_3", 3),
            reply("done"),
            call("call_2"),
            output("call_2"),
        ]

    env.run(scenario())


def test_several_reasoning_items_between_parallel_calls(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    given = [
        user("1 + 2, 3 + 4 and 5 + 6?"),
        reasoning("rs_1", 1, SUMMARY),
        reasoning("rs_2", 2),
        call("call_a"),
        reasoning("rs_3", 3, "then the second"),
        call("call_b", '{"a": 3, "b": 4}'),
        call("call_c", '{"a": 5, "b": 6}'),
        output("call_a"),
        output("call_b", "7"),
        output("call_c", "11"),
        reply("3, 7 and 11"),
    ]

    async def scenario() -> None:
        await session.add_items(given)
        assert await session.get_items() == given
        window = await _window(env, store, app_id)
        assert validate(window, "openai") == []
        items = model_items(rendered(window))
        assert items == [
            given[1],
            given[2],
            sent_call("call_a"),
            given[7],
            given[4],
            sent_call("call_b", '{"a": 3, "b": 4}'),
            given[8],
            # call_c had no reasoning right before it: sent without its item id
            {
                "type": "function_call",
                "call_id": "call_c",
                "name": "add",
                "arguments": '{"a": 5, "b": 6}',
            },
            given[9],
        ]
        for item in items:  # every reasoning item right before a call
            if item["type"] == "reasoning":
                after = items[items.index(item) + 1]
                assert after["type"] in ("reasoning", "function_call")

    env.run(scenario())


def test_keep_reasoning_with_calls_widens_the_limit(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    plain = MemstoreSession(app_id, store)
    keeping = MemstoreSession(app_id, store, keep_reasoning_with_calls=True)
    by_settings = MemstoreSession(
        app_id, store, session_settings=SessionSettings(limit=3), keep_reasoning_with_calls=True
    )
    given = [
        user("two sums"),
        reasoning("rs_1", 1, SUMMARY),
        call("call_a"),
        call("call_b"),
        output("call_a"),
        output("call_b"),
        reply("done"),
    ]

    async def scenario() -> None:
        await plain.add_items(given)
        for limit in range(1, 9):
            assert await plain.get_items(limit) == given[-limit:]  # the SDK's default
        assert await keeping.get_items(2) == given[-2:]  # starts at an output: unchanged
        assert await keeping.get_items(3) == given[-3:]
        assert await keeping.get_items(4) == given[1:]  # call_b: back to its run's reasoning
        assert await keeping.get_items(5) == given[1:]  # call_a
        assert await keeping.get_items(6) == given[1:]  # the reasoning itself
        assert await keeping.get_items(7) == given
        assert await keeping.get_items(0) == []
        assert await by_settings.get_items() == given[-3:]
        assert await keeping.get_items() == given
        # a run longer than a page: older pages are read until the run's start
        long_run = [reasoning(f"rs_x{n}", n) for n in range(40)] + [call("call_x")]
        await keeping.add_items(long_run)
        assert await keeping.get_items(1) == long_run
        assert await plain.get_items(1) == long_run[-1:]
        # a reasoning item last: its call does not exist yet, and it is the newest item
        await keeping.add_items([output("call_x"), reasoning("rs_y", 99)])
        assert await keeping.get_items(1) == [reasoning("rs_y", 99)]

    env.run(scenario())


def test_keep_reasoning_with_calls_must_be_a_bool(env: AdapterEnv, app_id: str) -> None:
    with pytest.raises(InvalidInputError):
        MemstoreSession(app_id, env.store(), keep_reasoning_with_calls="yes")  # type: ignore[arg-type]
    assert MemstoreSession(app_id, env.store()).keep_reasoning_with_calls is False


def test_pop_of_a_reasoning_carrying_call(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    first = reasoning("rs_1", 1, SUMMARY)

    async def scenario() -> None:
        await session.add_items([user("add"), first, call("call_1")])
        assert await session.pop_item() == call("call_1")
        assert await session.get_items() == [user("add"), first]
        window = await _window(env, store, app_id)
        assert not any(isinstance(m, AiMessage) for m in window)
        assert model_items(rendered(window)) == []  # the opaque row alone sends nothing
        # a new call after the reasoning left at the end takes it
        await session.add_items([call("call_2"), output("call_2")])
        items = model_items(rendered(await _window(env, store, app_id)))
        assert items == [first, sent_call("call_2"), output("call_2")]
        assert await session.pop_item() == output("call_2")
        assert await session.pop_item() == call("call_2")
        assert await session.pop_item() == first
        assert await session.get_items() == [user("add")]

    env.run(scenario())


def test_display_history_has_no_reasoning(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)

    async def scenario() -> list[str]:
        await session.add_items(ONE_CALL[:2])
        await session.add_items(ONE_CALL[2:])
        page = await store.history(app_id) if env.is_async else store.history(app_id)
        return [entry.text for entry in reversed(page)]

    texts = env.run(scenario())
    assert texts == ["What is 1 + 2?", '[tool] add({"a": 1, "b": 2}) -> ok\n1 + 2 = 3']
    for text in texts:
        assert signature(1) not in text
        assert "SECRET-SUMMARY" not in text


def test_reasoning_items_that_do_not_convert_stay_items_only(env: AdapterEnv, app_id: str) -> None:
    """A reasoning item without its id (the SDK's ``reasoning_item_id_policy="omit"``) cannot
    be sent as a canonical part: its call goes without reasoning and without its item id."""
    store = env.store()
    session = MemstoreSession(app_id, store)
    no_id = {k: v for k, v in reasoning("rs_1", 1).items() if k != "id"}
    given = [user("add"), reasoning("rs_0", 0), no_id, call("call_1"), output("call_1")]

    async def scenario() -> None:
        await session.add_items(given)
        assert await session.get_items() == given
        items = model_items(rendered(await _window(env, store, app_id)))
        assert items == [
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "add",
                "arguments": '{"a": 1, "b": 2}',
            },
            output("call_1"),
        ]

    env.run(scenario())


def test_call_without_reasoning_keeps_its_item_id_unsent(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)

    async def scenario() -> list[Message]:
        await session.add_items([user("add"), call("call_1"), output("call_1")])
        return await _window(env, store, app_id)

    window = env.run(scenario())
    request = window[1]
    assert isinstance(request, AiMessage)
    assert request.reasoning == []
    assert request.metadata[ITEM_IDS_KEY] == {"call_1": "fc_call_1"}
    assert request.metadata[AGENTS_KEY] == call("call_1")
    assert "id" not in rendered(window)[1]  # an item id goes only with its reasoning


# -- a real Runner -------------------------------------------------------------------------------


def _reasoning_output(item_id: str, seed: int) -> ResponseReasoningItem:
    return ResponseReasoningItem(
        id=item_id,
        type="reasoning",
        summary=[Summary(type="summary_text", text=SUMMARY)],
        encrypted_content=signature(seed),
    )


def test_runner_restart_sends_reasoning_with_the_call(env: AdapterEnv, app_id: str) -> None:
    first_model = ScriptedModel([_reasoning_output("rs_1", 1), _call("call_1", 1, 2)], [_say("3")])
    second_model = ScriptedModel([_say("6")])
    store = env.store()

    async def scenario() -> None:
        result = await Runner.run(
            _agent(first_model), "1 + 2?", session=MemstoreSession(app_id, store)
        )
        assert result.final_output == "3"
        restarted = MemstoreSession(app_id, env.store(), keep_reasoning_with_calls=True)
        assert (
            await Runner.run(_agent(second_model), "Double it.", session=restarted)
        ).final_output == "6"
        seen = second_model.inputs[0]
        kinds = [item.get("type", "message") for item in seen]
        assert kinds[1:4] == ["reasoning", "function_call", "function_call_output"]
        assert seen[1]["encrypted_content"] == signature(1)
        # the SDK's items as given; memstore's window renders the same reasoning and call
        window = await _window(env, env.store(), app_id)
        stored = await restarted.get_items()
        assert stored[1:3] == seen[1:3]
        assert model_items(rendered(window))[:2] == [
            stored[1],
            {k: v for k, v in stored[2].items() if k != "status"},
        ]
        assert (await restarted.get_items(limit=5))[0]["type"] == "reasoning"

    env.run(scenario())
