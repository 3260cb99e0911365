"""Google ADK's session service on memstore, driven by a real Runner on every database."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from memstore import MemoryStore
from memstore.adapters.google_adk import MemstoreSessionService, history_app_id
from memstore.cache.keys import app_keys
from memstore.errors import MissingExtraError
from memstore.sql.schema import adk_state, display, original
from tests.adapters.conftest import AdapterEnv
from tests.conftest import redis_client

APP = "calc"
USER = "u1"

RECEIVED: list[list[types.Content]] = []


class Scripted(BaseLlm):
    """Answers a user text with two parallel calls, function responses with text."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        RECEIVED.append(list(llm_request.contents))
        last = llm_request.contents[-1]
        if any(part.function_response for part in last.parts or []):
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
            return
        n = len(llm_request.contents)
        tool = "slow" if any("slow" in (part.text or "") for part in last.parts or []) else "add"
        calls = [
            types.FunctionCall(id=f"c{n}-{uuid.uuid4().hex[:6]}", name=tool, args={"a": n, "b": 1}),
            types.FunctionCall(
                id=f"c{n}-{uuid.uuid4().hex[:6]}", name="add", args={"a": 2, "b": n}
            ),
        ]
        yield LlmResponse(
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text=f"adding {n}"),
                    *[types.Part(function_call=c) for c in calls],
                ],
            )
        )


def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


SLOW_STARTED: dict[str, asyncio.Event] = {}
"""Set by the slow tool when it starts (one event per test: events belong to one loop)."""


async def slow(a: int, b: int) -> dict[str, int]:
    """Add two numbers, slowly."""
    SLOW_STARTED["started"].set()
    await asyncio.sleep(3600)
    return {"sum": a + b}


def runner_of(service: MemstoreSessionService) -> Runner:
    agent = LlmAgent(name="calc", model=Scripted(), tools=[add, slow])
    return Runner(agent=agent, app_name=APP, session_service=service)


def service_of(env: AdapterEnv, **kwargs: Any) -> MemstoreSessionService:
    return MemstoreSessionService(env.store(), **kwargs)


def text(value: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=value)])


async def turn(runner: Runner, session_id: str, prompt: str) -> list[Event]:
    return [
        event
        async for event in runner.run_async(
            user_id=USER, session_id=session_id, new_message=text(prompt)
        )
    ]


def assert_paired(contents: Sequence[types.Content | Event]) -> None:
    """Every response answers an earlier call; every call is answered."""
    called: set[str] = set()
    answered: set[str] = set()
    for item in contents:
        content = item.content if isinstance(item, Event) else item
        for part in (content.parts if content is not None else None) or []:
            if part.function_call is not None:
                called.add(part.function_call.id or "")
            if part.function_response is not None:
                assert part.function_response.id in called, "a response without its call"
                answered.add(part.function_response.id or "")
    assert called == answered, f"calls without a response: {called - answered}"


def call_ids(contents: Sequence[types.Content]) -> set[str]:
    return {
        part.function_call.id or ""
        for content in contents
        for part in content.parts or []
        if part.function_call is not None
    }


def test_a_restart_continues_with_the_calls_and_responses(env: AdapterEnv) -> None:
    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER, state={"x": 1})
        appended = await turn(runner_of(service), session.id, "one")
        appended += await turn(runner_of(service), session.id, "two")
        restarted = service_of(env)  # new store object, new service, new runner
        RECEIVED.clear()
        await turn(runner_of(restarted), session.id, "three")
        first_request = RECEIVED[0]
        assert call_ids(first_request) >= call_ids(
            [event.content for event in appended if event.content is not None]
        )
        assert len(call_ids(first_request)) == 4
        for request in RECEIVED:
            assert_paired(request)
        stored = await service_of(env).get_session(
            app_name=APP, user_id=USER, session_id=session.id
        )
        assert stored is not None
        mine = [event for event in stored.events if event.id in {e.id for e in appended}]
        assert [e.model_dump() for e in mine] == [e.model_dump() for e in appended]
        assert stored.state["x"] == 1

    env.run(scenario())


