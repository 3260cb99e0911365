"""Google ADK: the same scenarios on ADK's own session services and on memstore.

Each scenario is written once, as a coroutine that drives a :class:`Backend` and returns what a
caller of a ``BaseSessionService`` can observe (plain data: events dumped to JSON, states,
session ids, error class names). The test runs it on ADK's ``InMemorySessionService``, on its
``DatabaseSessionService`` (SQLite through aiosqlite, in ``tmp_path``) and on
:class:`~memstore.adapters.google_adk.MemstoreSessionService` (every database, both store
flavours, Redis where cached), and asserts that the three results are equal. Where memstore
differs, the difference is declared once, in :data:`KNOWN_DIFFERENCES` (the list under "Known
differences" in docs/integrations/google-adk.md), and asserted, never skipped: either the two
references agree and memstore's raw result must differ from theirs and equal it once that
difference's normaliser is applied, or the references disagree and memstore's result must be
the one of the reference it follows.

A "restart" is a new service object on new storage objects reading what the old one wrote:
a new ``DatabaseSessionService`` on the same file, a new memstore store (``env.store()``). The
in-memory service keeps everything in its one object, so it hands out that object again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")
pytest.importorskip("aiosqlite")

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.sessions import DatabaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.session import Session
from google.genai import types

from memstore.adapters.google_adk import INTERRUPTED_EVENT_PREFIX, MemstoreSessionService
from tests.adapters.conftest import AdapterEnv

T0 = 1_767_225_600.0
"""The scenarios' clock (2026-01-01): event ``i`` is stamped ``T0 + i``."""

USER = "u1"


@dataclass
class Backend:
    """One side of the comparison: ``open()`` gives a service object on the backend's storage
    (each call a restart, except for the in-memory service, which hands out its one object);
    ``app`` is this run's app name (unique: memstore's databases are shared by concurrent test
    processes; results never hold it)."""

    name: str
    make: Callable[[], BaseSessionService]
    app: str = field(default_factory=lambda: f"adk-diff-{uuid.uuid4().hex}")
    opened: list[BaseSessionService] = field(default_factory=list)

    def open(self) -> BaseSessionService:
        self.opened.append(self.make())
        return self.opened[-1]

    async def close(self) -> None:
        for service in self.opened:
            if isinstance(service, (DatabaseSessionService, MemstoreSessionService)):
                await service.close()


def text_event(i: int, value: str | None = None, author: str = "user", **kwargs: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        id=f"e{i}",
        invocation_id=f"inv{i}",
        author=author,
        timestamp=T0 + i,
        content=types.Content(role=role, parts=[types.Part(text=value or f"m{i}")]),
        **kwargs,
    )


def call_event(i: int, *call_ids: str) -> Event:
    calls = [
        types.Part(function_call=types.FunctionCall(id=c, name="add", args={"a": i, "b": 1}))
        for c in call_ids
    ]
    return Event(
        id=f"e{i}",
        invocation_id=f"inv{i}",
        author="calc",
        timestamp=T0 + i,
        content=types.Content(role="model", parts=calls),
    )


def response_event(i: int, *call_ids: str) -> Event:
    responses = [
        types.Part(function_response=types.FunctionResponse(id=c, name="add", response={"sum": i}))
        for c in call_ids
    ]
    return Event(
        id=f"e{i}",
        invocation_id=f"inv{i}",
        author="calc",
        timestamp=T0 + i,
        content=types.Content(role="user", parts=responses),
    )


