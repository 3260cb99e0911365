"""Google ADK session service on memstore: ``pip install 'memstore[google-adk]'``.

The one-line switch (instead of ``DatabaseSessionService(db_url)``)::

    session_service = MemstoreSessionService(store)   # a MemoryStore or an AsyncMemoryStore
    runner = Runner(agent=agent, app_name="weather", session_service=session_service)

Each session's events are rows of the original history under an app id of their own
(``adk-<digest of app name, user id, session id>``), so the window, the loader's edge check,
``memstore check`` and the display history see them like any other conversation:

* an event with function calls -> one AI row (its text parts as text, each call a tool request,
  arguments as canonical JSON; its thought parts and thought signatures as
  :class:`~memstore.messages.Reasoning` parts of provider ``google``, a call's signature placed
  before that call);
* an event with function responses -> one tool result per response (the response as JSON,
  ``is_error`` when it has an ``error`` key);
* a text event -> a user message (author ``user``) or an AI message;
* anything else (state-only events, transfers, thoughts only...) -> an opaque row.

Every row carries its event (all fields but the content parts) and its own parts in
``metadata["google_adk"]``, so ``get_session`` returns events equal to the appended ones.

``get_session(config=GetSessionConfig(num_recent_events=n))`` returns the latest ``n`` events
of the edge-checked window (memstore's loader, widened until it holds ``n`` events): it never
starts inside a function call / response pair, so it may hold more than ``n`` events. A call
whose response was never stored (a run killed mid-tool) is answered by a synthetic error
response event (author and invocation of the call), except calls the event marks
long-running, which ADK resumes itself.
``after_timestamp`` is applied to the events of that window.

After a compaction (:meth:`memstore.ChatMemory.compact` on the session's history app id, see
``history_app_id``) the events are the summary, as ADK represents one (an event whose
``actions.compaction`` holds the summary text as ``compacted_content`` and the timestamps of
the first and last covered events; its own timestamp is the last one's, no ``content``),
followed by the events after the range it covers, with and without ``num_recent_events`` (the
summary counts as one event). ADK's prompt assembly puts the summary where the covered events
were. With the ``summary_role`` setting ``"exclude"`` the summary event is left out too. The
covered events stay in the database (``memstore show --original``, export).

State lives in memstore's ``adk_state`` table (migration 0004): app state, user state and
session state, one JSON row each. Each session row has a revision: ``append_event`` on a
session object loaded before another append raises ADK's ``StaleSessionError`` and writes
nothing. ``delete_session`` removes the session row and purges its events from both histories
and the cached window. With ``state_service`` (any ADK ``BaseSessionService``) the sessions and
their state live there instead: events are appended to it without their content (their state
deltas and actions only), so its own stale check guards the appends, and memstore keeps the
content.

All work runs in a worker thread on a synchronous store (an ``AsyncMemoryStore``'s twin, see
:mod:`memstore.adapters._history`), one transaction per append.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from memstore.extras import missing_extra

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions, EventCompaction
    from google.adk.sessions import _session_util
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
    from google.genai import types
except ImportError as error:
    raise missing_extra(__name__, "google-adk", error) from error

from memstore.adapters._history import (
    Store,
    StoreAccess,
    app_transaction,
    distinct_requests,
    insert_messages,
    opaque,
)
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_user_id
from memstore.core.metadata import thaw
from memstore.core.plans import plan_write
from memstore.core.reasoning import GOOGLE, THOUGHT, THOUGHT_SIGNATURE
from memstore.core.rows import SUMMARY
from memstore.core.summary import (
    SUMMARY_MARK,
    SummaryInfo,
    is_summary,
    summary_info,
    window_summary,
)
from memstore.core.window import is_synthetic, select_window
from memstore.errors import InvalidAppIdError, UnknownToolCallError
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest, ToolResult, UserMessage
from memstore.seams import adk_update_marker, set_adk_update_marker
from memstore.shielding import finish
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import in_app, newest_first, purge_statements, rows_to_messages
from memstore.sql.schema import adk_state, original
from memstore.store import MemoryStore

ADK_KEY = "google_adk"
"""The ``metadata`` key holding a row's event fields and its content parts."""

