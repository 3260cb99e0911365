"""pydantic-ai's ConversationStore on memstore, driven by real agents on every database."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationStore
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from memstore.adapters.pydantic_ai import ARCHIVE_PREFIX, MemstoreConversationStore
from memstore.cache.keys import app_keys
from memstore.errors import MissingExtraError
from memstore.messages import AiMessage, Message, UserMessage
from memstore.operations import repair_app
from memstore.sql.schema import conversation_entries, conversations, display, original
from tests.adapters.conftest import AdapterEnv
from tests.conftest import redis_client

# -- a scripted model that records what it receives and calls tools in parallel --------------------


class Script:
    """Answers a user prompt with two parallel calls (one retried once), then with text."""

    def __init__(self) -> None:
        self.received: list[list[ModelMessage]] = []
        self.turn = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(list(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(part, UserPromptPart) for part in last.parts):
            self.turn += 1
            n = self.turn
            return ModelResponse(
                parts=[
                    ThinkingPart(content=f"plan {n}", signature=f"sig-{n}"),
                    TextPart(content=f"Working on {n}."),
                    ToolCallPart("add", {"a": n, "b": 1}, tool_call_id=f"t{n}-add"),
                    ToolCallPart("flaky", f'{{"n": {n}}}', tool_call_id=f"t{n}-flaky"),
                ],
                model_name="scripted",
            )
        if any(isinstance(part, RetryPromptPart) for part in last.parts):
            return ModelResponse(
                parts=[ToolCallPart("flaky", {"n": 0}, tool_call_id=f"t{self.turn}-retry")]
            )
        return ModelResponse(parts=[TextPart(content=f"Done {self.turn}.")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = self(messages, info)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                args = part.args if isinstance(part.args, str) else json.dumps(part.args)
                yield {
                    index: DeltaToolCall(
                        name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id
                    )
                }


def make_agent(script: Script) -> Agent[None, str]:
    agent = Agent(FunctionModel(script, stream_function=script.stream))

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    @agent.tool_plain
    def flaky(n: int) -> str:
        if n:
            raise ModelRetry(f"try n=0 instead of {n}")
        return "steady"

    return agent


def store_of(env: AdapterEnv) -> MemstoreConversationStore:
    return MemstoreConversationStore(env.store())


async def run_turns(
    agent: Agent[None, str], store: ConversationStore, conversation_id: str, prompts: Sequence[str]
) -> Conversation:
    conversation = await store.load(conversation_id) or Conversation(
        conversation_id=conversation_id
    )
    for prompt in prompts:
        result = await agent.run(prompt, conversation=conversation)
        await store.save(result)
        conversation = result.conversation
    return conversation


# -- what a valid history is -----------------------------------------------------------------------


def returns_of(message: ModelMessage) -> list[ToolReturnPart | RetryPromptPart]:
    if not isinstance(message, ModelRequest):
        return []
    return [
        part
        for part in message.parts
        if isinstance(part, ToolReturnPart)
        or (isinstance(part, RetryPromptPart) and part.tool_name is not None)
    ]


def calls_of(message: ModelMessage) -> list[ToolCallPart]:
    if not isinstance(message, ModelResponse):
        return []
    return [part for part in message.parts if isinstance(part, ToolCallPart)]


def assert_paired(messages: Sequence[ModelMessage], *, open_tail: bool = True) -> None:
    """No return without its earlier call; no call without a later return (but the newest
    response's, when ``open_tail``: a paused run waits on those)."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        called.update(part.tool_call_id for part in calls_of(message))
        for part in returns_of(message):
            assert part.tool_call_id in called, f"return {part.tool_call_id} without its call"
            answered.add(part.tool_call_id)
    tail = (
        {part.tool_call_id for part in calls_of(messages[-1])} if messages and open_tail else set()
    )
    assert called - answered <= tail, f"calls without a return: {called - answered - tail}"


def count_rows(env: AdapterEnv, table: sa.Table, column: sa.Column[Any], value: str) -> int:
    with env.sync_store().engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(table).where(column == value)
        return int(conn.execute(query).scalar_one())


# -- the tests -------------------------------------------------------------------------------------


def test_every_limit_gives_a_paired_window_of_the_stored_returns(
    env: AdapterEnv, app_id: str
) -> None:
    script = Script()
    agent = make_agent(script)

    async def scenario() -> None:
        saved = await run_turns(agent, store_of(env), app_id, ["one", "two", "three"])
        fresh = store_of(env)  # a new store object on the same database
        whole = await fresh.load(app_id)
        assert whole is not None
        assert whole.messages == saved.messages  # thinking, timestamps, usage: all equal
        assert whole.usage == saved.usage
        stored_returns = {
            part.tool_call_id: part for message in whole.messages for part in returns_of(message)
        }
        retried = [p for p in stored_returns.values() if getattr(p, "outcome", "") == "retried"]
        assert retried  # the flaky tool's ModelRetry: an error result
        length = len(whole.messages)
        for k in range(1, length + 1):
            window = await fresh.load(app_id, limit=k)
            assert window is not None
            messages = window.messages
            assert len(messages) >= min(k, length)
            assert messages[-k:] == whole.messages[-k:]
            assert_paired(messages)
            for message in messages:
                for part in returns_of(message):
                    assert part == stored_returns[part.tool_call_id]  # stored, not synthesized
            # the model gets the window as loaded: nothing repaired away
            script.received.clear()
            await agent.run("again", conversation=window)
            assert script.received[0][: len(messages)] == messages
            for received in script.received:
                assert_paired(received)

    env.run(scenario())


def test_a_stale_revision_conflicts_and_writes_nothing(env: AdapterEnv, app_id: str) -> None:
    agent = make_agent(Script())

    async def scenario() -> None:
        store = store_of(env)
        await run_turns(agent, store, app_id, ["one"])
        first = await store.load(app_id)
        second = await store_of(env).load(app_id)
        assert first is not None and second is not None
        await store.save(await agent.run("two", conversation=first))
        rows = count_rows(env, original, original.c.app_id, app_id)
        entries = count_rows(env, conversation_entries, conversation_entries.c.app_id, app_id)
        stale = await agent.run("three", conversation=second)
        with pytest.raises(ConversationConflict):
            await store.save(stale)
        assert count_rows(env, original, original.c.app_id, app_id) == rows
        assert count_rows(env, conversation_entries, conversation_entries.c.app_id, app_id) == (
            entries
        )
        with pytest.raises(ConversationConflict):  # a new conversation over a stored one
            await store.save(Conversation(conversation_id=app_id, messages=first.messages))

    env.run(scenario())


def test_scopes_are_isolated(env: AdapterEnv, app_id: str) -> None:
    agent = make_agent(Script())

    async def scenario() -> None:
        store = store_of(env)
        result = await agent.run("hi", conversation=Conversation(conversation_id=app_id))
        await store.save(result, scope="alice")
        assert await store.load(app_id, scope="bob") is None
        assert await store.load(app_id, scope="alice") is not None
        listed = await store.list_conversations(scope="bob")
        assert app_id not in [record.conversation_id for record in listed]
        alices = await store.list_conversations(scope="alice")
        assert app_id in [record.conversation_id for record in alices]
        await store.delete(app_id, scope="bob")  # not bob's: left alone
        assert await store.load(app_id) is not None
        with pytest.raises(ConversationConflict):
            await store.save(result, scope="bob")

    env.run(scenario())


def test_delete_leaves_no_row_and_no_cache_key(env: AdapterEnv, app_id: str) -> None:
    agent = make_agent(Script())
    fork_id = app_id + "-fork"

    async def scenario() -> None:
        base = env.store()
        store = MemstoreConversationStore(base)
        await run_turns(agent, store, app_id, ["one", "two"])
        loaded = await store.load(app_id)
        assert loaded is not None
        await store.branch(app_id, at=2, expected_revision=loaded.revision)  # an archive app
        await store.fork(app_id, new_conversation_id=fork_id)
        sync = env.sync_store()

        async def cached() -> list[Any]:
            if env.is_async:
                return list(await base.memory(app_id).messages())
            return list(base.memory(app_id).messages())

        assert await cached()  # a cached window to purge
        await store.delete(app_id)
        assert await store.load(app_id) is None
        with sync.engine.connect() as conn:
            archives = conn.execute(
                sa.select(sa.func.count())
                .select_from(conversation_entries)
                .where(conversation_entries.c.owner == app_id)
            ).scalar_one()
            left = conn.execute(
                sa.select(sa.func.count())
                .select_from(original)
                .where(original.c.app_id.like(ARCHIVE_PREFIX + "%"))
                .where(
                    original.c.app_id.in_(
                        sa.select(conversation_entries.c.app_id).where(
                            conversation_entries.c.owner == app_id
                        )
                    )
                )
            ).scalar_one()
        assert archives == 0 and left == 0
        for table in (original, display):
            assert count_rows(env, table, table.c.app_id, app_id) == 0
        assert count_rows(env, conversations, conversations.c.conversation_id, app_id) == 0
        if env.cache == "redis":
            with redis_client() as client:
                assert client.exists(*app_keys(app_id)) == 0
        assert await cached() == []
        fork = await store.load(fork_id)  # the fork keeps its own copy
        assert fork is not None and len(fork.messages) > 0
        assert_paired(fork.messages)

    env.run(scenario())


def test_a_branch_history_is_its_own_path(env: AdapterEnv, app_id: str) -> None:
    agent = make_agent(Script())

    async def scenario() -> None:
        store = store_of(env)
        old = await run_turns(agent, store, app_id, ["one", "two"])
        loaded = await store.load(app_id)
        assert loaded is not None
        keep = len([m for m in old.messages]) // 2  # the first turn
        first_turn = old.messages[:keep]
        branched = await store.branch(app_id, at=keep, expected_revision=loaded.revision)
        assert branched.messages == first_turn
        result = await agent.run("other two", conversation=branched)
        await store.save(result)
        fresh = store_of(env)
        now = await fresh.load(app_id)
        assert now is not None
        assert now.messages[:keep] == first_turn
        assert now.messages[keep:] == result.conversation.messages[keep:]
        assert "other two" in str(now.messages[keep:]) and "'two'" not in str(now.messages)
        for k in range(1, len(now.messages) + 1):
            window = await fresh.load(app_id, limit=k)
            assert window is not None
            assert window.messages[-k:] == now.messages[-k:]
            assert_paired(window.messages)
        record = await fresh.read_record(app_id)
        assert record is not None and len(record.branches) == 1
        left = await fresh.read_history(record.branches[0])
        assert [entry.message for entry in left] == old.messages
        back = await fresh.branch(
            app_id, from_entry=record.branches[0], expected_revision=record.revision
        )
        assert back.messages == old.messages
        assert (await store_of(env).load(app_id)).messages == old.messages  # type: ignore[union-attr]

    env.run(scenario())


def test_a_fork_starts_from_the_shared_history(env: AdapterEnv, app_id: str) -> None:
    agent = make_agent(Script())
    fork_id = app_id + "-f"

    async def scenario() -> None:
        store = store_of(env)
        old = await run_turns(agent, store, app_id, ["one", "two"])
        fork = await store.fork(app_id, at=5, new_conversation_id=fork_id)
        assert fork.messages == old.messages[:5]
        await store.save(await agent.run("forked", conversation=fork))
        assert (await store.load(app_id)).messages == old.messages  # type: ignore[union-attr]
        forked = await store_of(env).load(fork_id)
        assert forked is not None and forked.messages[:5] == old.messages[:5]
        assert_paired(forked.messages)
        record = await store.read_record(fork_id)
        assert record is not None and record.forked_from == app_id

    env.run(scenario())


def test_a_window_answers_an_unanswered_call_unless_newest(env: AdapterEnv, app_id: str) -> None:
    call = ToolCallPart("add", '{"a": 1}', tool_call_id="lost")
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("one")]),
        ModelResponse(parts=[call]),
        ModelRequest(parts=[UserPromptPart("two")]),
        ModelResponse(parts=[ToolCallPart("add", {"a": 2}, tool_call_id="waiting")]),
    ]

    async def scenario() -> None:
        store = store_of(env)
        await store.save(Conversation(conversation_id=app_id, messages=messages))
        whole = await store_of(env).load(app_id)
        assert whole is not None and whole.messages == messages  # the history as stored
        loaded = await store_of(env).load(app_id, limit=10)
        assert loaded is not None
        assert_paired(loaded.messages)
        interrupted = loaded.messages[2]
        assert isinstance(interrupted, ModelRequest)
        (part,) = interrupted.parts
        assert isinstance(part, ToolReturnPart) and part.tool_call_id == "lost"
        assert "interrupted" in str(part.content)
        assert loaded.messages[-1] == messages[-1]  # the newest calls stay open (deferred)
        assert [m for m in loaded.messages if m is not interrupted] == messages
        # continuing the window stores the new messages after the stored ones, never the
        # synthetic return
        extra = ModelRequest(parts=[ToolReturnPart("add", 3, tool_call_id="waiting")])
        loaded.messages.append(extra)
        await store.save(loaded)
        after = await store_of(env).load(app_id)
        assert after is not None and after.messages == [*messages, extra]
        rewritten = await store_of(env).load(app_id, limit=10)
        assert rewritten is not None
        rewritten.messages = rewritten.messages[:3]  # ends at the synthetic entry
        await store.save(rewritten)
        record = await store.read_record(app_id)
        assert record is not None and record.head_id is not None
        assert (await store.read_entry(record.head_id)).message == messages[1]

    env.run(scenario())