def dumped(events: list[Event]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json", exclude_none=True) for event in events]


def ids(session: Session | None) -> list[str] | None:
    return None if session is None else [event.id for event in session.events]


async def outcome(call: Awaitable[Any]) -> str:
    """``ok`` or the class name of what the call raised."""
    try:
        await call
    except Exception as error:  # the class is the observable result
        return type(error).__name__
    return "ok"


async def appended(service: BaseSessionService, session: Session, *events: Event) -> None:
    for event in events:
        await service.append_event(session, event)


async def fresh(b: Backend, session_id: str = "s1") -> tuple[BaseSessionService, Session]:
    service = b.open()
    return service, await service.create_session(
        app_name=b.app, user_id=USER, session_id=session_id
    )


async def reread(
    b: Backend, session_id: str = "s1", config: GetSessionConfig | None = None
) -> Session | None:
    """The session as a restarted service reads it."""
    return await b.open().get_session(
        app_name=b.app, user_id=USER, session_id=session_id, config=config
    )


# -- scenarios ------------------------------------------------------------------------------------


async def ordering_and_fidelity(b: Backend) -> Any:
    """Events come back in append order, each equal to the appended one (every field)."""
    service, session = await fresh(b)
    events = [
        text_event(1, "hello"),
        text_event(
            2,
            "hi",
            author="calc",
            turn_complete=True,
            custom_metadata={"k": [1, "two"]},
            usage_metadata=types.GenerateContentResponseUsageMetadata(total_token_count=3),
        ),
        text_event(3, "again", actions=EventActions(state_delta={"sk": 1}, escalate=True)),
        text_event(4, "bye", author="calc", branch="calc.sub", error_code="E1"),
        text_event(
            5,
            "every field",
            author="calc",
            interrupted=True,
            error_message="boom",
            long_running_tool_ids={"t1"},
            grounding_metadata=types.GroundingMetadata(web_search_queries=["q"]),
            input_transcription=types.Transcription(text="in", finished=True),
            actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="other"),
        ),
    ]
    await appended(service, session, *events)
    got = await reread(b)
    assert got is not None
    return {"in_session": dumped(session.events), "reread": dumped(got.events)}


async def recent_and_after(b: Backend) -> Any:
    """``num_recent_events`` and ``after_timestamp``, alone and together (text events)."""
    service, session = await fresh(b)
    await appended(service, session, *[text_event(i) for i in range(1, 6)])
    restarted = b.open()
    out: dict[str, Any] = {}
    for n in (None, 0, 1, 3, 5, 9):
        for after in (None, T0 + 4, T0 + 50):
            config = GetSessionConfig(num_recent_events=n, after_timestamp=after)
            got = await restarted.get_session(
                app_name=b.app, user_id=USER, session_id="s1", config=config
            )
            out[f"{n}/{after}"] = ids(got)
    return out


async def recent_cuts_a_tool_group(b: Backend) -> Any:
    """``num_recent_events`` that would start between a call and its response."""
    service, session = await fresh(b)
    await appended(
        service,
        session,
        text_event(1),
        call_event(2, "c1", "c2"),
        response_event(3, "c1", "c2"),
        text_event(4, author="calc"),
    )
    return {n: ids(await reread(b, config=GetSessionConfig(num_recent_events=n))) for n in (1, 2)}


async def unanswered_call(b: Backend) -> Any:
    """A call whose response was never appended (a run killed mid-tool), then a new turn."""
    service, session = await fresh(b)
    await appended(service, session, text_event(1), call_event(2, "c1"), text_event(3, "more"))
    got = await reread(b)
    assert got is not None
    return dumped(got.events)


async def state_scopes(b: Backend) -> Any:
    """Session, user, app and temp state: who sees what, from create and from event deltas."""
    service, one = await fresh(b)
    await service.create_session(
        app_name=b.app, user_id=USER, session_id="s0", state={"app:a0": 0, "user:u0": 0, "x": 0}
    )
    delta = {"app:a1": 1, "user:u1": {"n": [1]}, "temp:t": "gone", "s1": "own", "x": 1}
    await appended(service, one, text_event(1, actions=EventActions(state_delta=delta)))
    other = await service.create_session(app_name=b.app, user_id="u2", session_id="s2")
    mine = await service.create_session(app_name=b.app, user_id=USER, session_id="s3")
    got, s0 = await reread(b), await reread(b, "s0")
    assert got is not None
    return {
        "in_session": dict(one.state),
        "reread": dict(got.state),
        "event_delta": dict(got.events[0].actions.state_delta),
        "other_user": dict(other.state),
        "same_user": dict(mine.state),
        "user_state": await b.open().get_user_state(app_name=b.app, user_id=USER),
        "s0": None if s0 is None else dict(s0.state),
    }


