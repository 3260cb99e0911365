"""A commit whose reply is lost: the caller is told the outcome is unknown, no instance serves a
window without the write, and ``append(..., retry_of=error)`` stores the turn exactly once.

The database link goes through :class:`~tests.integration.tcp_proxy.CommitCutter`, which cuts
the connection at the next ``COMMIT``: after the server got it (it commits, the reply is lost)
or before (the server rolls back). Both look the same to the client.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from memstore import (
    AiMessage,
    CommitOutcomeUnknownError,
    InvalidInputError,
    MemoryStore,
    Settings,
    StorageError,
    ToolResult,
    UserMessage,
)
from memstore.aio import AsyncMemoryStore
from memstore.store_base import retry_probe
from tests.conftest import REDIS_URL, SESSION_WORKER_ID, migrated_engine, require_redis
from tests.integration.tcp_proxy import CommitCutter

SERVERS = ["postgres", "mysql"]


@pytest.fixture(params=SERVERS)
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, CommitCutter]]:
    """(direct URL, URL through a commit cutter, the cutter) for one database server."""
    require_redis()  # the windows live in the real Redis: skip when unset, fail when down
    url = migrated_engine(request.param, tmp_path_factory).url
    cutter = CommitCutter(url.host or "127.0.0.1", url.port or 0)
    through = url.set(host="127.0.0.1", port=cutter.port)
    if url.get_backend_name() == "postgresql":
        through = through.update_query_dict({"sslmode": "disable"})  # COMMIT must be visible
    yield (
        url.render_as_string(hide_password=False),
        through.render_as_string(hide_password=False),
        cutter,
    )
    cutter.close()


def settings(url: str) -> Settings:
    return Settings(database_url=url, redis_url=REDIS_URL, worker_id=SESSION_WORKER_ID)


def texts(store: MemoryStore, app: str) -> list[str | None]:
    return [getattr(m, "text", None) for m in store.load_window(app, 50)]


@pytest.mark.parametrize("mode", ["reply_lost", "before_commit"])
def test_a_commit_cut_is_an_unknown_outcome_and_a_retry_stores_the_turn_once(
    proxied: tuple[str, str, CommitCutter], mode: str
) -> None:
    direct_url, cut_url, cutter = proxied
    writer = MemoryStore(settings(cut_url))
    other = MemoryStore(settings(direct_url))  # another instance sharing the Redis window
    app = f"doubt-{uuid.uuid4().hex[:8]}"
    try:
        writer.append(app, [UserMessage(text="first")])
        assert [m.text for m in other.memory(app).messages()] == ["first"]  # cached now

        cutter.arm(mode)
        turn = [UserMessage(text="second"), AiMessage(text="answer")]
        with pytest.raises(CommitOutcomeUnknownError) as caught:
            writer.append(app, turn)
        error = caught.value
        assert isinstance(error, StorageError)
        assert error.app_id == app and len(error.ids) == 2
        assert "second" not in str(error) and "answer" not in str(error)
        assert cutter.cuts == 1

        committed = mode == "reply_lost"
        expected = ["first", "second", "answer"] if committed else ["first"]
        # no instance serves the window it had cached before the write in doubt
        assert [m.text for m in other.memory(app).messages()] == expected

        ids = writer.append(app, turn, retry_of=error)
        assert (ids == list(error.ids)) is committed
        assert [m.text for m in other.memory(app).messages()] == ["first", "second", "answer"]
        assert texts(other, app) == ["first", "second", "answer"]
        assert [e.text for e in other.history(app)] == ["answer", "second", "first"]
    finally:
        other.purge(app)
        writer.close()
        other.close()


def test_the_async_store_reports_and_settles_the_same(
    proxied: tuple[str, str, CommitCutter],
) -> None:
    direct_url, cut_url, cutter = proxied
    other = MemoryStore(settings(direct_url))
    app = f"adoubt-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        writer = AsyncMemoryStore(settings(cut_url))
        try:
            await writer.append(app, [UserMessage(text="first")])
            cutter.arm("reply_lost")
            with pytest.raises(CommitOutcomeUnknownError) as caught:
                await writer.append(app, [UserMessage(text="second")])
            assert caught.value.app_id == app
            assert [m.text for m in other.memory(app).messages()] == ["first", "second"]
            again = await writer.append(app, [UserMessage(text="second")], retry_of=caught.value)
            assert again == list(caught.value.ids)
        finally:
            await writer.close()

    try:
        asyncio.run(scenario())
        assert texts(other, app) == ["first", "second"]
    finally:
        other.purge(app)
        other.close()


def test_a_collector_settles_a_flush_in_doubt_before_writing_on(
    proxied: tuple[str, str, CommitCutter],
) -> None:
    direct_url, cut_url, cutter = proxied
    writer = MemoryStore(settings(cut_url))
    other = MemoryStore(settings(direct_url))
    app = f"cdoubt-{uuid.uuid4().hex[:8]}"
    try:
        writer.append(app, [UserMessage(text="read it")])
        with writer.collector(app) as turn:
            turn.on_tool_call_delta(0, id="c1", name="read", arguments="{}")
            cutter.arm("reply_lost")
            with pytest.raises(CommitOutcomeUnknownError):
                turn.on_tool_executed("c1", "contents")
            turn.on_text("done")
        window = other.load_window(app, 50)
        # the request and its result are stored once, whatever the flush in doubt did
        assert [type(m).__name__ for m in window] == [
            "UserMessage",
            "AiMessage",
            "ToolResult",
            "AiMessage",
        ]
        assert isinstance(window[2], ToolResult) and window[2].text == "contents"
    finally:
        other.purge(app)
        writer.close()
        other.close()


def test_retry_of_must_be_the_same_append() -> None:
    doubt = CommitOutcomeUnknownError("lost", app_id="a", ids=(1, 2))
    assert retry_probe("a", doubt, 2) == 1
    with pytest.raises(InvalidInputError):
        retry_probe("b", doubt, 2)
    with pytest.raises(InvalidInputError):
        retry_probe("a", doubt, 3)
    with pytest.raises(InvalidInputError):
        retry_probe("a", StorageError("other"), 2)  # type: ignore[arg-type]
    # a write of display rows only has nothing to probe: it is written again
    assert retry_probe("a", CommitOutcomeUnknownError("lost", app_id="a"), 0) is None


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_a_purge_whose_commit_reply_is_lost_leaves_no_window_serving_the_text(
    proxied: tuple[str, str, CommitCutter], flavor: str
) -> None:
    direct_url, cut_url, cutter = proxied
    other = MemoryStore(settings(direct_url))
    app = f"pdoubt-{uuid.uuid4().hex[:8]}"
    other.append(app, [UserMessage(text="secret")])
    assert [m.text for m in other.memory(app).messages()] == ["secret"]  # cached in Redis
    try:
        cutter.arm("reply_lost")
        with pytest.raises(StorageError):
            if flavor == "sync":
                with MemoryStore(settings(cut_url)) as purger:
                    purger.purge(app)
            else:

                async def purge() -> None:
                    purger = AsyncMemoryStore(settings(cut_url))
                    try:
                        await purger.purge(app)
                    finally:
                        await purger.close()

                asyncio.run(purge())
        assert cutter.cuts == 1
        assert other.memory(app).messages() == []  # the purge committed; its window is gone
    finally:
        other.purge(app)
        other.close()


def test_the_adapters_settle_a_commit_in_doubt_and_store_the_messages_once(
    proxied: tuple[str, str, CommitCutter],
) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from memstore.adapters.langchain import MemstoreChatMessageHistory

    direct_url, cut_url, cutter = proxied
    app = f"lcdoubt-{uuid.uuid4().hex[:8]}"
    writer = MemoryStore(settings(cut_url))
    other = MemoryStore(settings(direct_url))
    try:
        history = MemstoreChatMessageHistory(writer, app)
        history.add_messages([HumanMessage("hi")])
        cutter.arm("reply_lost")
        history.add_messages([HumanMessage("second"), AIMessage("answer")])  # no error
        assert cutter.cuts == 1
        assert texts(other, app) == ["hi", "second", "answer"]
    finally:
        other.purge(app)
        writer.close()
        other.close()


def test_an_adk_event_whose_commit_is_in_doubt_drops_the_window_and_is_never_stored_twice(
    proxied: tuple[str, str, CommitCutter],
) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.genai import types

    from memstore.adapters.google_adk import MemstoreSessionService, history_app_id

    direct_url, cut_url, cutter = proxied
    other = MemoryStore(settings(direct_url))
    user = f"u-{uuid.uuid4().hex[:6]}"

    def said(text: str) -> Event:
        return Event(
            author="user", content=types.Content(role="user", parts=[types.Part(text=text)])
        )

    async def scenario() -> str:
        writer = MemoryStore(settings(cut_url))
        try:
            service = MemstoreSessionService(writer)
            session = await service.create_session(app_name="doubt", user_id=user)
            await service.append_event(session, said("first"))
            app = history_app_id("doubt", user, session.id)
            assert [m.text for m in other.memory(app).messages()] == ["first"]  # cached
            cutter.arm("reply_lost")
            with pytest.raises(CommitOutcomeUnknownError) as caught:
                await service.append_event(session, said("second"))
            assert caught.value.app_id == app
            # the event was committed: no instance serves the window without it
            assert [m.text for m in other.memory(app).messages()] == ["first", "second"]
            # a retry on the same session object is refused, never stored twice
            with pytest.raises(ValueError):
                await service.append_event(session, said("second"))
            return app
        finally:
            writer.close()

    app = asyncio.run(scenario())
    try:
        assert texts(other, app) == ["first", "second"]
    finally:
        other.purge(app)
        other.close()
