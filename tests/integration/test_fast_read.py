"""The loader's read on the DBAPI connection (``memstore.sql.fastread``, issue 14).

It must give exactly the windows the Core path gives, raise the same typed errors, retry a
read on a connection found dead, hand pooled connections back as it found them, and step
aside (Core runs the read) when the engine has statement listeners.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.core.crypto import PLAIN
from memstore.core.loader import RowRequest
from memstore.errors import SchemaError
from memstore.messages import Message
from memstore.sql.aio import AsyncSqlHistory, async_url, make_async_engine
from memstore.sql.engine import ENGINE_OPTIONS, make_engine
from memstore.sql.fastread import async_fast_reads, fast_reads
from memstore.sql.repository import SqlHistory
from tests.conftest import POSTGRES_URL, SESSION_WORKER_ID, migrated_engine

DATABASES = ["sqlite", "postgres", "mysql"]
WINDOWS = [1, 2, 3, 4, 7, 12, 25, 50]


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    engine = migrated_engine(request.param, tmp_path_factory)
    return engine.url.render_as_string(hide_password=False)


def random_turns(rng: random.Random, turns: int) -> list[list[Message]]:
    """Turns with parallel tool calls, results in any order, late (a later turn) or never."""
    out: list[list[Message]] = []
    late: list[ToolResult] = []
    calls = 0
    for _ in range(turns):
        turn: list[Message] = [UserMessage(text=f"u{rng.random():.6f}")]
        if late and rng.random() < 0.5:
            turn = [*late, *turn]
            late = []
        for _ in range(rng.randint(0, 3)):
            requests = []
            for _ in range(rng.randint(1, 4)):
                calls += 1
                requests.append(ToolRequest(id=f"c{calls}", name="t", arguments="{}"))
            turn.append(AiMessage(text=None, tool_requests=requests))
            results = [ToolResult(id=r.id, tool_name="t", text=f"r{r.id}") for r in requests]
            rng.shuffle(results)
            for result in results:
                fate = rng.random()
                if fate < 0.8:
                    turn.append(result)
                elif fate < 0.9:
                    late.append(result)
        turn.append(AiMessage(text=f"a{rng.random():.6f}"))
        out.append(turn)
    return out


def dumped(messages: list[Message]) -> list[str]:
    return [m.model_dump_json() for m in messages]


def core_listener(*_args: Any) -> None:
    """A statement listener: its engine's reads take the Core path."""


def windows(store: MemoryStore, app: str) -> list[list[str]]:
    out = [dumped(store.load_window(app, n)) for n in WINDOWS]
    out += [dumped(store.load_window(app, n, start_at_user=True)) for n in (3, 20)]
    out += [dumped(store.load_window(app, None, max_tokens=t)) for t in (5, 40, 400)]
    out += [dumped(store.load_window(app, 20, summaries=False))]
    return out


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_the_dbapi_read_gives_the_windows_of_the_core_read(db_url: str) -> None:
    engine = make_engine(db_url)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    apps = [f"fast-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    try:
        for seed, app in enumerate(apps):
            for turn in random_turns(random.Random(seed), 12):
                store.append(app, turn)
        store.compact(apps[0], lambda messages: f"summary of {len(messages)}", None, 10)
        assert fast_reads(engine) == (engine.dialect.name != "mysql")
        fast = [windows(store, app) for app in apps]
        sa.event.listen(engine, "before_cursor_execute", core_listener)
        try:
            assert not fast_reads(engine)
            core = [windows(store, app) for app in apps]
        finally:
            sa.event.remove(engine, "before_cursor_execute", core_listener)
        assert fast == core
        assert any(len(w) > 1 for w in fast[0])
    finally:
        for app in apps:
            store.purge(app)
        store.close()
        engine.dispose()


def async_variants(db_url: str) -> list[str]:
    target = async_url(db_url)
    if target.get_backend_name() == "postgresql":
        return [str(target.set(drivername=f"postgresql+{d}")) for d in ("psycopg", "asyncpg")]
    return [target.render_as_string(hide_password=False)]


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_the_async_dbapi_read_gives_the_windows_of_the_core_read(db_url: str) -> None:
    sync_store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID))
    app = f"afast-{uuid.uuid4().hex[:8]}"
    for turn in random_turns(random.Random(7), 15):
        sync_store.append(app, turn)
    expected = windows(sync_store, app)

    async def read_all(url: str) -> tuple[bool, list[list[str]], list[list[str]]]:
        engine = make_async_engine(url)
        store = AsyncMemoryStore(
            Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine
        )
        try:
            fast = await async_windows(store, app)
            used = async_fast_reads(engine)
            sa.event.listen(engine.sync_engine, "before_cursor_execute", core_listener)
            core = await async_windows(store, app)
            return used, fast, core
        finally:
            await store.close()
            await engine.dispose()

    try:
        for url in async_variants(db_url):
            used, fast, core = asyncio.run(read_all(url))
            assert used == (make_url(url).get_backend_name() != "mysql")
            assert fast == core == expected
    finally:
        sync_store.purge(app)
        sync_store.close()