async def sessions_list_and_delete(b: Backend) -> Any:
    """Listing (per user, all users; no events, own state), duplicates, delete, missing."""
    service = b.open()
    for user, sid in ((USER, "s1"), (USER, "s2"), ("u2", "s3")):
        await service.create_session(app_name=b.app, user_id=user, session_id=sid, state={"k": sid})
    s1 = await service.get_session(app_name=b.app, user_id=USER, session_id="s1")
    assert s1 is not None
    await appended(service, s1, text_event(1))
    duplicate = await outcome(service.create_session(app_name=b.app, user_id=USER, session_id="s1"))
    wrong_user = await service.get_session(app_name=b.app, user_id="u2", session_id="s1")

    async def listing(user: str | None) -> list[tuple[str, str, Any, int]]:
        response = await b.open().list_sessions(app_name=b.app, user_id=user)
        return sorted((s.id, s.user_id, s.state, len(s.events)) for s in response.sessions)

    before = {"u1": await listing(USER), "all": await listing(None)}
    # the same session id for another user is another session
    await service.create_session(app_name=b.app, user_id="u2", session_id="s1")
    await service.delete_session(app_name=b.app, user_id=USER, session_id="s1")
    other = await b.open().get_session(app_name=b.app, user_id="u2", session_id="s1")
    missing_delete = await outcome(
        service.delete_session(app_name=b.app, user_id=USER, session_id="nope")
    )
    return {
        "duplicate": duplicate,
        "wrong_user": wrong_user is None,
        "before": before,
        "after": await listing(None),
        "deleted": await reread(b) is None,
        "missing_get": await reread(b, "nope") is None,
        "missing_delete": missing_delete,
        "other_user_same_id": None if other is None else (other.user_id, ids(other)),
    }


async def restart_and_continue(b: Backend) -> Any:
    """A restarted service continues a session another one wrote; a third reads both."""
    service, session = await fresh(b)
    state = {"user:n": 1, "n": 1}
    await appended(service, session, text_event(1, actions=EventActions(state_delta=state)))
    restarted = b.open()
    again = await restarted.get_session(app_name=b.app, user_id=USER, session_id="s1")
    assert again is not None
    more = {"user:n": 2, "app:m": 2}
    later = text_event(3, actions=EventActions(state_delta=more))
    await appended(restarted, again, text_event(2, author="calc"), later)
    got = await reread(b)
    assert got is not None
    return {"events": dumped(got.events), "state": got.state, "in_session": again.state}


async def stale_session(b: Backend) -> Any:
    """An append on a session object loaded before another append."""
    service, _ = await fresh(b)
    first = await service.get_session(app_name=b.app, user_id=USER, session_id="s1")
    second = await b.open().get_session(app_name=b.app, user_id=USER, session_id="s1")
    assert first is not None and second is not None
    await appended(service, first, text_event(1, actions=EventActions(state_delta={"a": 1})))
    late = text_event(2, actions=EventActions(state_delta={"b": 2}))
    stale = await outcome(b.open().append_event(second, late))
    got = await reread(b)
    assert got is not None
    return {"stale": stale, "events": ids(got), "state": dict(got.state)}


async def concurrent_appends(b: Backend) -> Any:
    """Appends in flight at once: on sessions of one user (user and app state merge), and on
    one session object (each append sees the one before it)."""
    service = b.open()
    sessions = [
        await service.create_session(app_name=b.app, user_id=USER, session_id=f"s{i}")
        for i in range(4)
    ]
    await asyncio.gather(
        *(
            service.append_event(
                s,
                text_event(i, actions=EventActions(state_delta={f"user:k{i}": i, f"app:a{i}": i})),
            )
            for i, s in enumerate(sessions)
        )
    )
    one = sessions[0]
    outcomes = await asyncio.gather(
        *(outcome(service.append_event(one, text_event(i))) for i in range(10, 14))
    )
    got = await reread(b, "s0")
    assert got is not None
    return {"outcomes": outcomes, "events": ids(got), "in_session": ids(one), "state": got.state}


