"""``MemstoreSession`` against the Agents SDK's documented ``Session`` behaviour.

From the SDK's docs and ``Session`` protocol: ``get_items()`` returns the history in the order
added, ``get_items(limit)`` the latest ``limit`` items in chronological order, ``pop_item()``
removes and returns the most recent item (``None`` when empty), ``clear_session()`` removes
all, ``SessionSettings.limit`` is the default limit. Plus memstore's own promises: every item
round-trips exactly, function calls land as tool rows, and a real ``Runner`` run continues
after a restart with its tool call in context.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("agents")

from agents import Agent, ModelResponse, Runner, function_tool, set_tracing_disabled
from agents.memory import Session, SessionABC, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from memstore import (
    AiMessage,
    MemoryStore,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.adapters.openai_agents import AGENTS_KEY, MemstoreSession
from memstore.core.validate import validate
from memstore.errors import InvalidAppIdError, InvalidMessageError
from memstore.sql.schema import original
from tests.adapters.conftest import AdapterEnv

set_tracing_disabled(True)
os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-used")

EVERY_ITEM_TYPE: list[dict[str, Any]] = [
    {"role": "user", "content": "Wie spät ist es in 東京? 🌸"},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is on this picture?"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0K",
                "detail": "auto",
            },
        ],
    },
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Prefer tools."},
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "The user wants the time."}],
        "encrypted_content": "gAAAAB...",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_time",
        "arguments": '{ "tz" :"Asia/Tokyo" }',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "12:00 ✓"},
    {"type": "function_call", "call_id": "call_2", "name": "read_file", "arguments": "{}"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "file body"}],
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather tokyo"},
    },
    {
        "type": "file_search_call",
        "id": "fs_1",
        "queries": ["q"],
        "status": "completed",
        "results": None,
    },
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "comp_1",
        "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "comp_1",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {"type": "custom_tool_call", "call_id": "ct_1", "name": "grep", "input": "foo.*bar"},
    {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "3 matches"},
    {
        "type": "mcp_call",
        "id": "mcp_1",
        "server_label": "docs",
        "name": "search",
        "arguments": '{"q": "x"}',
        "output": "found",
    },
    {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": None},
    {"type": "item_reference", "id": "msg_0"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "It is noon.", "annotations": [], "logprobs": []},
            {"type": "refusal", "refusal": "I will not say more."},
        ],
    },
]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def session_of(env: AdapterEnv, app_id: str, store: Any = None, **kwargs: Any) -> MemstoreSession:
    return MemstoreSession(app_id, store if store is not None else env.store(), **kwargs)


# -- the protocol ------------------------------------------------------------------------------


def test_is_an_sdk_session(env: AdapterEnv, app_id: str) -> None:
    session = session_of(env, app_id)
    assert isinstance(session, Session)
    assert isinstance(session, SessionABC)
    assert session.session_id == app_id
    assert session.session_settings == SessionSettings()


def test_empty_session(env: AdapterEnv, app_id: str) -> None:
    session = session_of(env, app_id)

    async def scenario() -> None:
        assert await session.get_items() == []
        assert await session.get_items(limit=3) == []
        assert await session.pop_item() is None
        await session.clear_session()
        await session.add_items([])
        assert await session.get_items() == []

    env.run(scenario())


def test_close_leaves_the_store_passed_in_open(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = session_of(env, app_id, store)

    async def scenario() -> None:
        await session.add_items([user("before")])
        session.close()  # as SQLiteSession.close(): nothing of an injected store is closed
        session.close()
        assert [item["content"] for item in await session.get_items()] == ["before"]
        other = session_of(env, app_id, store)
        await other.add_items([user("after")])
        assert len(await other.get_items()) == 2

    env.run(scenario())


def test_every_item_type_round_trips_in_order(env: AdapterEnv, app_id: str) -> None:
    session = session_of(env, app_id)
    given = copy.deepcopy(EVERY_ITEM_TYPE)

    async def scenario() -> None:
        await session.add_items(given[:4])
        for item in given[4:9]:
            await session.add_items([item])
        await session.add_items(given[9:])
        assert await session.get_items() == EVERY_ITEM_TYPE
        fresh = session_of(env, app_id)  # another store object: nothing served from memory
        assert await fresh.get_items() == EVERY_ITEM_TYPE

    env.run(scenario())
    assert given == EVERY_ITEM_TYPE  # the caller's items are not modified


def test_limit_returns_the_latest_items_chronologically(env: AdapterEnv, app_id: str) -> None:
    session = session_of(env, app_id)
    items = [user(f"m{i}") for i in range(40)]

    async def scenario() -> None:
        await session.add_items(items[:25])
        await session.add_items(items[25:])
        assert await session.get_items(limit=1) == items[-1:]
        assert await session.get_items(limit=3) == items[-3:]
        assert await session.get_items(limit=39) == items[-39:]
        assert await session.get_items(limit=40) == items
        assert await session.get_items(limit=1000) == items
        assert await session.get_items(limit=0) == []
        assert await session.get_items(limit=-1) == items  # as the SDK: SQLite's LIMIT -1
        assert await session.get_items() == items

    env.run(scenario())


def test_a_limited_read_that_fits_one_page_is_one_read(
    env: AdapterEnv, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_items(limit)`` reads its first page and the newest summary in one statement."""
    from memstore.adapters._history import StoreAccess

    reads: list[str] = []
    for name in ("newest_rows", "anewest_rows", "latest_summary", "alatest_summary"):
        real = getattr(StoreAccess, name)

        def counted(self: Any, *args: Any, _real: Any = real, _name: str = name) -> Any:
            reads.append(_name)
            return _real(self, *args)

        monkeypatch.setattr(StoreAccess, name, counted)
    session = session_of(env, app_id)
    items = [user(f"m{i}") for i in range(10)]

    async def scenario() -> None:
        await session.add_items(items)
        assert await session.get_items(limit=3) == items[-3:]

    env.run(scenario())
    assert reads == []