INTERRUPTED_EVENT_PREFIX = "memstore-interrupted-"
"""Event id prefix of the synthetic responses of calls whose response was never stored."""

SUMMARY_EVENT_PREFIX = "memstore-summary-"
"""Event id prefix of the compaction events made of memstore's summaries (then the row id)."""

__all__ = ["ADK_KEY", "MemstoreSessionService", "event_to_messages", "messages_to_events"]

_WHOLE = 2**31
"""A window size no session reaches: the edge check over every row."""


def history_app_id(app_name: str, user_id: str, session_id: str) -> str:
    """The memstore app id of a session's events."""
    digest = hashlib.sha256(json.dumps([app_name, user_id, session_id]).encode()).hexdigest()
    return f"adk-{digest[:48]}"


# -- events <-> canonical rows ---------------------------------------------------------------------


def _dumped(parts: list[Any], index: int, kind: str, field: str) -> Any:
    """A part's field as ADK serializes the event (``model_dump(mode="json")``: datetimes,
    decimals and bytes as strings), so what memstore stores is what ADK's own services store."""
    part = parts[index] if 0 <= index < len(parts) else None
    value = part.get(kind) if isinstance(part, dict) else None
    return value.get(field) if isinstance(value, dict) else None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _thoughts(parts: Sequence[types.Part], call_ids: Sequence[str] = ()) -> list[Reasoning]:
    """An event's Gemini reasoning, in order: thought parts (summary text, signature) and the
    thought signatures of function-call and text parts (a call's placed before that call). A
    thought after text or a call is placed before the next of ``call_ids`` (the AI row's
    requests); with none, everything stays at the head."""
    out: list[Reasoning] = []
    unplaced: list[int] = []
    seen_output = False
    for part in parts:
        signature = (
            base64.urlsafe_b64encode(part.thought_signature).decode("ascii")
            if part.thought_signature
            else None
        )
        call = part.function_call
        if part.thought:
            if part.text or signature:
                out.append(
                    Reasoning(
                        provider=GOOGLE, kind=THOUGHT, text=part.text or None, signature=signature
                    )
                )
                if seen_output:
                    unplaced.append(len(out) - 1)
            continue
        if call is not None and call.id in call_ids:
            for position in unplaced:
                out[position] = out[position].model_copy(update={"before_call": call.id})
            unplaced = []
            if signature:
                out.append(
                    Reasoning(
                        provider=GOOGLE,
                        kind=THOUGHT_SIGNATURE,
                        signature=signature,
                        before_call=call.id,
                    )
                )
        elif signature and part.text:
            out.append(Reasoning(provider=GOOGLE, kind=THOUGHT_SIGNATURE, signature=signature))
        seen_output = seen_output or call is not None or bool(part.text)
    return out