async def async_windows(store: AsyncMemoryStore, app: str) -> list[list[str]]:
    out = [dumped(await store.load_window(app, n)) for n in WINDOWS]
    out += [dumped(await store.load_window(app, n, start_at_user=True)) for n in (3, 20)]
    out += [dumped(await store.load_window(app, None, max_tokens=t)) for t in (5, 40, 400)]
    out += [dumped(await store.load_window(app, 20, summaries=False))]
    return out


# -- errors ------------------------------------------------------------------------------------


@pytest.fixture
def empty_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database (SQLite file, PostgreSQL schema) without memstore's tables."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('empty') / 'empty.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("MEMSTORE_TEST_POSTGRES_URL is not set")
    schema = f"fastread_empty_{uuid.uuid4().hex[:8]}"
    admin = make_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield (
            make_url(POSTGRES_URL)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def one_connection_engine(url: str) -> Engine:
    engine = sa.create_engine(
        url, poolclass=QueuePool, pool_size=1, max_overflow=0, **ENGINE_OPTIONS
    )
    return engine


@pytest.mark.parametrize("empty_url", ["sqlite", "postgres"], indirect=True)
def test_a_missing_table_on_the_dbapi_read_is_the_same_schema_error(empty_url: str) -> None:
    engine = one_connection_engine(empty_url)
    history = SqlHistory(engine, PLAIN)
    try:
        assert fast_reads(engine)
        with pytest.raises(SchemaError) as raised:
            history.fetch("app", RowRequest(10, summary=True))
        sa.event.listen(engine, "before_cursor_execute", core_listener)
        with pytest.raises(SchemaError) as core:
            history.fetch("app", RowRequest(10, summary=True))
        assert (raised.value.kind, raised.value.code) == (core.value.kind, core.value.code)
        assert str(raised.value) == str(core.value)
        sa.event.remove(engine, "before_cursor_execute", core_listener)
        if engine.dialect.name == "postgresql":
            assert raised.value.code == "42P01"
            raw = engine.raw_connection()  # the pool's one connection, as the read left it
            try:
                assert raw.dbapi_connection.autocommit is False
            finally:
                raw.close()
    finally:
        engine.dispose()


@pytest.mark.parametrize("empty_url", ["sqlite", "postgres"], indirect=True)
def test_a_missing_table_on_the_async_dbapi_read_is_the_same_schema_error(
    empty_url: str,
) -> None:
    async def main() -> None:
        engine = create_async_engine(
            async_url(empty_url),
            poolclass=sa.pool.AsyncAdaptedQueuePool,
            pool_size=1,
            max_overflow=0,
            **ENGINE_OPTIONS,
        )
        history = AsyncSqlHistory(engine, PLAIN)
        try:
            assert async_fast_reads(engine)
            with pytest.raises(SchemaError) as raised:
                await history.fetch("app", RowRequest(10, summary=True))
            if engine.dialect.name == "postgresql":
                assert raised.value.code == "42P01"
                raw = await engine.raw_connection()
                assert raw.driver_connection.autocommit is False  # type: ignore[union-attr]
                await sa.util.greenlet_spawn(raw.close)
            # and the connection still reads
            with pytest.raises(SchemaError):
                await history.fetch("app", RowRequest(10))
        finally:
            await engine.dispose()

    asyncio.run(main())


def postgres_url() -> str:
    if not POSTGRES_URL:
        pytest.skip("MEMSTORE_TEST_POSTGRES_URL is not set")
    return POSTGRES_URL


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_an_async_read_on_a_pooled_connection_killed_meanwhile_is_retried(
    driver: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = postgres_url()
    migrated_engine("postgres", tmp_path_factory)
    admin = make_engine(url)
    app = f"akill-{uuid.uuid4().hex[:8]}"

    async def main() -> list[str]:
        engine: AsyncEngine = make_async_engine(
            str(make_url(url).set(drivername=f"postgresql+{driver}"))
        )
        store = AsyncMemoryStore(
            Settings(database_url=url, worker_id=SESSION_WORKER_ID), engine=engine
        )
        try:
            await store.append(app, [UserMessage(text="kept")])
            texts: list[str] = []
            for _ in range(2):
                raw = await engine.raw_connection()
                driver_conn: Any = raw.driver_connection
                pid = (
                    driver_conn.get_server_pid()
                    if driver == "asyncpg"
                    else driver_conn.info.backend_pid
                )
                await sa.util.greenlet_spawn(raw.close)
                with admin.connect() as conn:
                    conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                texts += [m.text for m in await store.load_window(app, 5)]  # type: ignore[union-attr]
            await store.purge(app)
            return texts
        finally:
            await store.close()
            await engine.dispose()

    try:
        assert asyncio.run(main()) == ["kept", "kept"]
    finally:
        admin.dispose()


def sqlite_statements(store: MemoryStore, run: Any) -> list[str]:
    """The statements (parameters filled in) the store's pooled SQLite connection ran during
    ``run()``: the pool holds that one connection."""
    seen: list[str] = []
    raw = store.engine.raw_connection()
    target: Any = raw.dbapi_connection
    target.set_trace_callback(seen.append)
    raw.close()
    try:
        run()
    finally:
        target.set_trace_callback(None)
    return seen


def test_a_sqlite_summary_read_is_two_statements_in_one_read_transaction(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'split.db'}"
    store = MemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
    store.migrate()
    try:
        for turn in random_turns(random.Random(3), 12):
            store.append("app", turn)
        store.compact("app", lambda messages: "summary", None, 10)
        expected = dumped(store.load_window("app", 20))
        statements = sqlite_statements(store, lambda: store.load_window("app", 20))
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert len(reads) == 2 and not any("UNION" in s.upper() for s in reads)
        assert [s.strip().upper() for s in statements if s not in reads] == ["BEGIN", "COMMIT"]
        assert "summary" in expected[0]
        # the first read asks for the window and the SQLite look-ahead (8), not the network one
        assert "LIMIT 28 " in reads[0] + " "
    finally:
        store.close()


def test_postgresql_reads_carry_their_limits_in_the_sql() -> None:
    """PostgreSQL costs a prepared statement's generic plan with a bound ``LIMIT`` as if it
    read a tenth of the rows and so planned the window read anew on every call; the limits
    (and the summary type) are written into the SQL there, bound elsewhere."""
    from sqlalchemy.dialects import postgresql, sqlite

    from memstore.sql.fastread import window_read

    pg = postgresql.psycopg.dialect()
    ((sql, args),) = window_read(pg, "app", RowRequest(82, summary=True))
    assert "LIMIT 82)" in sql and "LIMIT 1)" in sql and "'summary'" in sql
    assert args == {"w_app": "app"}
    ((other, _),) = window_read(pg, "app", RowRequest(1024, before_id=5))
    assert "LIMIT 1024" in other
    lite = sqlite.pysqlite.dialect()
    first, _summary = window_read(lite, "app", RowRequest(58, summary=True), split_summary=True)
    assert "LIMIT ?" in first[0] and 58 in first[1]


def test_only_memstores_own_identifiers_are_written_into_sql() -> None:
    from memstore.sql.queries import written_in

    assert str(written_in("toolExecutionRequest")) == "'toolExecutionRequest'"
    assert str(written_in(82)) == "82"
    for hostile in ("a'b", "x; DROP TABLE t", ""):
        with pytest.raises(ValueError):
            written_in(hostile)