def test_session_settings_limit_is_the_default(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    limited = MemstoreSession(app_id, store, session_settings=SessionSettings(limit=2))
    as_dict = MemstoreSession(app_id, store, session_settings={"limit": 3})
    items = [user(f"m{i}") for i in range(5)]

    async def scenario() -> None:
        await limited.add_items(items)
        assert await limited.get_items() == items[-2:]
        assert await as_dict.get_items() == items[-3:]
        assert await limited.get_items(limit=4) == items[-4:]  # explicit limit wins

    env.run(scenario())


def test_limit_counts_items_across_pages(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    # Another adapter's opaque rows are no items of this session: limit skips past them.
    foreign = SystemMessage(text="", metadata={"memstore_opaque": True, "other": 1})

    async def scenario() -> None:
        await session.add_items([user("a"), user("b")])
        noise = [foreign] * 40
        if env.is_async:
            await store.append(app_id, noise)
        else:
            store.append(app_id, noise)
        assert await session.get_items(limit=2) == [user("a"), user("b")]
        assert await session.get_items() == [user("a"), user("b")]
        assert await session.pop_item() == user("b")

    env.run(scenario())
    assert len(env.sync_store().load_window(app_id, max_messages=100)) == 41  # noise kept


def test_pop_removes_and_returns_the_newest(env: AdapterEnv, app_id: str) -> None:
    session = session_of(env, app_id)

    async def scenario() -> None:
        await session.add_items(EVERY_ITEM_TYPE)
        popped = []
        for _ in range(3):
            popped.append(await session.pop_item())
        assert popped == EVERY_ITEM_TYPE[-1:-4:-1]
        assert await session.get_items() == EVERY_ITEM_TYPE[:-3]
        await session.add_items([user("again")])
        assert await session.get_items(limit=2) == [EVERY_ITEM_TYPE[-4], user("again")]
        remaining = len(EVERY_ITEM_TYPE) - 3 + 1
        for _ in range(remaining):
            assert await session.pop_item() is not None
        assert await session.pop_item() is None
        assert await session.get_items() == []

    env.run(scenario())


def test_pop_of_a_correction_removes_its_display_row(env: AdapterEnv, app_id: str) -> None:
    """The SDK docs' use: pop the answer and the question, then ask again."""
    store = env.store()
    session = MemstoreSession(app_id, store)
    reply = {
        "id": "msg_9",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Paris.", "annotations": []}],
    }

    async def history() -> list[tuple[str, str]]:
        page = await store.history(app_id) if env.is_async else store.history(app_id)
        return [(entry.role, entry.text) for entry in reversed(page)]

    async def scenario() -> None:
        await session.add_items([user("Capital of Frence?")])
        await session.add_items([reply])
        assert await history() == [("user", "Capital of Frence?"), ("ai", "Paris.")]
        assert await session.pop_item() == reply
        assert await session.pop_item() == user("Capital of Frence?")
        assert await history() == []
        await session.add_items([user("Capital of France?")])
        assert await history() == [("user", "Capital of France?")]

    env.run(scenario())


def test_pop_invalidates_the_window(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)

    async def window() -> list[Any]:
        if env.is_async:
            return await store.memory(app_id).messages()
        return store.memory(app_id).messages()

    async def scenario() -> None:
        await session.add_items([user("one"), user("two")])
        assert [m.text for m in await window()] == ["one", "two"]  # now cached
        await session.pop_item()
        assert [m.text for m in await window()] == ["one"]

    env.run(scenario())


def test_clear_session(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    other = MemstoreSession(app_id + "-other", store)

    async def scenario() -> None:
        await session.add_items(EVERY_ITEM_TYPE)
        await other.add_items([user("keep me")])
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        assert await other.get_items() == [user("keep me")]
        if env.is_async:
            assert await store.history(app_id) == []
            assert await store.load_window(app_id) == []
        else:
            assert store.history(app_id) == []
            assert store.load_window(app_id) == []
        await session.add_items([user("fresh start")])
        assert await session.get_items() == [user("fresh start")]

    env.run(scenario())


def test_sessions_are_isolated(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    first = MemstoreSession(app_id, store)
    second = MemstoreSession(app_id + "-2", store)
    # ids compare exactly: no prefix, case or LIKE-pattern matching
    lookalikes = [MemstoreSession(app_id.upper(), store), MemstoreSession(app_id[:-1] + "%", store)]

    async def scenario() -> None:
        await first.add_items([user("for first")])
        await second.add_items([user("for second")])
        assert await first.get_items() == [user("for first")]
        assert await second.get_items() == [user("for second")]
        for lookalike in lookalikes:
            assert await lookalike.get_items() == []
            assert await lookalike.pop_item() is None
        assert await second.pop_item() == user("for second")
        assert await first.get_items() == [user("for first")]

    env.run(scenario())


def test_two_handles_on_one_session(env: AdapterEnv, app_id: str) -> None:
    one = session_of(env, app_id)
    two = session_of(env, app_id)  # another store object, same database

    async def scenario() -> None:
        await one.add_items([user("from one")])
        await two.add_items([user("from two")])
        assert await one.get_items() == [user("from one"), user("from two")]
        assert await two.pop_item() == user("from two")
        assert await one.get_items() == [user("from one")]
        await one.clear_session()
        assert await two.get_items() == []

    env.run(scenario())


def test_concurrent_adds_keep_every_batch_whole_and_ordered(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    sessions = [MemstoreSession(app_id, store) for _ in range(4)]
    batches = [[user(f"b{b}-{i}") for i in range(3)] for b in range(16)]

    async def scenario() -> None:
        await asyncio.gather(*(sessions[b % 4].add_items(batch) for b, batch in enumerate(batches)))
        items = await sessions[0].get_items()
        assert len(items) == 48
        texts = [item["content"] for item in items]
        for batch in batches:
            start = texts.index(batch[0]["content"])
            assert texts[start : start + 3] == [item["content"] for item in batch]

    env.run(scenario())


def test_concurrent_pops_return_each_item_once(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    items = [user(f"m{i}") for i in range(12)]

    async def scenario() -> None:
        await MemstoreSession(app_id, store).add_items(items)
        handles = [MemstoreSession(app_id, store) for _ in range(12)]
        popped = await asyncio.gather(*(handle.pop_item() for handle in handles))
        assert sorted(p["content"] for p in popped if p) == sorted(i["content"] for i in items)
        assert await handles[0].get_items() == []

    env.run(scenario())


def test_a_cancelled_add_still_finishes_its_write(env: AdapterEnv, app_id: str) -> None:
    """Like the SDK's own sessions, a write the caller stops waiting for completes whole, so
    SQL and the cached window never disagree; the cancellation is then re-raised."""
    session = session_of(env, app_id)

    async def scenario() -> None:
        task = asyncio.ensure_future(session.add_items([user("a"), user("b")]))
        await asyncio.sleep(0)  # the write has started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await session.get_items() == [user("a"), user("b")]

    env.run(scenario())


# -- what the rest of memstore sees ------------------------------------------------------------


def test_tool_calls_land_as_tool_rows(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    call = {"type": "function_call", "call_id": "c-1", "name": "add", "arguments": '{"a":1}'}
    output = {"type": "function_call_output", "call_id": "c-1", "output": "2"}

    async def scenario() -> list[Any]:
        await session.add_items([user("add"), call])
        await session.add_items([output])  # the call is found in an earlier batch
        return await store.load_window(app_id) if env.is_async else store.load_window(app_id)

    window = env.run(scenario())
    assert window == [
        UserMessage(text="add", metadata={AGENTS_KEY: user("add")}),
        AiMessage(
            text=None,
            tool_requests=[ToolRequest(id="c-1", name="add", arguments='{"a":1}')],
            metadata={AGENTS_KEY: call},
        ),
        ToolResult(id="c-1", tool_name="add", text="2", metadata={AGENTS_KEY: output}),
    ]
    sync = env.sync_store()
    with sync.engine.connect() as conn:
        types = conn.execute(
            sa.select(original.c.message_type, original.c.tool_call_id)
            .where(original.c.app_id == app_id)
            .order_by(original.c.id)
        ).all()
    assert [tuple(row) for row in types] == [
        ("user", None),
        ("toolExecutionRequest", None),
        ("toolExecutionResult", "c-1"),
    ]
    assert [entry.text for entry in sync.history(app_id)] == ['[tool] add({"a":1})', "add"]


def test_every_item_type_gives_a_sendable_window(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)

    async def scenario() -> list[Any]:
        await session.add_items(EVERY_ITEM_TYPE)
        if env.is_async:
            return await store.load_window(app_id, max_messages=100)
        return store.load_window(app_id, max_messages=100)

    window = env.run(scenario())
    assert len(window) == len(EVERY_ITEM_TYPE)
    assert validate(window, "openai") == []
    assert validate(window, "anthropic") == []
    kinds = [type(message).__name__ for message in window]
    assert kinds.count("ToolResult") == 2  # function_call_output only
    opaque = [m for m in window if isinstance(m, SystemMessage) and m.text == ""]
    assert {m.metadata[AGENTS_KEY]["type"] for m in opaque} == {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "mcp_call",
        "image_generation_call",
        "item_reference",
    }
    texts = {m.type: m.text for m in window if m.type in ("ai",) and m.text}
    assert texts == {"ai": "It is noon.I will not say more."}


def test_output_without_its_call_is_kept_opaque(env: AdapterEnv, app_id: str) -> None:
    """An output whose call is not in the session (trimmed by the caller, another session)
    must not fail the write; it round-trips and stays out of the tool rows."""
    store = env.store()
    session = MemstoreSession(app_id, store)
    orphan = {"type": "function_call_output", "call_id": "gone", "output": "late"}

    async def scenario() -> list[Any]:
        await session.add_items([user("hi"), orphan])
        assert await session.get_items() == [user("hi"), orphan]
        return await store.load_window(app_id) if env.is_async else store.load_window(app_id)

    window = env.run(scenario())
    assert [type(m).__name__ for m in window] == ["UserMessage", "SystemMessage"]
    assert validate(window, "openai") == validate(window, "anthropic") == []


def test_rows_written_elsewhere_read_as_items(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    session = MemstoreSession(app_id, store)
    rows = [
        SystemMessage(text="sys"),
        UserMessage(text="read a and b"),
        AiMessage(
            text="Reading.",
            tool_requests=[
                ToolRequest(id="r1", name="read", arguments='{"p":"a"}'),
                ToolRequest(id="r2", name="read", arguments='{"p":"b"}'),
            ],
        ),
        ToolResult(id="r1", tool_name="read", text="A"),
        ToolResult(id="r2", tool_name="read", text="B", is_error=True),
    ]
    call = {"type": "function_call", "name": "read"}

    async def scenario() -> None:
        if env.is_async:
            await store.append(app_id, rows)
        else:
            store.append(app_id, rows)
        assert await session.get_items() == [
            {"role": "system", "content": "sys"},
            user("read a and b"),
            {"role": "assistant", "content": "Reading."},
            {**call, "call_id": "r1", "arguments": '{"p":"a"}'},
            {**call, "call_id": "r2", "arguments": '{"p":"b"}'},
            {"type": "function_call_output", "call_id": "r1", "output": "A"},
            {"type": "function_call_output", "call_id": "r2", "output": "B"},
        ]
        assert await session.get_items(limit=4) == (await session.get_items())[-4:]
        await session.pop_item()
        await session.pop_item()
        # popping the last call of a foreign AI row keeps the row with its other parts
        assert await session.pop_item() == {**call, "call_id": "r2", "arguments": '{"p":"b"}'}
        assert (await session.get_items())[-2:] == [
            {"role": "assistant", "content": "Reading."},
            {**call, "call_id": "r1", "arguments": '{"p":"a"}'},
        ]
        assert await session.pop_item() == {**call, "call_id": "r1", "arguments": '{"p":"a"}'}
        assert await session.pop_item() == {"role": "assistant", "content": "Reading."}
        assert await session.get_items() == [
            {"role": "system", "content": "sys"},
            user("read a and b"),
        ]

    env.run(scenario())


def test_bad_input_is_rejected_before_writing(env: AdapterEnv, app_id: str) -> None:
    session = session_of(env, app_id)

    async def scenario() -> None:
        with pytest.raises(InvalidMessageError):
            await session.add_items([user("ok"), {"role": "user", "content": float("nan")}])
        with pytest.raises(InvalidMessageError):
            await session.add_items([user("ok"), {"role": "user", "content": object()}])
        with pytest.raises(InvalidMessageError):
            await session.add_items(["not a dict"])  # type: ignore[list-item]
        assert await session.get_items() == []

    env.run(scenario())
    with pytest.raises(InvalidAppIdError):
        MemstoreSession("", env.store())


# -- a real Runner -------------------------------------------------------------------------------


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


def _call(call_id: str, a: int, b: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name="add",
        arguments=json.dumps({"a": a, "b": b}),
        type="function_call",
        status="completed",
    )


def _say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{abs(hash(text))}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """Answers each model call with the next canned output; records every input it gets."""

    def __init__(self, *outputs: list[Any]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[dict[str, Any]]] = []

    def _next(self, given: Any) -> list[Any]:
        self.inputs.append(copy.deepcopy(given))
        return self.outputs.pop(0)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        return ModelResponse(output=self._next(input), usage=Usage(), response_id=None)

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        output = self._next(input)
        response = Response(
            id="resp_1",
            created_at=0,
            model="scripted",
            object="response",
            output=output,
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", sequence_number=0, response=response
        )


def _agent(model: Model) -> Agent[Any]:
    return Agent(name="calculator", instructions="Use the add tool.", model=model, tools=[add])


def _types(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(item.get("type", "message"), item.get("role"), item.get("call_id")) for item in items]


@pytest.mark.parametrize("mode", ["run", "run_streamed"])
def test_runner_restart_continues_with_the_tool_call(
    env: AdapterEnv, app_id: str, mode: str
) -> None:
    first_model = ScriptedModel([_call("call_1", 1, 2)], [_say("1 + 2 = 3")])
    second_model = ScriptedModel([_say("Doubled: 6")])

    async def run(model: ScriptedModel, question: str, session: MemstoreSession) -> Any:
        if mode == "run":
            return (await Runner.run(_agent(model), question, session=session)).final_output
        streamed = Runner.run_streamed(_agent(model), question, session=session)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    async def scenario() -> None:
        assert await run(first_model, "What is 1 + 2?", session_of(env, app_id)) == "1 + 2 = 3"
        # the tool ran once and the model saw its output in the same run
        assert _types(first_model.inputs[1]) == [
            ("message", "user", None),
            ("function_call", None, "call_1"),
            ("function_call_output", None, "call_1"),
        ]
        # restart: a new store object and a new session on the same database
        restarted = session_of(env, app_id)
        assert await run(second_model, "Double it.", restarted) == "Doubled: 6"
        seen = second_model.inputs[0]
        assert _types(seen) == [
            ("message", "user", None),
            ("function_call", None, "call_1"),
            ("function_call_output", None, "call_1"),
            ("message", "assistant", None),
            ("message", "user", None),
        ]
        assert seen[1]["arguments"] == '{"a": 1, "b": 2}'
        assert seen[2]["output"] == "3"
        items = await restarted.get_items()
        assert _types(items)[-2:] == [("message", "user", None), ("message", "assistant", None)]

    env.run(scenario())
    window = env.sync_store().load_window(app_id)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "ai", "user", "ai"]
    assert validate(window, "openai") == validate(window, "anthropic") == []


def _run_sync_in_thread(model: ScriptedModel, question: str, session: MemstoreSession) -> Any:
    """``Runner.run_sync`` in a fresh thread (it runs on that thread's own event loop)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = Runner.run_sync(
                _agent(model), question, session=session
            ).final_output
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error
        finally:
            policy = asyncio.get_event_loop_policy()
            loop = policy.get_event_loop()
            loop.close()
            policy.set_event_loop(None)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_runner_run_sync_and_restart(env: AdapterEnv, app_id: str) -> None:
    store = env.store()
    env.run(MemstoreSession(app_id, store).clear_session())  # the test loop is the home loop
    first = ScriptedModel([_call("call_7", 2, 5)], [_say("7")])
    assert _run_sync_in_thread(first, "2 + 5?", MemstoreSession(app_id, store)) == "7"
    restarted = MemstoreSession(app_id, env.store())
    env.run(restarted.get_items())  # the new store's home loop is the test loop too
    second = ScriptedModel([_say("still 7")])
    assert _run_sync_in_thread(second, "again?", restarted) == "still 7"
    assert ("function_call_output", None, "call_7") in _types(second.inputs[0])


def test_several_loops_and_threads_at_once(env: AdapterEnv, app_id: str) -> None:
    """One store shared by runs on the test's loop and on four threads' own loops at once."""
    store = env.store()
    home = MemstoreSession(app_id + "-home", store)
    env.run(home.clear_session())
    results: dict[int, Any] = {}

    def worker(n: int) -> None:
        model = ScriptedModel([_call(f"t{n}", n, n)], [_say(f"{2 * n}")])
        results[n] = _run_sync_in_thread(
            model, f"{n} + {n}?", MemstoreSession(f"{app_id}-{n}", store)
        )

    async def on_home_loop() -> None:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for step in range(5):
            await home.add_items([user(f"home {step}")])
            await asyncio.sleep(0.01)
        await asyncio.to_thread(lambda: [thread.join(60) for thread in threads])

    env.run(on_home_loop())
    assert results == {n: str(2 * n) for n in range(4)}

    async def check() -> None:
        assert await home.get_items() == [user(f"home {step}") for step in range(5)]
        for n in range(4):
            items = await MemstoreSession(f"{app_id}-{n}", store).get_items()
            assert _types(items) == [
                ("message", "user", None),
                ("function_call", None, f"t{n}"),
                ("function_call_output", None, f"t{n}"),
                ("message", "assistant", None),
            ]

    env.run(check())


def test_a_sync_store_works_from_any_loop(app_id: str, sqlite_store: MemoryStore) -> None:
    session = MemstoreSession(app_id, sqlite_store)
    asyncio.run(session.add_items([user("first loop")]))
    asyncio.run(session.add_items([user("second loop")]))
    assert asyncio.run(session.get_items()) == [user("first loop"), user("second loop")]


# -- compaction ----------------------------------------------------------------------------------


def test_a_compacted_session_gives_the_summary_then_the_items_after_it(
    env: AdapterEnv, app_id: str
) -> None:
    store = env.store()
    session = session_of(env, app_id, store)
    items = [user(f"m{i}") for i in range(30)]

    async def compact() -> None:
        memory = store.memory(app_id)
        if env.is_async:
            await memory.compact(lambda m: "so far", keep_last_messages=5)
        else:
            memory.compact(lambda m: "so far", keep_last_messages=5)

    async def scenario() -> None:
        await session.add_items(items)
        await compact()
        summary = {"role": "system", "content": "so far"}
        assert await session.get_items() == [summary, *items[-5:]]
        assert await session.get_items(limit=3) == [summary, *items[-2:]]
        assert await session.get_items(limit=1) == [summary]
        await session.add_items([user("new")])
        assert await session.get_items() == [summary, *items[-5:], user("new")]
        assert await session.pop_item() == user("new")
        assert await session.get_items(limit=100) == [summary, *items[-5:]]

    env.run(scenario())
    raw = env.sync_store().load_window(app_id, 1000, summaries=False)
    assert len(raw) == 30  # the stored items are all still there