def test_every_num_recent_events_is_a_paired_window(env: AdapterEnv) -> None:
    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        for prompt in ("one", "two", "three"):
            await turn(runner_of(service), session.id, prompt)
        fresh = service_of(env)
        whole = await fresh.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert whole is not None
        stored = {event.id: event for event in whole.events}
        for n in range(0, len(whole.events) + 2):
            config = GetSessionConfig(num_recent_events=n)
            window = await fresh.get_session(
                app_name=APP, user_id=USER, session_id=session.id, config=config
            )
            assert window is not None
            assert_paired(window.events)
            assert window.events == whole.events[len(whole.events) - len(window.events) :]
            # at least n events (ADK counts events; a 2-response event is 2 memstore rows),
            # more only to keep a call with its response
            assert len(window.events) >= min(n, len(whole.events))
            if len(window.events) > n:
                assert window.events[0].get_function_calls()
            for event in window.events:
                assert event == stored[event.id]  # the stored responses, not synthesized
            if n:
                assert window.events and window.events[-1] == whole.events[-1]

    env.run(scenario())


def test_a_run_killed_mid_tool_gets_an_interrupted_response(env: AdapterEnv) -> None:
    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        started = SLOW_STARTED["started"] = asyncio.Event()
        task = asyncio.ensure_future(turn(runner_of(service), session.id, "slow please"))
        await asyncio.wait_for(started.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        RECEIVED.clear()
        await turn(runner_of(service_of(env)), session.id, "are you there?")
        request = RECEIVED[0]
        assert_paired(request)
        errors = [
            part.function_response
            for content in request
            for part in content.parts or []
            if part.function_response is not None
            and "interrupted" in str((part.function_response.response or {}).get("error", ""))
        ]
        assert errors  # the killed call is answered with an error, not dropped or faked

    env.run(scenario())


def test_a_stale_append_raises_and_writes_nothing(env: AdapterEnv) -> None:
    async def scenario() -> None:
        service = service_of(env)
        created = await service.create_session(app_name=APP, user_id=USER)
        first = await service.get_session(app_name=APP, user_id=USER, session_id=created.id)
        second = await service_of(env).get_session(
            app_name=APP, user_id=USER, session_id=created.id
        )
        assert first is not None and second is not None
        await service.append_event(first, Event(author="user", content=text("hi")))
        app_id = history_app_id(APP, USER, created.id)
        rows = count(env, original, original.c.app_id, app_id)
        late = Event(
            author="user", content=text("late"), actions=EventActions(state_delta={"k": 1})
        )
        with pytest.raises(StaleSessionError):
            await service.append_event(second, late)
        assert count(env, original, original.c.app_id, app_id) == rows
        again = await service.get_session(app_name=APP, user_id=USER, session_id=created.id)
        assert again is not None and "k" not in again.state
        await service.append_event(again, late)  # reloaded: fine
        assert (await service.get_session(app_name=APP, user_id=USER, session_id=created.id)).state[  # type: ignore[union-attr]
            "k"
        ] == 1

    env.run(scenario())


def test_a_response_whose_call_was_never_stored_is_kept_and_its_event_applied_once(
    env: AdapterEnv,
) -> None:
    """A named function response is written without looking its call up first; the write
    finds no call, rolls back and is written again with the response as an opaque row: the
    event's state delta and revision step happen once."""

    async def scenario() -> None:
        service = service_of(env)
        created = await service.create_session(app_name=APP, user_id=USER)
        session = await service.get_session(app_name=APP, user_id=USER, session_id=created.id)
        assert session is not None
        stray = types.FunctionResponse(id="never-called", name="add", response={"result": 3})
        await service.append_event(
            session,
            Event(
                author="user",
                content=types.Content(role="user", parts=[types.Part(function_response=stray)]),
                actions=EventActions(state_delta={"k": 1}),
            ),
        )
        await service.append_event(session, Event(author="user", content=text("next")))
        again = await service.get_session(app_name=APP, user_id=USER, session_id=created.id)
        assert again is not None and again.state["k"] == 1
        responses = [p.function_response for e in again.events for p in e.content.parts or []]  # type: ignore[union-attr]
        assert [r.id if r else None for r in responses] == ["never-called", None]
        app_id = history_app_id(APP, USER, created.id)
        window = env.sync_store().load_window(app_id)
        assert [type(m).__name__ for m in window] == ["SystemMessage", "UserMessage"]

    env.run(scenario())


def test_state_scopes_listing_and_delete(env: AdapterEnv) -> None:
    async def scenario() -> None:
        base = env.store()
        service = MemstoreSessionService(base)
        one = await service.create_session(
            app_name=APP, user_id=USER, state={"app:v": 1, "user:lang": "en", "s": "a"}
        )
        two = await service.create_session(app_name=APP, user_id=USER, session_id="fixed")
        with pytest.raises(Exception, match="already exists"):
            await service.create_session(app_name=APP, user_id=USER, session_id="fixed")
        await turn(runner_of(service), one.id, "one")
        loaded = await service.get_session(app_name=APP, user_id=USER, session_id=two.id)
        assert loaded is not None
        assert loaded.state == {"app:v": 1, "user:lang": "en"}
        assert await service.get_user_state(app_name=APP, user_id=USER) == {"lang": "en"}
        listed = await service.list_sessions(app_name=APP, user_id=USER)
        assert {one.id, "fixed"} <= {s.id for s in listed.sessions}
        app_id = history_app_id(APP, USER, one.id)
        assert count(env, display, display.c.app_id, app_id) > 0  # shown like any append
        await service.delete_session(app_name=APP, user_id=USER, session_id=one.id)
        assert await service.get_session(app_name=APP, user_id=USER, session_id=one.id) is None
        for table in (original, display):
            assert count(env, table, table.c.app_id, app_id) == 0
        assert count(env, adk_state, adk_state.c.session_id, one.id) == 0
        if env.cache == "redis":
            with redis_client() as client:
                assert client.exists(*app_keys(app_id)) == 0
        window = (
            await base.memory(app_id).messages() if env.is_async else base.memory(app_id).messages()
        )
        assert window == []
        await service.delete_session(app_name=APP, user_id=USER, session_id="fixed")

    env.run(scenario())


def test_a_wrapped_state_service_keeps_the_state(env: AdapterEnv) -> None:
    async def scenario() -> None:
        states = InMemorySessionService()
        service = service_of(env, state_service=states)
        session = await service.create_session(app_name=APP, user_id=USER, state={"s": 1})
        await turn(runner_of(service), session.id, "one")
        RECEIVED.clear()
        await turn(runner_of(service_of(env, state_service=states)), session.id, "two")
        assert len(call_ids(RECEIVED[0])) == 2  # the first turn's calls, from memstore
        assert_paired(RECEIVED[0])
        inner = await states.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert inner is not None and inner.state["s"] == 1
        assert all(event.content is None for event in inner.events)  # content only in memstore

    env.run(scenario())


def test_an_event_memstore_refuses_leaves_the_state_service_untouched(env: AdapterEnv) -> None:
    from memstore.errors import MessageTooLargeError

    async def scenario() -> None:
        states = InMemorySessionService()
        service = service_of(env, state_service=states)
        session = await service.create_session(app_name=APP, user_id=USER)
        too_big = "x" * (env.sync_store().settings.max_text_bytes + 1)
        event = Event(
            author="user",
            invocation_id="i-big",
            content=text(too_big),
            actions=EventActions(state_delta={"app:seen": True, "mine": 1}),
        )
        with pytest.raises(MessageTooLargeError):
            await service.append_event(session, event)
        inner = await states.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert inner is not None and inner.events == []
        assert "mine" not in inner.state and "app:seen" not in inner.state

    env.run(scenario())


def count(env: AdapterEnv, table: sa.Table, column: sa.Column[Any], value: str) -> int:
    with env.sync_store().engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(table).where(column == value)
        return int(conn.execute(query).scalar_one())


def test_closing_the_service_leaves_the_store_passed_in_open(env: AdapterEnv) -> None:
    store = env.store()

    async def scenario() -> None:
        async with MemstoreSessionService(store) as service:  # as DatabaseSessionService
            created = await service.create_session(app_name=APP, user_id=USER)
        await service.close()
        again = MemstoreSessionService(store)
        found = await again.get_session(app_name=APP, user_id=USER, session_id=created.id)
        assert found is not None and found.id == created.id

    env.run(scenario())


def test_missing_google_adk_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    module = "memstore.adapters.google_adk"
    monkeypatch.delitem(sys.modules, module, raising=False)
    for name in [n for n in sys.modules if n == "google.adk" or n.startswith("google.adk.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "google.adk", None)
    with pytest.raises(MissingExtraError) as raised:
        __import__(module)
    assert raised.value.install == "pip install 'memstore[google-adk]'"
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_concurrent_appends_to_one_loaded_session_let_one_win(env: AdapterEnv) -> None:
    async def scenario() -> None:
        created = await service_of(env).create_session(app_name=APP, user_id=USER)
        services = [service_of(env) for _ in range(4)]
        sessions = [
            await service.get_session(app_name=APP, user_id=USER, session_id=created.id)
            for service in services
        ]
        outcomes = await asyncio.gather(
            *(
                service.append_event(session, Event(author="user", content=text(f"hi {i}")))
                for i, (service, session) in enumerate(zip(services, sessions, strict=True))
            ),
            return_exceptions=True,
        )
        assert sum(isinstance(o, StaleSessionError) for o in outcomes) == len(services) - 1
        stored = await service_of(env).get_session(
            app_name=APP, user_id=USER, session_id=created.id
        )
        assert stored is not None and len(stored.events) == 1

    env.run(scenario())


def test_an_operator_purge_removes_the_session(env: AdapterEnv) -> None:
    """``memstore purge APP`` on a session's history app removes the session row too, so
    ADK never gets a session whose events are gone."""

    async def scenario() -> None:
        service = MemstoreSessionService(env.store())
        session = await service.create_session(app_name=APP, user_id=USER)
        await turn(runner_of(service), session.id, "one")
        env.sync_store().purge(history_app_id(APP, USER, session.id))
        fresh = MemstoreSessionService(env.store())
        assert await fresh.get_session(app_name=APP, user_id=USER, session_id=session.id) is None
        assert count(env, adk_state, adk_state.c.session_id, session.id) == 0

    env.run(scenario())


def test_a_tool_response_holding_datetimes_decimals_and_bytes_is_stored(env: AdapterEnv) -> None:
    """What ADK's own services store (the event's JSON form), not a builtin TypeError."""
    import datetime
    import decimal

    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        call = Event(
            author="calc",
            invocation_id="i-1",
            content=types.Content(
                role="model",
                parts=[types.Part(function_call=types.FunctionCall(id="t1", name="now", args={}))],
            ),
        )
        body = {"at": datetime.datetime(2026, 1, 2, 3, 4, 5), "n": decimal.Decimal("1.50")}
        body["raw"] = b"\xff\x00"
        answer = Event(
            author="calc",
            invocation_id="i-1",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(id="t1", name="now", response=body)
                    )
                ],
            ),
        )
        await service.append_event(session, call)
        await service.append_event(session, answer)
        sync = env.sync_store()
        result = sync.load_window(history_app_id(APP, USER, session.id))[-1]
        assert result.text == '{"at":"2026-01-02T03:04:05","n":"1.50","raw":"_wA="}'
        stored = await service_of(env).get_session(
            app_name=APP, user_id=USER, session_id=session.id
        )
        assert stored is not None
        kept = stored.events[-1].content.parts[0].function_response  # type: ignore[union-attr,index]
        assert kept is not None and kept.response == {
            "at": "2026-01-02T03:04:05",
            "n": "1.50",
            "raw": "_wA=",
        }

    env.run(scenario())


