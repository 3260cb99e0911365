"""The direct write (``memstore/sql/direct.py``): an append's transaction straight on the
sqlite3 / aiosqlite / psycopg connection. It must store exactly what the SQLAlchemy path
stores, keep every check of that path (generation step, ids above the app's newest, requested
call ids across pages, the compaction chain, typed errors that leave the store unchanged),
retry a connection that died before the commit, and step aside for engines whose statements
someone listens to."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from memstore import (
    AiMessage,
    MemoryStore,
    Settings,
    ToolRequest,
    ToolResult,
    UnknownToolCallError,
    UserMessage,
)
from memstore.aio import AsyncMemoryStore
from memstore.core.crypto import PLAIN
from memstore.core.display import DisplayDraft
from memstore.core.loader import RowRequest
from memstore.core.plans import WritePlan, plan_write
from memstore.core.rows import TOOL_REQUEST, original_row
from memstore.errors import CompactionConflictError, WorkerLeaseLostError
from memstore.sql import generation
from memstore.sql.aio import AsyncSqlHistory, make_async_engine
from memstore.sql.direct import REQUEST_SCAN_PAGE, direct_statements
from memstore.sql.engine import make_engine
from memstore.sql.queries import ChainCheck
from memstore.sql.repository import SqlHistory
from memstore.sql.schema import display, original
from tests.conftest import SESSION_WORKER_ID, migrated_engine

DIRECT = ["sqlite", "postgres"]
DATABASES = ["sqlite", "postgres", "mysql"]


@pytest.fixture
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return migrated_engine(request.param, tmp_path_factory)


@pytest.fixture
def own_engine(engine: Engine) -> Iterator[Engine]:
    """An engine of this test's own on the migrated database (listeners stay with it)."""
    mine = make_engine(engine.url.render_as_string(hide_password=False))
    yield mine
    mine.dispose()


def app() -> str:
    return f"direct-{uuid.uuid4().hex[:10]}"


def store_on(engine: Engine) -> MemoryStore:
    url = engine.url.render_as_string(hide_password=False)
    return MemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID), engine=engine)


def generic(history: SqlHistory | AsyncSqlHistory) -> None:
    history._direct = False


def fresh_ids() -> Callable[[int, int], list[int]]:
    """An id issuer for writes outside a store: ids above ``above`` from a random point in
    the first minutes of the snowflake epoch, which no clock-driven generator issues now."""
    last = [(1 << 36) + uuid.uuid4().int % (1 << 40)]

    def issue(count_: int, above: int) -> list[int]:
        ids = [max(above, last[0]) + 1 + i for i in range(count_)]
        last[0] = ids[-1] if ids else last[0]
        return ids

    return issue


def turn(prefix: str = "") -> list[Any]:
    calls = [
        ToolRequest(id=f"{prefix}c{i}-{uuid.uuid4().hex[:6]}", name="t", arguments="{}")
        for i in range(3)
    ]
    return [
        UserMessage(text="question", metadata={"k": [1, 2]}),
        AiMessage(text=None, tool_requests=calls),
        *[ToolResult(id=c.id, tool_name="t", text=f"r{i}") for i, c in enumerate(calls)],
        AiMessage(text="answer"),
    ]


def stored(engine: Engine, table: sa.Table, app_id: str) -> list[dict[str, Any]]:
    """The app's rows as the database holds them (timestamps and flags as stored)."""
    columns = [c for c in table.columns if c.name not in ("id", "app_id")]
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(*[sa.cast(c, sa.String).label(c.name) for c in columns])
            .where(table.c.app_id == app_id)
            .order_by(table.c.id)
        ).all()
    return [dict(row._mapping) for row in rows]