async def payloads(b: Backend) -> Any:
    """Large text, unicode, bytes, and tool arguments and responses JSON alone cannot hold."""
    service, session = await fresh(b)
    big = "x" * 300_000
    odd = "héllo wörld ✓ 日本語 עברית 🎉👩‍👩‍👧 \u200b e\u0301 \\ \" ' \t\n end"
    blob = types.Part.from_bytes(data=bytes(range(256)), mime_type="application/octet-stream")
    call = types.FunctionCall(id="c1", name="add", args={"big": big, "odd": odd, "n": 1.5})
    response = types.FunctionResponse(
        id="c1", name="add", response={"nested": {"list": [odd, None, True]}, "f": 1e-9}
    )
    events = [
        text_event(1, big),
        text_event(2, odd, author="calc"),
        Event(
            id="e3",
            invocation_id="inv3",
            author="user",
            timestamp=T0 + 3,
            content=types.Content(role="user", parts=[types.Part(text="see"), blob]),
        ),
        Event(
            id="e4",
            invocation_id="inv4",
            author="calc",
            timestamp=T0 + 4,
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        ),
        Event(
            id="e5",
            invocation_id="inv5",
            author="calc",
            timestamp=T0 + 5,
            content=types.Content(role="user", parts=[types.Part(function_response=response)]),
        ),
    ]
    await appended(service, session, *events)
    got = await reread(b)
    assert got is not None
    return dumped(got.events)


async def non_json_state(b: Backend) -> Any:
    """State values JSON cannot hold (datetimes, decimals, bytes, sets), from create and from
    an event's delta, read back after a restart."""
    service = b.open()
    when = datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=timezone.utc)
    session = await service.create_session(
        app_name=b.app, user_id=USER, session_id="s1", state={"when": when, "user:tags": {"a"}}
    )
    delta = {"price": Decimal("1.50"), "raw": b"xy", "app:day": when.date()}
    await appended(service, session, text_event(1, actions=EventActions(state_delta=delta)))
    got = await reread(b)
    assert got is not None
    return {
        "reread": dict(got.state),
        "event_delta": dumped(got.events)[0]["actions"]["state_delta"],
    }


async def partial_temp_and_timestamps(b: Backend) -> Any:
    """Partial events are not stored; ``last_update_time`` follows the appended event."""
    service, session = await fresh(b)
    await service.append_event(session, text_event(1, partial=True))
    await service.append_event(
        session, text_event(2, actions=EventActions(state_delta={"temp:x": 1}))
    )
    got = await reread(b)
    assert got is not None
    return {
        "events": ids(got),
        "in_session": ids(session),
        "last_update": (session.last_update_time, got.last_update_time),
        "temp_in_delta": [dict(e.actions.state_delta) for e in got.events],
    }


async def adk_compaction_round_trip(b: Backend) -> Any:
    """A compaction event ADK's own summarizer appends comes back as it went in."""
    service, session = await fresh(b)
    compaction = EventCompaction(
        start_timestamp=T0 + 1,
        end_timestamp=T0 + 2,
        compacted_content=types.Content(role="model", parts=[types.Part(text="summary")]),
    )
    await appended(
        service,
        session,
        text_event(1),
        text_event(2, author="calc"),
        Event(
            id="e3",
            invocation_id="inv3",
            author="user",
            timestamp=T0 + 3,
            actions=EventActions(compaction=compaction),
        ),
        text_event(4),
    )
    got = await reread(b)
    window = await reread(b, config=GetSessionConfig(num_recent_events=2))
    assert got is not None
    return {"all": dumped(got.events), "recent": ids(window)}