def test_parallel_calls_sharing_one_call_id_are_kept(env: AdapterEnv) -> None:
    """Some OpenAI-compatible servers send ``call_0`` for every parallel call: the events are
    stored and come back as they were (memstore's window answers the first by id)."""

    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        calls = [
            types.Part(function_call=types.FunctionCall(id="call_0", name="add", args={"a": n}))
            for n in (1, 2)
        ]
        answers = [
            types.Part(
                function_response=types.FunctionResponse(
                    id="call_0", name="add", response={"result": n}
                )
            )
            for n in (1, 2)
        ]
        events = [
            Event(
                author="calc", invocation_id="i", content=types.Content(role="model", parts=calls)
            ),
            Event(
                author="calc", invocation_id="i", content=types.Content(role="user", parts=answers)
            ),
        ]
        for event in events:
            await service.append_event(session, event)
        stored = await service_of(env).get_session(
            app_name=APP, user_id=USER, session_id=session.id
        )
        assert stored is not None
        assert [e.model_dump() for e in stored.events] == [e.model_dump() for e in events]

    env.run(scenario())


def test_concurrent_appends_keep_every_app_and_user_state_key(env: AdapterEnv) -> None:
    """16 sessions of one new app and user are created (with state) and appended to at once,
    each with its own app: and user: keys: every key is kept (the state rows are created
    without a race and merged under a row lock)."""
    if env.db == "sqlite" and env.flavor == "async":
        pytest.skip("one writer at a time on SQLite: the sync run covers it")
    from concurrent.futures import ThreadPoolExecutor

    app = f"conc-{uuid.uuid4().hex[:6]}"

    async def one(n: int) -> None:
        service = service_of(env)
        session = await service.create_session(
            app_name=app, user_id=USER, state={f"app:c{n}": n, f"user:c{n}": n}
        )
        delta = {f"app:k{n}": n, f"user:k{n}": n, f"own{n}": n}
        event = Event(author="calc", invocation_id=f"i{n}", actions=EventActions(state_delta=delta))
        await service.append_event(session, event)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda n: asyncio.run(one(n)), range(16)))

    async def check() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=app, user_id=USER)
        for scope in ("app", "user"):
            assert {k for k in session.state if k.startswith(f"{scope}:")} == {
                f"{scope}:{kind}{n}" for n in range(16) for kind in ("c", "k")
            }

    env.run(check())