# -- which engines take it -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", DATABASES, indirect=True)
def test_sqlite_and_psycopg_take_the_direct_path_unless_statements_are_listened_to(
    own_engine: Engine,
) -> None:
    expected = own_engine.dialect.name != "mysql"
    assert (direct_statements(own_engine) is not None) is expected
    seen: list[str] = []

    @event.listens_for(own_engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement.split()[0].upper())

    assert direct_statements(own_engine) is None
    store = store_on(own_engine)  # a listener added after the store was made still sees all
    try:
        store.append(app(), [UserMessage(text="seen")])
    finally:
        store.close()
    assert seen.count("INSERT") >= 3


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_transaction_listeners_see_every_append_through_sqlalchemy(own_engine: Engine) -> None:
    """The direct write ends its transaction on the driver connection, so an engine whose
    ``commit`` someone listens to (auditing, instrumentation) writes through SQLAlchemy."""
    assert direct_statements(own_engine) is not None
    commits: list[bool] = []

    @event.listens_for(own_engine, "commit")
    def _commit(_conn: Any) -> None:
        commits.append(True)

    assert direct_statements(own_engine) is None
    store = store_on(own_engine)
    try:
        store.append(app(), [UserMessage(text="audited")])
    finally:
        store.close()
    assert commits


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_a_refused_direct_write_leaves_its_pooled_connection_without_a_transaction(
    engine: Engine,
) -> None:
    """A check that refuses the write (an unrequested result id) rolls it back itself before
    the connection goes back to the pool, even a pool that does not roll back at check-in:
    the next write on that connection commits, nothing is left behind."""
    one = sa.create_engine(engine.url, pool_size=1, max_overflow=0, pool_reset_on_return=None)
    store = store_on(one)
    app_id = app()
    try:
        assert direct_statements(one) is not None
        with pytest.raises(UnknownToolCallError):
            store.append(app_id, [ToolResult(id="never-requested", tool_name="t", text="x")])
        with one.connect() as conn:
            driver_conn: Any = conn.connection.driver_connection
            in_transaction = (
                driver_conn.in_transaction
                if one.dialect.name == "sqlite"
                else driver_conn.info.transaction_status != 0  # psycopg: 0 is IDLE
            )
            assert not in_transaction
        store.append(app_id, [UserMessage(text="after")])
        assert count(engine, app_id) == (1, 1)
    finally:
        store.close()
        one.dispose()


@pytest.mark.parametrize("engine", DATABASES, indirect=True)
def test_the_async_engines_of_sqlite_and_psycopg_take_it_too(engine: Engine) -> None:
    async def main() -> bool:
        async_engine = make_async_engine(engine.url.render_as_string(hide_password=False))
        try:
            return (
                AsyncSqlHistory(async_engine, PLAIN)._direct
                and direct_statements(async_engine.sync_engine) is not None
            )
        finally:
            await async_engine.dispose()

    assert asyncio.run(main()) is (engine.dialect.name != "mysql")


# -- same rows, same checks ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_the_direct_write_stores_what_the_sqlalchemy_path_stores(engine: Engine) -> None:
    direct_app, generic_app = app(), app()
    now = datetime.now(timezone.utc)
    messages = turn()
    drafts = [DisplayDraft("user", "question"), DisplayDraft("assistant", "answer", "error")]
    direct_history, generic_history = SqlHistory(engine, PLAIN), SqlHistory(engine, PLAIN)
    generic(generic_history)

    issue = fresh_ids()

    for history, app_id in ((direct_history, direct_app), (generic_history, generic_app)):
        plan = plan_write(app_id, "user-1", messages, drafts, now=now, max_text_bytes=1 << 20)
        ids, step = history.insert(app_id, plan, issue)
        assert len(ids) == len(messages)
        assert step is not None and (step.before, step.after) == (0, 1)
        ids, step = history.insert(
            app_id,
            plan_write(
                app_id, None, [UserMessage(text="more")], [], now=now, max_text_bytes=1 << 20
            ),
            issue,
        )
        assert step is not None and (step.before, step.after) == (1, 2)
    for table in (original, display):
        assert stored(engine, table, direct_app) == stored(engine, table, generic_app)
        assert stored(engine, table, direct_app)  # not two empty lists


TRICKY_TEXTS = [
    'quotes " and \' and \\ backslashes \\" and a literal \\u0000 escape',
    "unicode: \u00e9\u4e2d\u6587 \U0001f600 \u05e9\u05dc\u05d5\u05dd \u2028 \ufeff",
    "control\tcharacters\r\nand %s %b %% placeholders",
    "x" * 200_000,
    "",
]


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_texts_that_json_and_sql_escape_differently_are_stored_byte_for_byte(
    engine: Engine,
) -> None:
    """PostgreSQL's direct insert carries the rows' varying columns as one JSON text; every
    text must come out of it exactly as the SQLAlchemy path stores it."""
    direct_app, generic_app = app(), app()
    now = datetime.now(timezone.utc)
    messages: list[Any] = []
    for index, text in enumerate(TRICKY_TEXTS):
        call = f"call-{index}-\u00e9\"'"
        messages += [
            UserMessage(text=text or "empty result next", metadata={'k"ey': text[:50]}),
            AiMessage(tool_requests=[ToolRequest(id=call, name="t", arguments='{"a": "\\"}')]),
            ToolResult(id=call, tool_name="t", text=text),
        ]
    drafts = [DisplayDraft("user", text) for text in TRICKY_TEXTS]
    direct_history, generic_history = SqlHistory(engine, PLAIN), SqlHistory(engine, PLAIN)
    generic(generic_history)
    issue = fresh_ids()
    for history, app_id in ((direct_history, direct_app), (generic_history, generic_app)):
        plan = plan_write(app_id, "user-1", messages, drafts, now=now, max_text_bytes=1 << 20)
        history.insert(app_id, plan, issue)
    for table in (original, display):
        assert stored(engine, table, direct_app) == stored(engine, table, generic_app)
    assert [row.message for row in direct_history.fetch(direct_app, RowRequest(100))] == messages