def event_to_messages(event: Event) -> list[Message]:
    """The canonical rows of one event, each carrying its parts in ``metadata``."""
    data = event.model_dump(mode="json", exclude_none=True)
    content = data.get("content")
    parts: list[Any] = content.pop("parts", []) if isinstance(content, dict) else []
    live = event.content.parts if event.content is not None and event.content.parts else []

    def meta(indexes: Sequence[int]) -> dict[str, Any]:
        return {ADK_KEY: {"event": data, "parts": [[i, parts[i]] for i in indexes]}}

    every = list(range(len(parts)))
    texts = [p.text for p in live if p.text and not p.thought]
    calls = [(i, p.function_call) for i, p in enumerate(live) if p.function_call is not None]
    responses = [
        (i, p.function_response) for i, p in enumerate(live) if p.function_response is not None
    ]
    if calls and all(call.id and call.name for _, call in calls):
        requests = distinct_requests(
            ToolRequest(
                id=call.id or "",
                name=call.name or "",
                arguments=_canonical(_dumped(parts, index, "function_call", "args") or {}),
            )
            for index, call in calls
        )
        return [
            AiMessage(
                text="".join(texts) or None,
                tool_requests=requests,
                reasoning=_thoughts(live, [request.id for request in requests]),
                metadata=meta(every),
            )
        ]
    if responses and all(response.id and response.name for _, response in responses):
        # one row per call id: a response repeating an id (parallel calls that share one)
        # rides in the first one's parts, so the event still comes back whole
        carried: dict[str, list[int]] = {}
        firsts: list[tuple[int, Any]] = []
        for index, response in responses:
            if response.id in carried:
                carried[response.id or ""].append(index)
            else:
                carried[response.id or ""] = []
                firsts.append((index, response))
        others = [i for i in every if i not in {index for index, _ in responses}]
        rows: list[Message] = []
        for n, (index, response) in enumerate(firsts):
            body = _dumped(parts, index, "function_response", "response") or {}
            own = [index, *carried[response.id or ""], *(others if n == 0 else [])]
            rows.append(
                ToolResult(
                    id=response.id or "",
                    tool_name=response.name or "",
                    text=_canonical(body),
                    is_error="error" in body,
                    metadata=meta(sorted(own)),
                )
            )
        return rows
    if texts:
        if event.author == "user":
            return [UserMessage(text="".join(texts), metadata=meta(every))]
        return [AiMessage(text="".join(texts), reasoning=_thoughts(live), metadata=meta(every))]
    return [opaque(meta(every))]


def _latest_events(events: list[Event], count: int) -> list[Event]:
    """The latest ``count`` events, reaching back as far as needed so that no function
    response comes without the event of its call (as the window never starts inside a
    call / response pair)."""
    start = max(0, len(events) - count)
    called: set[str] = set()
    answered: set[str] = set()

    def take(event: Event) -> None:
        called.update(call.id for call in event.get_function_calls() if call.id)
        answered.update(r.id for r in event.get_function_responses() if r.id)

    for event in events[start:]:
        take(event)
    while start > 0 and not answered <= called:
        start -= 1
        take(events[start])
    return events[start:]


@dataclass
class _Building:
    event_id: str
    data: dict[str, Any]
    parts: dict[int, Any] = field(default_factory=dict)


def _interrupted(result: ToolResult, call: Event | None) -> Event:
    response = types.FunctionResponse(
        id=result.id, name=result.tool_name, response={"error": result.text}
    )
    return Event(
        id=f"{INTERRUPTED_EVENT_PREFIX}{result.id}",
        author=call.author if call is not None else "user",
        invocation_id=call.invocation_id if call is not None else "",
        content=types.Content(role="user", parts=[types.Part(function_response=response)]),
    )


def messages_to_events(messages: Sequence[Message]) -> list[Event]:
    """Regroup a window's rows into events; synthetic results become error response events
    (but not for long-running calls); rows written by other means are skipped."""
    pending: list[_Building | ToolResult] = []
    for message in messages:
        data = message.metadata.get(ADK_KEY)
        if isinstance(data, dict):
            event_id = data["event"].get("id", "")
            last = pending[-1] if pending else None
            if isinstance(last, _Building) and last.event_id == event_id:
                last.parts.update((index, part) for index, part in data["parts"])
            else:
                building = _Building(event_id, data["event"])
                building.parts.update((index, part) for index, part in data["parts"])
                pending.append(building)
        elif isinstance(message, ToolResult) and is_synthetic(message):
            pending.append(message)
    events: list[Event] = []
    callers: dict[str, Event] = {}
    for item in pending:
        if isinstance(item, ToolResult):
            caller = callers.get(item.id)
            if caller is not None and item.id in (caller.long_running_tool_ids or set()):
                continue
            events.append(_interrupted(item, caller))
            continue
        body = thaw(item.data)
        if isinstance(body.get("content"), dict):
            body["content"]["parts"] = [item.parts[i] for i in sorted(item.parts)]
        event = Event.model_validate(body)
        for call in event.get_function_calls():
            if call.id:
                callers[call.id] = event
        events.append(event)
    return events