def test_load_with_a_limit_reads_a_bounded_window(env: AdapterEnv, app_id: str) -> None:
    if env.is_async:
        pytest.skip("statements are counted on the sync engine")
    agent = make_agent(Script())
    store = env.store()
    conversations_store = MemstoreConversationStore(store)
    prompts = [f"turn {i}" for i in range(12)]
    env.run(run_turns(agent, conversations_store, app_id, prompts))
    total = count_rows(env, original, original.c.app_id, app_id)
    calls: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        calls.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        window = env.run(conversations_store.load(app_id, limit=2))
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)
    assert window is not None and len(window.messages) >= 2
    ((_statement, parameters),) = [c for c in calls if "chat_history_original" in c[0]]
    values = parameters.values() if isinstance(parameters, dict) else parameters
    limits = [v for v in values if type(v) is int and v < 10**6]  # not ids, not booleans
    assert limits and max(limits) < total  # a bounded read, not the whole conversation


def test_the_vercel_ai_adapter_keeps_the_conversation(env: AdapterEnv, app_id: str) -> None:
    ui = pytest.importorskip("pydantic_ai.ui.vercel_ai")
    script = Script()
    agent = make_agent(script)

    async def scenario() -> None:
        for turn in ("one", "two"):
            body = {
                "trigger": "submit-message",
                "id": app_id,
                "messages": [
                    {"id": f"m-{turn}", "role": "user", "parts": [{"type": "text", "text": turn}]}
                ],
            }
            adapter = ui.VercelAIAdapter(
                agent=agent,
                run_input=ui.VercelAIAdapter.build_run_input(json.dumps(body).encode()),
                conversation_store=store_of(env),
            )
            chunks = [chunk async for chunk in adapter.encode_stream(adapter.run_stream())]
            assert '"type":"error"' not in "".join(chunks)
        first = script.received[0]
        later = script.received[-1]
        assert len(later) > len(first)  # the second turn got the first one from the store
        assert_paired(later)
        stored = await store_of(env).load(app_id)
        assert stored is not None
        assert stored.messages == later + stored.messages[len(later) :]
        shown = env.sync_store().history(app_id, limit=50)
        assert [entry.text for entry in shown if entry.role == "user"] == ["two", "one"]

    env.run(scenario())


