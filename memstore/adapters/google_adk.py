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
import json
import uuid
import weakref
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from memstore.extras import needs_extra

with needs_extra(__name__, "google-adk"):
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions import _session_util
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State

from memstore.adapters._adk_convert import (
    ADK_KEY,
    INTERRUPTED_EVENT_PREFIX,
    SUMMARY_EVENT_PREFIX,
    compaction_event,
    event_stamp,
    event_to_messages,
    history_app_id,
    latest_events,
    messages_to_events,
    stamp_bounds,
)
from memstore.adapters._adk_state import (
    covered_bounds,
    json_state,
    merge_state,
    state_key,
    state_of,
    update_stamp,
)
from memstore.adapters._history import Store, StoreAccess, app_transaction, insert_messages
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_user_id
from memstore.core.plans import plan_write
from memstore.core.summary import SUMMARY_MARK, is_summary, summary_info, window_summary
from memstore.core.window import select_window
from memstore.errors import InvalidAppIdError, UnknownToolCallError
from memstore.messages import Message
from memstore.seams import adk_update_marker, set_adk_update_marker
from memstore.shielding import finish
from memstore.sql import generation
from memstore.sql.engine import translated_errors
from memstore.sql.queries import purge_statements
from memstore.sql.schema import adk_state
from memstore.store import MemoryStore

__all__ = [
    "ADK_KEY",
    "INTERRUPTED_EVENT_PREFIX",
    "SUMMARY_EVENT_PREFIX",
    "MemstoreSessionService",
    "event_to_messages",
    "history_app_id",
    "messages_to_events",
]

_WHOLE = 2**31
"""A window size no session reaches: the edge check over every row."""


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
            self._create_sync, app_name, user_id, session_id, json_state(state or {})
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
            merge_state(conn, "app", deltas["app"], app_name)
            merge_state(conn, "user", deltas["user"], app_name, user_id)
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
        for key, value in state_of(conn, "app", app_name).items():
            merged[State.APP_PREFIX + key] = value
        for key, value in state_of(conn, "user", app_name, user_id).items():
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
                sa.select(adk_state).where(state_key("session", app_name, user_id, session_id))
            ).first()
            if row is None:
                return None
            merged = self._merged(conn, app_name, user_id, json.loads(row.state))
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merged,
            last_update_time=update_stamp(row.updated_at),
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
                return latest_events(events, recent)
            if len(window) < size or size >= MAX_WINDOW_MESSAGES:
                # every row after the summary's range is here: the summary comes first (a
                # window that is full holds the summary but may lack rows after the range)
                lead = self._summary_lead(store, app_id, window)
                return latest_events(lead + events, recent)
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
            start, end = stamp_bounds([event_stamp(row.message) for row in covered])
            lead = [compaction_event(newest.id, opener.text, start, end)]
        return lead + (messages_to_events(select_window(rest, _WHOLE).messages) if rest else [])

    @staticmethod
    def _summary_lead(store: MemoryStore, app_id: str, window: list[Message]) -> list[Event]:
        """The compaction event of the summary opening ``window`` (none: no summary)."""
        info = summary_info(window[0]) if window else None
        if info is None:
            return []
        row_id = int(window[0].metadata[SUMMARY_MARK]["id"])
        with translated_errors("reading a summary's range"), store.engine.connect() as conn:
            start, end = covered_bounds(conn, store, app_id, info)
        return [compaction_event(row_id, window[0].text, start, end)]

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
                    last_update_time=update_stamp(row.updated_at),
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
                key = state_key("session", app_name, user_id, session_id)
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
            return state_of(conn, "user", app_name, user_id)

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
        delta = json_state(dict(event.actions.state_delta or {})) if event.actions else {}
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
        key = state_key("session", session.app_name, session.user_id, session.id)
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
                merge_state(conn, "app", deltas["app"], session.app_name)
            if deltas["user"]:
                merge_state(conn, "user", deltas["user"], session.app_name, session.user_id)
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