def _event_stamp(message: Message) -> float | None:
    """The timestamp of the event a row belongs to (``None``: not a row of this adapter)."""
    data = message.metadata.get(ADK_KEY)
    event = data.get("event") if isinstance(data, dict) else None
    stamp = event.get("timestamp") if isinstance(event, dict) else None
    return float(stamp) if isinstance(stamp, (int, float)) else None


def _compaction_event(row_id: int, text: str | None, start: float, end: float) -> Event:
    """A memstore summary as ADK's compaction event (the shape ADK's own summarizer appends:
    author ``user``, no ``content``, the summary as model content in ``actions.compaction``)."""
    event_id = f"{SUMMARY_EVENT_PREFIX}{row_id}"
    compaction = EventCompaction(
        start_timestamp=start,
        end_timestamp=end,
        compacted_content=types.Content(role="model", parts=[types.Part(text=text or "")]),
    )
    return Event(
        id=event_id,
        invocation_id=event_id,
        author="user",
        timestamp=end,
        actions=EventActions(compaction=compaction),
    )


def _bounds(stamps: Sequence[float | None]) -> tuple[float, float]:
    """The first and last known timestamps of the covered events (``0.0`` when none is
    known: a summary placed before every event rather than over one it does not cover)."""
    known = [stamp for stamp in stamps if stamp is not None]
    return (known[0], known[-1]) if known else (0.0, 0.0)


_STAMP_SCAN = 16
"""Rows read at each end of a covered range for the timestamp of an event of this adapter."""


def _covered_bounds(
    conn: Connection, store: MemoryStore, app_id: str, info: SummaryInfo
) -> tuple[float, float]:
    """The first and last event timestamps in a summary's covered range, read from the
    rows at both ends of it (a summary row or a row written by other means has none)."""
    where = (
        in_app(original, app_id),
        original.c.is_deleted == sa.false(),
        original.c.message_type != SUMMARY,
        original.c.id >= info.first_id,
        original.c.id <= info.last_id,
    )
    columns = (original.c.id, original.c.payload)
    oldest = sa.select(*columns).where(*where).order_by(original.c.app_id, original.c.id)
    newest = sa.select(*columns).where(*where).order_by(*newest_first(original))
    head = rows_to_messages(conn.execute(oldest.limit(_STAMP_SCAN)), app_id, store.cipher)
    tail = rows_to_messages(conn.execute(newest.limit(_STAMP_SCAN)), app_id, store.cipher)
    return _bounds([_event_stamp(row.message) for row in head + tail])


# -- state rows ------------------------------------------------------------------------------------


def _key(scope: str, app_name: str, user_id: str = "", session_id: str = "") -> Any:
    return sa.and_(
        adk_state.c.scope == scope,
        adk_state.c.app_name == app_name,
        adk_state.c.user_id == user_id,
        adk_state.c.session_id == session_id,
    )


def _state_of(conn: Connection, scope: str, *key: str) -> dict[str, Any]:
    text = conn.execute(sa.select(adk_state.c.state).where(_key(scope, *key))).scalar()
    return {} if text is None else dict(json.loads(text))