def summarize(messages: list[Any]) -> str:
    return f"SUMMARY of {len(messages)}"


def test_a_compacted_session_opens_with_the_summary_as_a_compaction_event(
    env: AdapterEnv,
) -> None:
    """Issue 4: after a compaction the summary was dropped and ``num_recent_events`` gave only
    the kept events, with no trace of the rest. Now it is ADK's compaction event, followed by
    the kept events, with and without ``num_recent_events``, and the model gets it."""

    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        for prompt in ("one", "two", "three"):  # 4 events a turn: 12 events
            await turn(runner_of(service), session.id, prompt)
        before = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert before is not None and len(before.events) == 12
        # keeps the third turn: its user row, the call row, its 2 results, the reply
        report = env.sync_store().compact(
            history_app_id(APP, USER, session.id), summarize, keep_last_messages=5
        )
        assert report.compacted and report.kept_messages == 5
        covered, kept = before.events[:8], before.events[8:]

        fresh = service_of(env)
        whole = await fresh.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert whole is not None and len(whole.events) == 5
        lead = whole.events[0]
        compaction = lead.actions.compaction
        assert compaction is not None and lead.content is None
        assert compaction.compacted_content.parts is not None
        assert compaction.compacted_content.parts[0].text == "SUMMARY of 10"
        assert compaction.start_timestamp == covered[0].timestamp
        assert compaction.end_timestamp == lead.timestamp == covered[-1].timestamp
        assert [e.model_dump() for e in whole.events[1:]] == [e.model_dump() for e in kept]

        for n in range(1, 8):
            config = GetSessionConfig(num_recent_events=n)
            window = await fresh.get_session(
                app_name=APP, user_id=USER, session_id=session.id, config=config
            )
            assert window is not None
            assert_paired(window.events)
            assert len(window.events) >= min(n, 5)
            assert window.events == whole.events[len(whole.events) - len(window.events) :]
            if n >= 5:  # it reaches back to the summary
                assert window.events[0] == lead

        RECEIVED.clear()
        await turn(runner_of(fresh), session.id, "four")
        request = RECEIVED[0]
        assert_paired(request)
        texts = [part.text for content in request for part in content.parts or [] if part.text]
        assert texts[0] == "SUMMARY of 10"
        assert "one" not in texts and "two" not in texts and "three" in texts

    env.run(scenario())