@pytest.mark.parametrize("engine", DATABASES, indirect=True)
def test_rows_that_differ_in_a_shared_column_are_stored_as_given(engine: Engine) -> None:
    """The store's own writes share one app, user and instant (PostgreSQL sends those columns
    once); a plan whose rows differ in them is stored row by row as given, as the
    SQLAlchemy path stores it."""
    direct_app, generic_app = app(), app()
    early = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    late = datetime(2026, 6, 7, 8, 9, 10, tzinfo=timezone.utc)
    direct_history, generic_history = SqlHistory(engine, PLAIN), SqlHistory(engine, PLAIN)
    generic(generic_history)
    issue = fresh_ids()
    for history, app_id in ((direct_history, direct_app), (generic_history, generic_app)):
        rows = [
            original_row(0, app_id, "u-1", UserMessage(text="first"), early),
            original_row(0, app_id, "u-2", AiMessage(text="second"), late),
        ]
        plan = WritePlan(
            original_rows=rows, display_rows=[], unresolved_call_ids=set(), cache_entries=[]
        )
        history.insert(app_id, plan, issue)
    direct_rows = stored(engine, original, direct_app)
    assert direct_rows == stored(engine, original, generic_app)
    assert [row["user_id"] for row in direct_rows] == ["u-1", "u-2"]
    assert direct_rows[0]["created_at"] != direct_rows[1]["created_at"]


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_ids_go_above_the_newest_row_of_either_history(engine: Engine) -> None:
    app_id = app()
    history = SqlHistory(engine, PLAIN)
    now = datetime.now(timezone.utc)
    high = (1 << 60) + uuid.uuid4().int % (1 << 40)
    with engine.begin() as conn:  # a display row written by a writer whose clock is ahead
        conn.execute(
            display.insert(),
            [
                {
                    "id": high,
                    "app_id": app_id,
                    "user_id": None,
                    "role": "user",
                    "content": "x",
                    "status": "ok",
                    "created_at": now,
                    "updated_at": now,
                    "is_deleted": False,
                }
            ],
        )
    seen: list[int] = []

    below_high = (1 << 59) + uuid.uuid4().int % (1 << 40)  # a clock behind the other writer

    def issue(count: int, above: int) -> list[int]:
        seen.append(above)
        return [max(above, below_high) + 1 + i for i in range(count)]

    plan = plan_write(app_id, None, [UserMessage(text="hi")], [], now=now, max_text_bytes=100)
    ids, _ = history.insert(app_id, plan, issue)
    # ids are issued before the app's lock (above -1: below the other writer's row), then,
    # overtaken, issued again above the newest row read under the lock
    assert seen[0] == -1 and seen[-1] == high and ids == [high + 1]
    assert count(engine, app_id) == (1, 1)
    assert generation_of(engine, app_id) == 1


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_a_result_answers_a_request_many_pages_back(engine: Engine) -> None:
    app_id = app()
    store = store_on(engine)
    try:
        first = ToolRequest(id="first-call", name="t", arguments="{}")
        (request_id,) = store.append(app_id, [AiMessage(text=None, tool_requests=[first])])
        now = datetime.now(timezone.utc)
        filler = AiMessage(
            text=None, tool_requests=[ToolRequest(id="other", name="t", arguments="{}")]
        )
        rows = []
        for i in range(REQUEST_SCAN_PAGE + 5):  # more request rows than one page holds
            # right above the request (its millisecond): the session's id generator, which
            # later writes go above, is not lifted into the future for the tests after this
            row = original_row(request_id + 1 + i, app_id, None, filler, now)
            assert row["message_type"] == TOOL_REQUEST
            rows.append(row)
        with engine.begin() as conn:
            conn.execute(original.insert(), rows)
        ids = store.append(app_id, [ToolResult(id="first-call", tool_name="t", text="late")])
        assert ids[0] > rows[-1]["id"]
        before = count(engine, app_id)
        gen = generation_of(engine, app_id)
        with pytest.raises(UnknownToolCallError):
            store.append(
                app_id,
                [UserMessage(text="x"), ToolResult(id="never-asked", tool_name="t", text="y")],
            )
        assert count(engine, app_id) == before  # nothing written, the generation unchanged
        assert generation_of(engine, app_id) == gen
    finally:
        store.close()