def _merge_state(conn: Connection, scope: str, delta: dict[str, Any], *key: str) -> None:
    """Apply ``delta`` to the app or user state row (created when missing).

    The row is first made to exist (an insert that does nothing when it is there), then read
    with a row lock (``FOR UPDATE``; SQLite's write lock serializes anyway), so concurrent
    appends in one app or for one user merge one after the other and no key is lost. Creating
    the row before locking it takes one lock per row, in one order: no gap locks, no
    shared-to-exclusive upgrade, so no deadlock between concurrent first writers (InnoDB)."""
    if not delta:
        return  # nothing to merge: no row, no lock
    now = datetime.now(timezone.utc)
    conn.execute(_create_if_missing(conn, scope, now, *key))
    row = conn.execute(
        sa.select(adk_state.c.state, adk_state.c.revision)
        .where(_key(scope, *key))
        .with_for_update()
    ).one()
    merged = {**json.loads(row.state), **delta}
    conn.execute(
        adk_state.update()
        .where(_key(scope, *key))
        .values(state=json.dumps(merged), revision=row.revision + 1, updated_at=now)
    )


def _create_if_missing(conn: Connection, scope: str, now: datetime, *key: str) -> Any:
    """An insert of the empty state row that does nothing when the row exists."""
    values = {
        "scope": scope,
        "app_name": key[0],
        "user_id": key[1] if len(key) > 1 else "",
        "session_id": "",
        "state": "{}",
        "revision": 0,
        "updated_at": now,
    }
    if conn.dialect.name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        statement = mysql.insert(adk_state).values(values)
        # a no-op update: it takes the row's exclusive lock, as the locking read would
        return statement.on_duplicate_key_update(revision=adk_state.c.revision)
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(adk_state).values(values).on_conflict_do_nothing()
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(adk_state).values(values).on_conflict_do_nothing()


def _stamp(value: datetime) -> float:
    if value.tzinfo is None:  # MySQL DATETIME comes back naive (stored as UTC)
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def _json_state(state: dict[str, Any]) -> dict[str, Any]:
    """State in the JSON form ADK's ``DatabaseSessionService`` stores (ISO datetimes, decimals
    as strings, sets as lists; a value pydantic cannot convert by its ``str()``)."""
    return dict(json.loads(json.dumps(_session_util.make_json_safe_state(state), default=str)))


# -- the service -----------------------------------------------------------------------------------


class MemstoreSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` with the events in memstore.

    Args:
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`
            (migrated to head: the state table needs migration 0004).
        state_service: an ADK session service to keep the sessions and their state in
            instead of memstore's ``adk_state`` table.

    Example::

        service = MemstoreSessionService(store)
        runner = Runner(agent=agent, app_name="weather", session_service=service)
    """

    def __init__(self, store: Store, state_service: BaseSessionService | None = None) -> None:
        self._access = StoreAccess(store)
        self.state_service = state_service
        self._append_locks: weakref.WeakValueDictionary[tuple[Any, ...], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @property
    def store(self) -> Store:
        return self._access.store

    async def close(self) -> None:
        """Close what the service opened: nothing. The store (and a ``state_service``) passed
        in are the caller's to close, as ADK's ``DatabaseSessionService`` leaves an engine it
        was given; this and ``async with`` exist so code written for ADK's services keeps
        working."""

    async def __aenter__(self) -> MemstoreSessionService:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _sync(self) -> MemoryStore:
        return self._access.sync_store()

    # -- sessions --------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (``AlreadyExistsError`` when the id is taken)."""
        if self.state_service is not None:
            return await self.state_service.create_session(
                app_name=app_name, user_id=user_id, state=state, session_id=session_id
            )
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        return await asyncio.to_thread(
            self._create_sync, app_name, user_id, session_id, _json_state(state or {})
        )

    def _create_sync(
        self, app_name: str, user_id: str, session_id: str, state: dict[str, Any]
    ) -> Session:
        deltas = _session_util.extract_state_delta(state)
        now = datetime.now(timezone.utc)
        with translated_errors("creating a session"), self._sync().engine.begin() as conn:
            try:
                with conn.begin_nested():
                    conn.execute(
                        adk_state.insert().values(
                            scope="session",
                            app_name=app_name,
                            user_id=user_id,
                            session_id=session_id,
                            history_app_id=history_app_id(app_name, user_id, session_id),
                            state=json.dumps(deltas["session"]),
                            revision=1,
                            updated_at=now,
                        )
                    )
            except IntegrityError as error:
                raise AlreadyExistsError(f"Session with id {session_id} already exists.") from error
            _merge_state(conn, "app", deltas["app"], app_name)
            _merge_state(conn, "user", deltas["user"], app_name, user_id)
            merged = self._merged(conn, app_name, user_id, deltas["session"])
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merged,
            last_update_time=now.timestamp(),
        )
        set_adk_update_marker(session, "1")
        return session

    @staticmethod
    def _merged(
        conn: Connection, app_name: str, user_id: str, session_state: dict[str, Any]
    ) -> dict[str, Any]:
        merged = dict(session_state)
        for key, value in _state_of(conn, "app", app_name).items():
            merged[State.APP_PREFIX + key] = value
        for key, value in _state_of(conn, "user", app_name, user_id).items():
            merged[State.USER_PREFIX + key] = value
        return merged

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with the edge-checked window of its events (all of them without
        ``config.num_recent_events``), or ``None``."""
        session: Session | None
        if self.state_service is not None:
            session = await self.state_service.get_session(
                app_name=app_name, user_id=user_id, session_id=session_id
            )
            if session is None:
                return None
        else:
            session = await asyncio.to_thread(self._get_sync, app_name, user_id, session_id)
            if session is None:
                return None
        recent = config.num_recent_events if config is not None else None
        events = await asyncio.to_thread(
            self._events_sync, history_app_id(app_name, user_id, session_id), recent
        )
        after = config.after_timestamp if config is not None else None
        if after is not None:
            events = [event for event in events if event.timestamp >= after]
        session.events = events
        return session

    def _get_sync(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        with translated_errors("reading a session"), self._sync().engine.connect() as conn:
            row = conn.execute(
                sa.select(adk_state).where(_key("session", app_name, user_id, session_id))
            ).first()
            if row is None:
                return None
            merged = self._merged(conn, app_name, user_id, json.loads(row.state))
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merged,
            last_update_time=_stamp(row.updated_at),
        )
        set_adk_update_marker(session, str(row.revision))
        return session

    def _events_sync(self, app_id: str, recent: int | None) -> list[Event]:
        if recent == 0:
            return []
        store = self._sync()
        if recent is None:
            return self._all_events(store, app_id)
        # A window counts rows and an event may be several (a 3-call event is 1 AI row and
        # 3 results): widen until it holds ``recent`` events or the whole history.
        size = recent
        while True:
            window = store.load_window(app_id, size, start_at_user=False)
            events = messages_to_events(window)
            if len(events) >= recent:
                return _latest_events(events, recent)
            if len(window) < size or size >= MAX_WINDOW_MESSAGES:
                # every row after the summary's range is here: the summary comes first (a
                # window that is full holds the summary but may lack rows after the range)
                lead = self._summary_lead(store, app_id, window)
                return _latest_events(lead + events, recent)
            size = min(size * 2, MAX_WINDOW_MESSAGES)

    def _all_events(self, store: MemoryStore, app_id: str) -> list[Event]:
        """Every event, or after a compaction its summary and the events after the range."""
        rows = self._access.all_rows(app_id)
        summaries = [row for row in rows if summary_info(row.message) is not None]
        if not summaries:
            return messages_to_events(select_window(rows, _WHOLE).messages)
        newest = summaries[-1]
        info = summary_info(newest.message)
        assert info is not None
        rest = [row for row in rows if row.id > info.last_id and not is_summary(row.message)]
        lead: list[Event] = []
        opener = window_summary(newest.id, newest.message, store.settings.summary_role)
        if opener is not None:
            covered = [row for row in rows if info.first_id <= row.id <= info.last_id]
            start, end = _bounds([_event_stamp(row.message) for row in covered])
            lead = [_compaction_event(newest.id, opener.text, start, end)]
        return lead + (messages_to_events(select_window(rest, _WHOLE).messages) if rest else [])

    @staticmethod
    def _summary_lead(store: MemoryStore, app_id: str, window: list[Message]) -> list[Event]:
        """The compaction event of the summary opening ``window`` (none: no summary)."""
        info = summary_info(window[0]) if window else None
        if info is None:
            return []
        row_id = int(window[0].metadata[SUMMARY_MARK]["id"])
        with translated_errors("reading a summary's range"), store.engine.connect() as conn:
            start, end = _covered_bounds(conn, store, app_id, info)
        return [_compaction_event(row_id, window[0].text, start, end)]

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The sessions (without events; their own state), least recently updated first."""
        if self.state_service is not None:
            return await self.state_service.list_sessions(app_name=app_name, user_id=user_id)
        return await asyncio.to_thread(self._list_sync, app_name, user_id)

    def _list_sync(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        query = (
            sa.select(adk_state)
            .where(adk_state.c.scope == "session", adk_state.c.app_name == app_name)
            .order_by(adk_state.c.updated_at)
        )
        if user_id is not None:
            query = query.where(adk_state.c.user_id == user_id)
        with translated_errors("listing sessions"), self._sync().engine.connect() as conn:
            rows = conn.execute(query).all()
        return ListSessionsResponse(
            sessions=[
                Session(
                    id=row.session_id,
                    app_name=app_name,
                    user_id=row.user_id,
                    state=json.loads(row.state),
                    last_update_time=_stamp(row.updated_at),
                )
                for row in rows
            ]
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and purge its events (both histories, cached window)."""
        if self.state_service is not None:
            await self.state_service.delete_session(
                app_name=app_name, user_id=user_id, session_id=session_id
            )
        await finish(asyncio.to_thread(self._delete_sync, app_name, user_id, session_id))

    def _delete_sync(self, app_name: str, user_id: str, session_id: str) -> None:
        store = self._sync()
        app_id = history_app_id(app_name, user_id, session_id)
        try:
            with translated_errors("deleting a session"), store.engine.begin() as conn:
                key = _key("session", app_name, user_id, session_id)
                conn.execute(adk_state.delete().where(key))
                generation.bump(conn, app_id)  # in-process windows of other processes see it
                for statement in purge_statements(app_id):
                    conn.execute(statement)
        finally:
            # also when the delete failed: its commit may have gone through with the reply
            # lost, and a window must never keep serving deleted text
            store._cache_update(lambda: store.cache.purge(app_id))  # stamped if Redis skipped

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state (keys without the ``user:`` prefix)."""
        if self.state_service is not None:
            return await self.state_service.get_user_state(app_name=app_name, user_id=user_id)
        return await asyncio.to_thread(self._user_state_sync, app_name, user_id)

    def _user_state_sync(self, app_name: str, user_id: str) -> dict[str, Any]:
        with translated_errors("reading user state"), self._sync().engine.connect() as conn:
            return _state_of(conn, "user", app_name, user_id)

    # -- events ----------------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store the event (and its state delta) in one transaction, then add it to ``session``.

        Raises:
            StaleSessionError: another append changed the session since ``session`` was read
                (nothing is written).
            SessionNotFoundError: the session does not exist.
        """
        if event.partial:
            return event
        async with self._append_lock(session):
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            if self.state_service is not None:
                return await self._append_wrapped(session, event)
            marker = await finish(asyncio.to_thread(self._append_sync, session, event))
            set_adk_update_marker(session, marker)
            session.last_update_time = event.timestamp
            return self._commit_event_to_session(session, event)

    def _append_lock(self, session: Session) -> asyncio.Lock:
        """The lock of the session's appends on this event loop.

        Appends through this service to one session run one after the other, as ADK's
        ``DatabaseSessionService`` runs them: concurrent appends through one session object
        then all land, each reading the revision the previous one left on it, where they would
        otherwise read the same revision and all but one raise ``StaleSessionError``. A lock
        lives while an append holds or awaits it."""
        key = (asyncio.get_running_loop(), session.app_name, session.user_id, session.id)
        lock = self._append_locks.get(key)
        if lock is None:
            lock = self._append_locks[key] = asyncio.Lock()
        return lock

    def _append_sync(self, session: Session, event: Event) -> str:
        store = self._sync()
        app_id = history_app_id(session.app_name, session.user_id, session.id)
        delta = _json_state(dict(event.actions.state_delta or {})) if event.actions else {}
        deltas = _session_util.extract_state_delta(delta)
        batch = event_to_messages(event)
        try:
            # a function response names its tool: no lookup of the call before the insert
            return self._append_once(store, session, event, app_id, deltas, batch, presume=True)
        except UnknownToolCallError:  # its call is not stored: again, answered opaquely
            return self._append_once(store, session, event, app_id, deltas, batch, presume=False)

    def _append_once(
        self,
        store: MemoryStore,
        session: Session,
        event: Event,
        app_id: str,
        deltas: dict[str, Any],
        batch: list[Message],
        *,
        presume: bool,
    ) -> str:
        """One transaction of :meth:`_append_sync` (see ``insert_messages``'s ``presume``)."""
        key = _key("session", session.app_name, session.user_id, session.id)
        store._ensure_lease()  # before the transaction: a lease renewal never waits on its locks
        with app_transaction(store, app_id, "appending an event") as conn:
            row = conn.execute(
                sa.select(adk_state.c.state, adk_state.c.revision).where(key)
            ).first()
            if row is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            marker = adk_update_marker(session)
            if marker is not None and marker != str(row.revision):
                raise StaleSessionError(_STALE)
            state = {**json.loads(row.state), **deltas["session"]}
            changed = conn.execute(
                adk_state.update()
                .where(key, adk_state.c.revision == row.revision)
                .values(
                    state=json.dumps(state),
                    revision=row.revision + 1,
                    updated_at=datetime.fromtimestamp(event.timestamp, timezone.utc),
                )
            ).rowcount
            if changed != 1:
                raise StaleSessionError(_STALE)
            if deltas["app"]:
                _merge_state(conn, "app", deltas["app"], session.app_name)
            if deltas["user"]:
                _merge_state(conn, "user", deltas["user"], session.app_name, session.user_id)
            _, cache_entries, step = insert_messages(
                conn, store, app_id, batch, _user(session.user_id), presume=presume
            )
        store._cache_append(app_id, cache_entries, step)
        return str(row.revision + 1)

    async def _append_wrapped(self, session: Session, event: Event) -> Event:
        """Append a content-free copy to the state service (its stale check and state), then
        the event's rows to memstore."""
        assert self.state_service is not None
        app_id = history_app_id(session.app_name, session.user_id, session.id)
        batch = event_to_messages(event)
        settings = self._access.store.settings
        # what memstore would refuse is refused before the state service applies anything
        plan_write(
            app_id,
            _user(session.user_id),
            batch,
            [],
            now=datetime.now(timezone.utc),
            max_text_bytes=settings.max_text_bytes,
            max_metadata_bytes=settings.max_metadata_bytes,
        )
        shadow = event.model_copy(update={"content": None})
        events_before = list(session.events)
        await self.state_service.append_event(session, shadow)
        session.events = events_before
        await self._access.aappend(app_id, batch, _user(session.user_id))
        session.events.append(event)
        return event


_STALE = (
    "The session was modified in storage since it was loaded; reload the session "
    "(get_session) before appending."
)


def _user(user_id: str) -> str | None:
    try:
        return normalize_user_id(user_id)
    except InvalidAppIdError:
        return None