def test_a_second_compaction_chains_and_exclude_leaves_the_summary_out(env: AdapterEnv) -> None:
    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        appended: list[Event] = []
        for i in range(6):
            event = Event(author="user" if i % 2 == 0 else "calc", content=text(f"m{i}"))
            appended.append(await service.append_event(session, event))
        app_id = history_app_id(APP, USER, session.id)
        sync = env.sync_store()
        assert sync.compact(app_id, summarize, keep_last_messages=4).compacted
        assert sync.compact(app_id, summarize, keep_last_messages=2).compacted
        for config in (None, GetSessionConfig(num_recent_events=3)):
            got = await service_of(env).get_session(
                app_name=APP, user_id=USER, session_id=session.id, config=config
            )
            assert got is not None
            compaction = got.events[0].actions.compaction
            assert compaction is not None and compaction.compacted_content.parts is not None
            assert compaction.compacted_content.parts[0].text == "SUMMARY of 3"  # 1 + 2 rows
            assert compaction.start_timestamp == appended[0].timestamp  # the chain's start
            assert compaction.end_timestamp == appended[3].timestamp
            assert [e.id for e in got.events[1:]] == [e.id for e in appended[4:]]

        excluding = MemoryStore(env.settings().model_copy(update={"summary_role": "exclude"}))
        try:
            for config in (None, GetSessionConfig(num_recent_events=3)):
                got = await MemstoreSessionService(excluding).get_session(
                    app_name=APP, user_id=USER, session_id=session.id, config=config
                )
                assert got is not None
                assert [e.id for e in got.events] == [e.id for e in appended[4:]]
        finally:
            excluding.close()

    env.run(scenario())