SCENARIOS: dict[str, Callable[[Backend], Awaitable[Any]]] = {
    f.__name__: f
    for f in (
        ordering_and_fidelity,
        recent_and_after,
        recent_cuts_a_tool_group,
        unanswered_call,
        state_scopes,
        sessions_list_and_delete,
        restart_and_continue,
        stale_session,
        concurrent_appends,
        payloads,
        non_json_state,
        partial_temp_and_timestamps,
        adk_compaction_round_trip,
    )
}


# -- deliberate differences: the one place they are declared ----------------------------------


def _without_edge_widening(result: Any) -> Any:
    """memstore's window never starts inside a call / response pair: a window that would start
    at the response event also holds the call event before it."""
    return {
        n: events[1:] if events and events[0] == "e2" else events for n, events in result.items()
    }


def _without_interrupted_answers(result: Any) -> Any:
    """memstore answers a call whose response was never stored with a synthetic error
    response event (id ``memstore-interrupted-<call id>``), right after the call."""
    return [e for e in result if not str(e.get("id", "")).startswith(INTERRUPTED_EVENT_PREFIX)]


@dataclass(frozen=True)
class Difference:
    """Why memstore's result differs from a reference's, and how."""

    reason: str
    normalise: Callable[[Any], Any] | None = None
    """Turns memstore's result into the references' (both agree)."""
    follows: str | None = None
    """The references disagree; memstore's result is this one's."""
    deterministic: bool = True
    """The other reference's result is always different (not a race it may win)."""


KNOWN_DIFFERENCES: dict[str, Difference] = {
    "recent_cuts_a_tool_group": Difference(
        "num_recent_events never starts between a function call and its response: the window "
        "reaching back to a response event also holds the call event (the edge check)",
        normalise=_without_edge_widening,
    ),
    "unanswered_call": Difference(
        "a function call whose response was never stored is answered by a synthetic error "
        "response event (id memstore-interrupted-<call id>) right after it",
        normalise=_without_interrupted_answers,
    ),
    "stale_session": Difference(
        "an append on a session object loaded before another append raises StaleSessionError "
        "and writes nothing, as DatabaseSessionService does; InMemorySessionService accepts it",
        follows="database",
    ),
    "non_json_state": Difference(
        "state values JSON cannot hold are stored in their JSON form (ISO dates, decimals as "
        "strings, sets as lists), as DatabaseSessionService stores them; InMemorySessionService "
        "keeps the objects",
        follows="database",
    ),
    "concurrent_appends": Difference(
        "concurrent appends on sessions of one user keep every app and user state key, as "
        "InMemorySessionService does; DatabaseSessionService (SQLite) can lose some of them",
        follows="in_memory",
        deterministic=False,
    ),
}
"""Scenario -> how memstore differs (the "Known differences" of docs/integrations/google-adk.md)."""


# -- the test -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_memstore_matches_adk_session_services(
    scenario: str, env: AdapterEnv, tmp_path: Path
) -> None:
    run = SCENARIOS[scenario]
    in_memory = InMemorySessionService()
    url = f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}"
    backends = [
        Backend("in_memory", lambda: in_memory),
        Backend("database", lambda: DatabaseSessionService(url)),
        Backend("memstore", lambda: MemstoreSessionService(env.store())),
    ]

    async def everything() -> list[Any]:
        try:
            return [await run(backend) for backend in backends]
        finally:
            for backend in backends:
                await backend.close()

    in_memory_result, database_result, memstore_result = env.run(everything())
    results = {"in_memory": in_memory_result, "database": database_result}
    difference = KNOWN_DIFFERENCES.get(scenario)
    if difference is not None and difference.follows is not None:
        other = "database" if difference.follows == "in_memory" else "in_memory"
        if difference.deterministic:
            assert results[other] != results[difference.follows], f"{scenario}: they agree now"
        assert memstore_result == results[difference.follows]
        return
    assert database_result == in_memory_result
    if difference is not None and difference.normalise is not None:
        assert memstore_result != in_memory_result, f"{scenario}: the difference is gone"
        memstore_result = difference.normalise(memstore_result)
    assert memstore_result == in_memory_result