def count(engine: Engine, app_id: str) -> tuple[int, int]:
    with engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(
                sa.select(sa.func.count()).select_from(t).where(t.c.app_id == app_id)
            ).scalar_one()
            for t in (original, display)
        )


def generation_of(engine: Engine, app_id: str) -> int:
    with engine.connect() as conn:
        return generation.read(conn, app_id)


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_a_broken_compaction_chain_writes_nothing(engine: Engine) -> None:
    app_id = app()
    history = SqlHistory(engine, PLAIN)
    now = datetime.now(timezone.utc)
    plan = plan_write(app_id, None, [UserMessage(text="x")], [], now=now, max_text_bytes=100)
    with pytest.raises(CompactionConflictError):
        history.insert(
            app_id,
            plan,
            fresh_ids(),
            ChainCheck(app_id, 12345),
        )
    assert count(engine, app_id) == (0, 0)
    assert generation_of(engine, app_id) == 0


# -- a connection that dies ----------------------------------------------------------------------


def killer(engine: Engine, admin: Engine) -> Callable[[Any], None]:
    def kill(driver_conn: Any) -> None:
        if engine.dialect.name == "sqlite":
            driver_conn.close()
            return
        with admin.connect() as other:
            other.execute(
                sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": driver_conn.info.backend_pid}
            )

    return kill


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_a_connection_that_dies_before_the_inserts_is_retried_once(own_engine: Engine) -> None:
    """Killed between the reads and the inserts (while the ids are issued): the transaction
    died with it, so the write runs once more on a fresh connection and is stored once."""
    admin = make_engine(own_engine.url.render_as_string(hide_password=False))
    store = store_on(own_engine)
    app_id = app()
    kill = killer(own_engine, admin)
    issue = store._issue_ids
    kills: list[bool] = []
    current: list[Any] = []

    @event.listens_for(own_engine, "checkout")
    def _remember(dbapi_connection: Any, *_args: Any) -> None:
        current[:] = [dbapi_connection]

    def dying(count_: int, above: int) -> list[int]:
        if not kills:
            kills.append(True)
            kill(current[0])
        return issue(count_, above)

    store._issue_ids = dying  # type: ignore[method-assign]
    try:
        assert direct_statements(own_engine) is not None
        ids = store.append(app_id, [UserMessage(text="one"), UserMessage(text="two")])
        assert kills and len(ids) == 2
        assert [m.text for m in store.load_window(app_id, 10)] == ["one", "two"]
        assert count(own_engine, app_id) == (2, 2)
        assert generation_of(own_engine, app_id) == 1
    finally:
        store.close()
        admin.dispose()


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_the_async_direct_write_retries_a_dead_connection_once(engine: Engine) -> None:
    url = engine.url.render_as_string(hide_password=False)
    admin = make_engine(url)
    kill = killer(engine, admin)
    app_id = app()

    async def main() -> None:
        store = AsyncMemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID))
        issue = store._issue_ids
        kills: list[bool] = []
        current: list[Any] = []

        @event.listens_for(store.engine.sync_engine, "checkout")
        def _remember(dbapi_connection: Any, *_args: Any) -> None:
            current[:] = [dbapi_connection.driver_connection]

        def dying(count_: int, above: int) -> list[int]:
            if not kills:
                kills.append(True)
                target = current[0]
                kill(getattr(target, "_conn", target))
            return issue(count_, above)

        store._issue_ids = dying  # type: ignore[method-assign]
        try:
            assert direct_statements(store.engine.sync_engine) is not None
            ids = await store.append(app_id, [UserMessage(text="one"), UserMessage(text="two")])
            assert kills and len(ids) == 2
            assert [m.text for m in await store.load_window(app_id, 10)] == ["one", "two"]
        finally:
            await store.close()

    try:
        asyncio.run(main())
        assert count(engine, app_id) == (2, 2)
    finally:
        admin.dispose()