def test_purge_by_user_erases_the_users_adk_state(env: AdapterEnv) -> None:
    """``memstore purge --user-id`` erases the user's ``user:`` and session state with the
    rows; the app state and the other users' state stay."""
    from memstore.operations import purge_user

    app = f"erase-{uuid.uuid4().hex[:6]}"
    gone, kept = f"gone-{uuid.uuid4().hex[:6]}", f"kept-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        service = MemstoreSessionService(env.store())
        for user in (gone, kept):
            await service.create_session(
                app_name=app,
                user_id=user,
                session_id="s1",
                state={"app:shared": 1, "user:address": f"{user} street", "notes": "private"},
            )
            await service.append_event(
                await service.get_session(app_name=app, user_id=user, session_id="s1"),  # type: ignore[arg-type]
                Event(
                    author="user",
                    content=types.Content(role="user", parts=[types.Part(text="my secret")]),
                ),
            )
        purge_user(env.sync_store(), gone)
        fresh = MemstoreSessionService(env.store())
        assert await fresh.get_session(app_name=app, user_id=gone, session_id="s1") is None
        assert await fresh.get_user_state(app_name=app, user_id=gone) == {}
        other = await fresh.get_session(app_name=app, user_id=kept, session_id="s1")
        assert other is not None
        assert other.state == {
            "app:shared": 1,
            "user:address": f"{kept} street",
            "notes": "private",
        }
        assert [e.content.parts[0].text for e in other.events] == ["my secret"]  # type: ignore[union-attr,index]
        with env.sync_store().engine.connect() as conn:
            left = conn.execute(
                sa.select(sa.func.count()).select_from(adk_state).where(adk_state.c.user_id == gone)
            ).scalar_one()
        assert left == 0
        await fresh.delete_session(app_name=app, user_id=kept, session_id="s1")

    env.run(scenario())
