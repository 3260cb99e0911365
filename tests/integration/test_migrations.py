"""The shipped Alembic migrations build exactly ``memstore.sql.schema.metadata`` on every database.

Each test runs on a database of its own (a SQLite file in ``tmp_path``, or a scratch
``memstore_mig_<random>`` database on PostgreSQL / MariaDB that is dropped afterwards), so the
shared databases' tables are never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Engine

from memstore import (
    AiMessage,
    MemoryStore,
    SchemaError,
    Settings,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.sql import migrate
from memstore.sql.engine import make_engine
from memstore.sql.schema import DISPLAY_TABLE, ORIGINAL_TABLE, ExactString, metadata

DATABASES = ["sqlite", "postgres", "mysql"]
MEMSTORE_TABLES = set(metadata.tables)  # every table memstore owns, present and future
assert {ORIGINAL_TABLE, DISPLAY_TABLE} <= MEMSTORE_TABLES

on_each_database = pytest.mark.parametrize(
    "scratch_database_url", DATABASES, indirect=True, ids=DATABASES
)

TURN = [
    UserMessage(text="Create a.txt"),
    AiMessage(
        text=None,
        tool_requests=[ToolRequest(id="call_1", name="write_file", arguments='{"p": "a"}')],
    ),
    ToolResult(id="call_1", tool_name="write_file", text="ok"),
    AiMessage(text="Created a.txt."),
]


@pytest.fixture
def engine(scratch_database_url: str) -> Iterator[Engine]:
    engine = make_engine(scratch_database_url)
    yield engine
    engine.dispose()


def schema_diff(engine: Engine, target: sa.MetaData = metadata, **opts: Any) -> list[Any]:
    """What ``alembic revision --autogenerate`` would emit to turn the live schema into
    ``target``, compared the way memstore's ``migrations/env.py`` compares (types and server
    defaults) unless ``opts`` are given."""
    options = opts or migrate.compare_options()
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn, opts=options), target))


def memstore_tables(engine: Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names()) & MEMSTORE_TABLES


def metadata_with(change: Callable[[sa.Table], None]) -> sa.MetaData:
    """A copy of the schema metadata with ``change`` applied to the original-history table."""
    copy = sa.MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(copy)
    change(copy.tables[ORIGINAL_TABLE])
    return copy


@on_each_database
def test_upgrade_head_builds_exactly_the_schema_metadata(engine: Engine) -> None:
    assert migrate.current_revision(engine) is None
    assert memstore_tables(engine) == set()

    migrate.upgrade(engine)

    head = migrate.head_revision()
    assert head is not None
    assert migrate.current_revision(engine) == head
    assert memstore_tables(engine) == MEMSTORE_TABLES
    # With alembic's default options (types compared, server defaults not)...
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    # ...and the way migrations/env.py compares: types (ExactString is VARBINARY on
    # MySQL/MariaDB), nullability, indexes and server defaults.
    assert schema_diff(engine) == []


@on_each_database
def test_the_comparison_sees_real_differences(engine: Engine) -> None:
    """The empty diff above means something: a changed length, a changed server default, a
    dropped index and (on MySQL/MariaDB) VARCHAR instead of VARBINARY are all reported."""
    migrate.upgrade(engine)

    def shorter_app_id(table: sa.Table) -> None:
        table.c.app_id.type = ExactString(64)

    def true_by_default(table: sa.Table) -> None:
        table.append_column(
            sa.Column("is_deleted", sa.Boolean(), nullable=False, server_default=sa.true()),
            replace_existing=True,
        )

    def without_user_index(table: sa.Table) -> None:
        table.indexes.discard(next(i for i in table.indexes if i.name.endswith("user_id")))

    def kinds(diff: list[Any]) -> set[str]:
        return {(item[0] if isinstance(item, list) else item)[0] for item in diff}

    assert kinds(schema_diff(engine, metadata_with(shorter_app_id))) == {"modify_type"}
    assert kinds(schema_diff(engine, metadata_with(true_by_default))) == {"modify_default"}
    assert kinds(schema_diff(engine, metadata_with(without_user_index))) == {"remove_index"}

    def plain_varchar(table: sa.Table) -> None:
        table.c.app_id.type = sa.String(128)

    if engine.dialect.name in ("mysql", "mariadb"):
        assert kinds(schema_diff(engine, metadata_with(plain_varchar))) == {"modify_type"}
    else:  # ExactString is a plain VARCHAR there
        assert schema_diff(engine, metadata_with(plain_varchar)) == []


@on_each_database
def test_downgrade_base_removes_the_tables_and_upgrade_works_again(
    scratch_database_url: str, engine: Engine
) -> None:
    head = migrate.head_revision()
    migrate.upgrade(engine)
    with MemoryStore(Settings(database_url=scratch_database_url), engine=engine) as store:
        store.append("app-1", TURN)
        assert store.load_window("app-1") == TURN

    migrate.downgrade(engine, "base")
    assert memstore_tables(engine) == set()
    assert migrate.current_revision(engine) is None

    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == head
    assert memstore_tables(engine) == MEMSTORE_TABLES
    assert schema_diff(engine) == []
    with MemoryStore(Settings(database_url=scratch_database_url), engine=engine) as store:
        assert store.load_window("app-1") == []  # the downgrade dropped the data with the tables
        store.append("app-1", TURN)
        assert store.memory("app-1").messages() == TURN

    migrate.upgrade(engine)  # at head already: a no-op
    assert migrate.current_revision(engine) == head


def assert_every_operation_raises_schema_error(store: MemoryStore) -> None:
    operations: list[Callable[[], object]] = [
        lambda: store.append("app-1", [UserMessage(text="hi")]),
        lambda: store.memory("app-1").add(UserMessage(text="hi")),
        lambda: store.memory("app-1").messages(),
        lambda: store.load_window("app-1"),
        lambda: store.reload("app-1"),
        lambda: store.history("app-1"),
        lambda: store.purge("app-1"),
    ]
    for operation in operations:
        with pytest.raises(SchemaError) as raised:
            operation()
        assert "migrate" in raised.value.detail


@on_each_database
def test_operations_on_an_unmigrated_database_raise_schema_error(
    scratch_database_url: str, engine: Engine
) -> None:
    with MemoryStore(Settings(database_url=scratch_database_url, redis_url=None)) as store:
        assert_every_operation_raises_schema_error(store)
    assert memstore_tables(engine) == set()  # nothing was created behind the caller's back

    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    with MemoryStore(Settings(database_url=scratch_database_url, redis_url=None)) as store:
        assert_every_operation_raises_schema_error(store)


@on_each_database
def test_0009_gives_existing_guard_records_the_user_of_their_answers(engine: Engine) -> None:
    """Migration 0009 on a populated database: a loop-guard record gets the user whose
    tool-result rows answer its call id, when exactly one user (and no row without a user)
    answered it; the others stay NULL, and the records keep everything else."""
    migrate.upgrade(engine, "0008")
    original = sa.table(
        ORIGINAL_TABLE,
        *(sa.column(name) for name in ("id", "app_id", "user_id", "message_type")),
        *(sa.column(name) for name in ("tool_call_id", "payload", "created_at", "updated_at")),
    )
    executions = sa.table(
        "tool_executions",
        *(sa.column(name) for name in ("app_id", "idempotency_key", "tool_name")),
        *(sa.column(name) for name in ("arguments_digest", "state", "attempts", "tool_call_id")),
        *(sa.column(name) for name in ("result", "created_at", "updated_at")),
    )
    now = sa.func.current_timestamp()
    answers = [  # (app, user, call id) of tool-result rows
        ("a", "alice", "c-alice"),
        ("a", "alice", "c-twice"),  # answered twice by one user: still hers
        ("a", "alice", "c-twice"),
        ("a", "alice", "c-shared"),
        ("a", "bob", "c-shared"),
        ("a", None, "c-anonymous"),
        ("b", "bob", "c-alice"),  # another app's call id does not count
    ]
    records = {  # idempotency key -> (app, call id)
        "k-alice": ("a", "c-alice"),
        "k-twice": ("a", "c-twice"),
        "k-shared": ("a", "c-shared"),
        "k-anonymous": ("a", "c-anonymous"),
        "k-unanswered": ("a", "c-nobody"),
        "k-no-call": ("a", None),
        "k-bob": ("b", "c-alice"),
    }
    with engine.begin() as conn:
        for row_id, (app, user, call) in enumerate(answers, start=1):
            conn.execute(
                original.insert().values(
                    id=row_id,
                    app_id=app,
                    user_id=user,
                    message_type="toolExecutionResult",
                    tool_call_id=call,
                    payload="{}",
                    created_at=now,
                    updated_at=now,
                )
            )
        for key, (app, call) in records.items():
            conn.execute(
                executions.insert().values(
                    app_id=app,
                    idempotency_key=key,
                    tool_name="send",
                    arguments_digest="d",
                    state="succeeded",
                    attempts=1,
                    tool_call_id=call,
                    result=f"result of {key}",
                    created_at=now,
                    updated_at=now,
                )
            )
    migrate.upgrade(engine)
    with engine.connect() as conn:
        stored = metadata.tables["tool_executions"].c
        rows = conn.execute(sa.select(stored.idempotency_key, stored.user_id, stored.result)).all()
    assert {row[0]: row[1] for row in rows} == {
        "k-alice": "alice",
        "k-twice": "alice",
        "k-shared": None,
        "k-anonymous": None,
        "k-unanswered": None,
        "k-no-call": None,
        "k-bob": "bob",
    }
    assert all(row[2] == f"result of {row[0]}" for row in rows)
    assert schema_diff(engine) == []


@on_each_database
def test_0010_keeps_every_history_row_and_id_both_ways(
    scratch_database_url: str, engine: Engine
) -> None:
    """Migration 0010 on a populated database (SQLite rebuilds both history tables, with the
    id as the rowid; the others are unchanged): every row, id and value is kept, upgrading and
    downgrading, and the store reads and writes the migrated history."""
    migrate.upgrade(engine, "0009")
    with MemoryStore(Settings(database_url=scratch_database_url), engine=engine) as store:
        for turn in range(3):
            for app in ("app-b", "app-a"):
                messages: list[Any] = [*TURN[:3], AiMessage(text=f"{app} turn {turn}")]
                store.append(app, messages)
    original, display = metadata.tables[ORIGINAL_TABLE], metadata.tables[DISPLAY_TABLE]
    big = 2**63 - 1  # the largest id: still one on every database and as SQLite's rowid
    with engine.begin() as conn:
        row = conn.execute(sa.select(original).order_by(original.c.id.desc()).limit(1)).one()
        conn.execute(original.insert().values({**row._asdict(), "id": big, "app_id": "app-c"}))

    def stored() -> list[list[tuple[Any, ...]]]:
        with engine.connect() as conn:
            return [
                [tuple(row) for row in conn.execute(sa.select(table).order_by(table.c.id))]
                for table in (original, display)
            ]

    def rowids_are_ids() -> bool:
        with engine.connect() as conn:
            pairs = conn.exec_driver_sql(f"SELECT rowid, id FROM {ORIGINAL_TABLE}").all()
        return all(rowid == row_id for rowid, row_id in pairs)

    before = stored()
    assert len(before[0]) == 6 * 4 + 1 and len(before[1]) >= 6
    windows = {app: store_window(scratch_database_url, engine, app) for app in ("app-a", "app-b")}

    migrate.upgrade(engine)
    assert stored() == before
    assert schema_diff(engine) == []
    if engine.dialect.name == "sqlite":
        assert rowids_are_ids()
    with MemoryStore(Settings(database_url=scratch_database_url), engine=engine) as store:
        for app, window in windows.items():
            assert store.load_window(app) == window
        store.append("app-a", [UserMessage(text="after the upgrade")])
    after_upgrade = stored()
    assert after_upgrade[0][: len(before[0]) - 1] == before[0][:-1]

    migrate.downgrade(engine, "0009")
    assert stored() == after_upgrade
    if engine.dialect.name == "sqlite":
        assert not rowids_are_ids()
        assert schema_diff(engine) != []  # BIGINT again: the id is no longer the rowid
    migrate.upgrade(engine)
    assert stored() == after_upgrade
    assert schema_diff(engine) == []


def store_window(url: str, engine: Engine, app_id: str) -> list[Any]:
    with MemoryStore(Settings(database_url=url), engine=engine) as store:
        return list(store.load_window(app_id))
