"""``memstore.seams``: every private attribute of a dependency that memstore uses is checked
on the installed versions (a release that renames one fails here, loudly, instead of the
fast path silently taking its fallback), and every fallback works on an object without it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.pool import Pool
from sqlalchemy.pool.base import _ConnectionFairy

from memstore import seams
from memstore.sql.engine import make_engine
from memstore.sql.queries import window_statement

# -- the private attributes exist on the installed versions ------------------------------------


def test_sqlalchemy_internals_are_there() -> None:
    assert callable(Pool._invalidate)
    assert callable(Connection._handle_dbapi_exception_noconnection)
    assert callable(_ConnectionFairy._close_special)
    engine = make_engine("sqlite://")
    try:
        assert isinstance(engine._has_events, bool)
        assert isinstance(engine.dialect._has_events, bool)
        compiled = sa.select(sa.literal(1)).where(sa.bindparam("x") == 1).compile(engine)
        assert isinstance(compiled._bind_processors, dict)
    finally:
        engine.dispose()


def test_the_async_adaptations_have_their_error_hook(tmp_path: Any) -> None:
    pytest.importorskip("aiosqlite")
    from sqlalchemy.ext.asyncio import create_async_engine

    async def check() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                assert callable(raw.dbapi_connection._handle_exception)
                driver = raw.driver_connection
                assert seams.aiosqlite_sqlite3(driver) is not None
                run = seams.aiosqlite_on_thread(driver)
                assert run is not None
                assert await run(lambda c, q: c.execute(q).fetchall(), "SELECT 7") == [(7,)]
        finally:
            await engine.dispose()

    assert seams.aiosqlite_runs_functions()
    asyncio.run(check())


def test_redis_connections_have_their_stream() -> None:
    from redis.asyncio.connection import Connection as RedisConnection

    assert hasattr(RedisConnection(), "_writer")


def test_adk_sessions_have_the_update_marker() -> None:
    sessions = pytest.importorskip("google.adk.sessions")
    session = sessions.Session(id="s", app_name="a", user_id="u")
    assert "_storage_update_marker" in type(session).__private_attributes__
    seams.set_adk_update_marker(session, "7")
    assert seams.adk_update_marker(session) == "7"


# -- the fallbacks -----------------------------------------------------------------------------


def test_pool_invalidation_falls_back_to_the_connection() -> None:
    invalidated: list[Any] = []
    fairy = SimpleNamespace(invalidate=invalidated.append)
    engine: Any = SimpleNamespace(pool=SimpleNamespace())
    error = RuntimeError("gone")
    seams.invalidate_pool(engine, fairy, error)  # type: ignore[arg-type]
    assert invalidated == [error]


def test_an_idle_release_falls_back_to_a_plain_close() -> None:
    assert seams.release_idle(SimpleNamespace()) is False  # type: ignore[arg-type]
    released: list[bool] = []
    fairy = SimpleNamespace(_close_special=lambda transaction_reset: released.append(True))
    assert seams.release_idle(fairy) is True  # type: ignore[arg-type]
    assert released == [True]


def test_without_the_error_hook_the_caller_reraises() -> None:
    assert seams.adapted_error(SimpleNamespace(), ValueError("x")) is None


def test_without_event_flags_the_fast_path_is_not_taken() -> None:
    engine: Any = SimpleNamespace(dialect=SimpleNamespace())
    assert seams.has_events(engine) is True


def test_without_a_thread_hop_aiosqlite_is_used_through_its_api() -> None:
    assert seams.aiosqlite_on_thread(SimpleNamespace()) is None


@pytest.mark.parametrize("dialect_name", ["sqlite", "postgresql", "mysql"])
def test_the_public_bind_processors_match_the_private_ones(dialect_name: str) -> None:
    from sqlalchemy.dialects import mysql, postgresql, sqlite

    dialect = {"sqlite": sqlite, "postgresql": postgresql, "mysql": mysql}[dialect_name].dialect()
    for before in (False, True):
        for after in (False, True):
            compiled = window_statement(before, after, True, None).compile(dialect=dialect)
            public = seams.bind_processors(SimpleNamespace(binds=compiled.binds), dialect)
            assert set(public) == set(compiled._bind_processors)


def test_redis_send_falls_back_to_the_public_send() -> None:
    sent: list[Any] = []

    async def send_packed_command(packed: list[bytes], check_health: bool) -> None:
        sent.append((packed, check_health))

    connection = SimpleNamespace(send_packed_command=send_packed_command)
    asyncio.run(seams.redis_send(connection, [b"PING"]))
    assert sent == [([b"PING"], False)]


def test_the_adk_marker_falls_back_to_none() -> None:
    frozen = SimpleNamespace()
    assert seams.adk_update_marker(frozen) is None
    seams.set_adk_update_marker((), "1")  # cannot be kept: no error