def test_missing_pydantic_ai_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    module = "memstore.adapters.pydantic_ai"
    monkeypatch.delitem(sys.modules, module, raising=False)
    for name in [n for n in sys.modules if n == "pydantic_ai" or n.startswith("pydantic_ai.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    with pytest.raises(MissingExtraError) as raised:
        __import__(module)
    assert raised.value.install == "pip install 'memstore[pydantic-ai]'"
    monkeypatch.delitem(sys.modules, module, raising=False)


# -- parity with pydantic-ai's own in-memory store ---------------------------------------------


async def store_story(
    store: ConversationStore, messages: list[ModelMessage], cid: str
) -> list[Any]:
    """Drive the base class's operations; return what a caller can observe (no entry ids)."""
    trace: list[Any] = []
    saved = await store.save(Conversation(conversation_id=cid, messages=messages[:4]))
    trace.append(("saved", len(saved)))
    loaded = await store.load(cid)
    assert loaded is not None
    trace.append(("loaded", loaded.messages))
    loaded.messages.extend(messages[4:8])
    trace.append(("extended", len(await store.save(loaded))))
    stale = Conversation(conversation_id=cid, messages=messages[:8], revision="stale")
    try:
        await store.save(stale)
    except ConversationConflict:
        trace.append("conflict")
    again = await store.load(cid)
    assert again is not None
    again.messages = [*messages[:2], *messages[8:]]  # a rewritten history: a branch
    trace.append(("rewritten", len(await store.save(again))))
    record = await store.read_record(cid)
    assert record is not None
    trace.append(("branches", len(record.branches)))
    trace.append(("left", [e.message for e in await store.read_history(record.branches[0])]))
    now = await store.load(cid)
    assert now is not None
    trace.append(("now", now.messages))
    cut = await store.branch(cid, at=3, expected_revision=now.revision)
    trace.append(("cut", cut.messages))
    record = await store.read_record(cid)
    assert record is not None
    back = await store.branch(cid, from_entry=record.branches[0], expected_revision=record.revision)
    trace.append(("back", back.messages))
    fork = await store.fork(cid, at=2, new_conversation_id=cid + "-fork", scope=cid)
    trace.append(("fork", fork.messages))
    listed = await store.list_conversations(scope=cid)
    trace.append(("listed", [r.conversation_id for r in listed]))
    await store.delete(cid)
    trace.append(("deleted", await store.load(cid)))
    forked = await store.load(cid + "-fork", scope=cid)
    trace.append(("fork kept", forked.messages if forked else None))
    for k in range(1, len(messages)):
        window = await store.load(cid + "-fork", limit=k)
        assert window is not None
        trace.append(("tail", k, window.messages[-k:]))
    return trace


def test_the_in_memory_store_behaviours_hold(env: AdapterEnv, app_id: str) -> None:
    from pydantic_ai.conversation_store import InMemoryConversationStore

    agent = make_agent(Script())

    async def scenario() -> None:
        result = await run_turns(agent, InMemoryConversationStore(), "x", ["one", "two", "three"])
        messages = list(result.messages)
        expected = await store_story(InMemoryConversationStore(), messages, app_id)
        assert await store_story(store_of(env), messages, app_id) == expected

    env.run(scenario())


def test_concurrent_saves_of_one_revision_let_exactly_one_win(env: AdapterEnv, app_id: str) -> None:
    agent = make_agent(Script())

    async def scenario() -> None:
        await run_turns(agent, store_of(env), app_id, ["one"])
        stores = [store_of(env) for _ in range(4)]
        loaded = [await store.load(app_id) for store in stores]
        results = [await agent.run(f"turn {i}", conversation=c) for i, c in enumerate(loaded)]
        outcomes = await asyncio.gather(
            *(store.save(result) for store, result in zip(stores, results, strict=True)),
            return_exceptions=True,
        )
        assert sum(isinstance(o, ConversationConflict) for o in outcomes) == len(stores) - 1
        winner = next(r for r, o in zip(results, outcomes, strict=True) if isinstance(o, list))
        stored = await store_of(env).load(app_id)
        assert stored is not None and stored.messages == winner.conversation.messages
        entries = count_rows(env, conversation_entries, conversation_entries.c.app_id, app_id)
        assert entries == len(stored.messages)  # the losers left no entry behind

    env.run(scenario())


def test_an_operator_purge_removes_the_conversation_record(env: AdapterEnv, app_id: str) -> None:
    """``memstore purge APP`` (store.purge) leaves no conversation record or entry location
    pointing at rows that are gone: the conversation is simply not there any more."""
    agent = make_agent(Script())

    async def scenario() -> None:
        store = store_of(env)
        await run_turns(agent, store, app_id, ["one"])
        env.sync_store().purge(app_id)
        assert count_rows(env, conversations, conversations.c.conversation_id, app_id) == 0
        assert count_rows(env, conversation_entries, conversation_entries.c.app_id, app_id) == 0
        assert await store_of(env).load(app_id) is None
        await run_turns(agent, store_of(env), app_id, ["again"])  # starts afresh, no conflict
        again = await store_of(env).load(app_id)
        assert again is not None
        assert_paired(again.messages)

    env.run(scenario())


# -- rows the adapter did not write ----------------------------------------------------------------


async def append_foreign(env: AdapterEnv, app_id: str) -> None:
    """Rows written to the app through the store itself, as another adapter would."""
    sync = env.sync_store()
    rows: list[Message] = [
        UserMessage(text="written elsewhere"),
        AiMessage(text="answered elsewhere"),
    ]
    await asyncio.to_thread(sync.append, app_id, rows)


def test_rows_written_through_the_store_leave_the_conversation_whole(
    env: AdapterEnv, app_id: str
) -> None:
    """Issue item 8: rows the adapter did not write (before the conversation and between its
    turns) took the places of its oldest rows in a read: ``load`` dropped the first message and
    a save comparing the history duplicated it on a spurious branch."""
    agent = make_agent(Script())

    async def scenario() -> None:
        await append_foreign(env, app_id)  # before the first save
        store = store_of(env)
        await run_turns(agent, store, app_id, ["one"])
        await append_foreign(env, app_id)  # between two turns
        saved = await run_turns(agent, store, app_id, ["two"])
        fresh = store_of(env)
        loaded = await fresh.load(app_id)
        assert loaded is not None and loaded.messages == saved.messages
        for k in range(1, len(saved.messages) + 1):
            window = await fresh.load(app_id, limit=k)
            assert window is not None
            assert window.messages[-k:] == saved.messages[-k:]
            assert_paired(window.messages)
        # a conversation that does not know which messages are stored (say, serialized and
        # read back) is compared with the stored history: nothing is new, nothing branched
        rebuilt = Conversation(
            conversation_id=app_id, messages=list(saved.messages), revision=loaded.revision
        )
        assert await fresh.save(rebuilt) == []
        record = await fresh.read_record(app_id)
        assert record is not None and record.branches == []
        after = await store_of(env).load(app_id)
        assert after is not None and after.messages == saved.messages

    env.run(scenario())


def test_a_history_repaired_by_check_keeps_every_message(env: AdapterEnv, app_id: str) -> None:
    """``memstore check --repair`` stores an answer for a call a run left unanswered: the
    conversation still loads whole, a later turn continues it, and a window shows the
    answer as the call's return."""
    call = ToolCallPart("add", '{"a": 1}', tool_call_id="died")
    first: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("one")]),
        ModelResponse(parts=[call]),
    ]
    later: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("two")]),
        ModelResponse(parts=[TextPart("two done")]),
    ]

    async def scenario() -> None:
        store = store_of(env)
        await store.save(Conversation(conversation_id=app_id, messages=list(first)))
        repaired = await asyncio.to_thread(repair_app, env.sync_store(), app_id)
        assert repaired.repaired is not None and len(repaired.repaired.answers) == 1
        loaded = await store_of(env).load(app_id)
        assert loaded is not None and loaded.messages == first
        loaded.messages.extend(later)
        await store.save(loaded)
        whole = await store_of(env).load(app_id)
        assert whole is not None and whole.messages == [*first, *later]
        record = await store.read_record(app_id)
        assert record is not None and record.branches == []
        rebuilt = Conversation(
            conversation_id=app_id, messages=list(whole.messages), revision=whole.revision
        )
        assert await store.save(rebuilt) == []
        window = await store_of(env).load(app_id, limit=10)
        assert window is not None
        assert_paired(window.messages, open_tail=False)
        answer = window.messages[2]
        assert isinstance(answer, ModelRequest)
        (part,) = answer.parts
        assert isinstance(part, ToolReturnPart) and part.tool_call_id == "died"
        assert [m for m in window.messages if m is not answer] == [*first, *later]

    env.run(scenario())