# -- the lease lapses inside the transaction: appends and compactions retry ------------------


def lapse_once(store: MemoryStore | AsyncMemoryStore) -> list[bool]:
    """Make the lease lapse (as after a pause) the first time the write issues ids."""
    issue = store._issue_ids
    lapsed: list[bool] = []

    def issuing(count_: int, above: int) -> list[int]:
        if not lapsed:
            lapsed.append(True)
            lease = store._lease
            assert lease is not None
            store._lease = lease.renewed(lease.renewed_at - 10 * lease.ttl_seconds)
        return issue(count_, above)

    store._issue_ids = issuing  # type: ignore[method-assign]
    return lapsed


@pytest.mark.parametrize("scratch_database_url", DATABASES, indirect=True)
def test_appends_and_compactions_renew_and_retry_when_the_lease_lapsed_inside(
    scratch_database_url: str,
) -> None:
    with MemoryStore(Settings(database_url=scratch_database_url, worker_id=0)) as setup:
        setup.migrate()
    with MemoryStore(Settings(database_url=scratch_database_url)) as store:
        app_id = app()
        store.append(app_id, turn())  # leases an id
        renewals = store.metrics()["lease_renewals"]
        lapsed = lapse_once(store)
        store.append(app_id, [UserMessage(text="after a pause")])
        assert lapsed and store.metrics()["lease_renewals"] >= renewals + 1
        lapsed = lapse_once(store)
        report = store.compact(app_id, lambda messages: "summary", keep_last_messages=1)
        assert lapsed and report.compacted
        assert store.metrics()["lease_renewals"] >= renewals + 2
        assert count(store.engine, app_id)[0] == len(turn()) + 2
    assert_async_retries(scratch_database_url)


def assert_async_retries(url: str) -> None:
    async def main() -> None:
        async with AsyncMemoryStore(Settings(database_url=url)) as store:
            app_id = app()
            await store.append(app_id, turn())
            lapsed = lapse_once(store)
            await store.append(app_id, [UserMessage(text="after a pause")])
            assert lapsed
            lapsed = lapse_once(store)
            report = await store.compact(app_id, lambda messages: "s", keep_last_messages=1)
            assert lapsed and report.compacted

    asyncio.run(main())


@pytest.mark.parametrize("engine", DIRECT, indirect=True)
def test_a_lease_lost_inside_the_transaction_leaves_nothing_written(engine: Engine) -> None:
    app_id = app()
    history = SqlHistory(engine, PLAIN)
    now = datetime.now(timezone.utc)
    plan = plan_write(app_id, None, [UserMessage(text="x")], [], now=now, max_text_bytes=100)

    def lapsed(count_: int, above: int) -> list[int]:
        raise WorkerLeaseLostError("no usable worker-id lease")

    with pytest.raises(WorkerLeaseLostError):
        history.insert(app_id, plan, lapsed)
    assert count(engine, app_id) == (0, 0)
    assert generation_of(engine, app_id) == 0


@pytest.mark.parametrize("scratch_database_url", DIRECT, indirect=True)
def test_ids_issued_before_a_lease_lapsed_while_waiting_for_the_lock_are_never_written(
    scratch_database_url: str,
) -> None:
    """The direct write issues ids before it waits for the app's lock; a lease that lapsed
    meanwhile makes it roll back, renew, and write fresh ids."""
    with MemoryStore(Settings(database_url=scratch_database_url, worker_id=0)) as setup:
        setup.migrate()
    with MemoryStore(Settings(database_url=scratch_database_url)) as store:
        app_id = app()
        store.append(app_id, [UserMessage(text="leases an id")])
        issue = store._issue_ids
        first: list[int] = []

        def lapsing_after_issue(count_: int, above: int) -> list[int]:
            ids = issue(count_, above)
            if not first and count_:
                first.extend(ids)
                lease = store._lease
                assert lease is not None
                store._lease = lease.renewed(lease.renewed_at - 10 * lease.ttl_seconds)
            return ids

        store._issue_ids = lapsing_after_issue  # type: ignore[method-assign]
        ids = store.append(app_id, [UserMessage(text="after the wait")])
        assert first and not set(first) & set(ids)
        with store.engine.connect() as conn:
            stored_ids = set(
                conn.execute(sa.select(original.c.id).where(original.c.app_id == app_id)).scalars()
            )
        assert not set(first) & stored_ids and set(ids) <= stored_ids
        assert count(store.engine, app_id) == (2, 2)
