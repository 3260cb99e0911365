"""Storage errors: classified by driver code (issue 9, item 9) and free of chat data (item 10).

Every failure here is a real one from a real database: a read-only session, a duplicate id, a
value too long for its column, a connection killed mid-statement, a database or role that does
not exist, a refused port. The message text and the user id carry a known secret, which must
appear nowhere: not in ``str``/``repr`` of the error, not in the traceback with its chain, not
in any log record (DEBUG, every logger), not in the CLI's output.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url

from memstore import MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.core.crypto import PLAIN
from memstore.core.db_errors import DriverFailure, FailureKind, classify
from memstore.core.plans import WritePlan
from memstore.core.rows import original_row
from memstore.errors import IdCollisionError, SchemaError, StorageError
from memstore.sql.aio import AsyncSqlHistory
from memstore.sql.engine import make_engine, translated_errors
from memstore.sql.repository import SqlHistory
from tests.conftest import MYSQL_URL, POSTGRES_URL, SESSION_WORKER_ID, migrated_engine
from tests.integration.conftest import free_port

SECRET = "SECRET-7f3a9 the relation does not exist"
SECRET_USER = "secret-user-7f3a9"
SECRET_MARKS = ("7f3a9",)

DATABASES = ["sqlite", "postgres", "mysql"]


def leaked(error: BaseException) -> str:
    """Everything an error shows: str, repr and the traceback with its printed chain."""
    return "\n".join([str(error), repr(error), "".join(traceback.format_exception(error))])


def assert_no_secret(text: str) -> None:
    for mark in SECRET_MARKS:
        assert mark not in text


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated database of the requested kind (``request.param``)."""
    engine = migrated_engine(request.param, tmp_path_factory)
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every logger at DEBUG (SQLAlchemy's included), propagated to caplog."""
    caplog.set_level(logging.DEBUG)
    for name in ("sqlalchemy", "sqlalchemy.engine", "sqlalchemy.pool", "memstore"):
        caplog.set_level(logging.DEBUG, logger=name)
    yield caplog


def read_only_engine(url: str) -> Engine:
    """An engine whose sessions refuse every write: a real database error on any insert."""
    engine = make_engine(url)
    backend = engine.dialect.name

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        if backend == "sqlite":
            cursor.execute("PRAGMA query_only = ON")
        elif backend == "postgresql":
            cursor.execute("SET default_transaction_read_only = on")
        else:
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
        cursor.close()
        if backend == "postgresql":
            dbapi_connection.commit()

    return engine


def secret_row(row_id: int, app_id: str) -> dict[str, Any]:
    return original_row(
        row_id, app_id, SECRET_USER, UserMessage(text=SECRET), datetime.now(timezone.utc)
    )


def plan_of(rows: list[dict[str, Any]]) -> WritePlan:
    """A write plan of raw original rows (their ids come from :func:`fixed_ids`)."""
    return WritePlan(
        original_rows=rows, display_rows=[], unresolved_call_ids=set(), cache_entries=[]
    )


def fixed_ids(*ids: int) -> Callable[[int, int], list[int]]:
    """An id issuer that hands out exactly ``ids`` (to provoke a duplicate key)."""
    return lambda count, above: list(ids)[:count]


# -- item 9: classification by code ---------------------------------------------------------


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_a_write_failure_whose_parameters_say_does_not_exist_is_no_schema_error(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    engine = read_only_engine(db_url)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    try:
        with pytest.raises(StorageError) as raised:
            store.append(f"ro-{uuid.uuid4().hex[:8]}", [UserMessage(text=SECRET)], SECRET_USER)
        assert not isinstance(raised.value, SchemaError)
        assert "migrate" not in str(raised.value)
        assert_no_secret(leaked(raised.value))
        assert_no_secret(all_logs.text)
    finally:
        store.close()
        engine.dispose()


def variant(url: str | None, name: str, **parts: Any) -> str:
    if not url:
        pytest.skip(f"MEMSTORE_TEST_{name.upper()}_URL is not set")
    return make_url(url).set(**parts).render_as_string(hide_password=False)


def broken_urls() -> list[tuple[str, str, dict[str, Any], str]]:
    """(database, label, URL parts to change, what the message must name)."""
    missing = f"memstore_nodb_{uuid.uuid4().hex[:8]}"
    role = f"memstore_norole_{uuid.uuid4().hex[:8]}"
    return [
        ("postgres", "wrong database", {"database": missing}, missing),
        ("postgres", "unknown role", {"username": role}, role),
        ("postgres", "refused port", {"port": 0}, "refused"),
        ("mysql", "wrong database", {"database": missing}, missing),
        ("mysql", "unknown user", {"username": role, "password": "pw-7f3a9"}, role),
        ("mysql", "refused port", {"port": 0}, "refused"),
    ]


@pytest.mark.parametrize(
    ("database", "label", "parts", "named"),
    broken_urls(),
    ids=[f"{case[0]}-{case[1]}" for case in broken_urls()],
)
def test_connection_and_authentication_failures_are_storage_errors_with_the_cause(
    database: str, label: str, parts: dict[str, Any], named: str
) -> None:
    if parts.get("port") == 0:
        parts = {**parts, "port": free_port()}
    url = variant(POSTGRES_URL if database == "postgres" else MYSQL_URL, database, **parts)
    with (
        MemoryStore(Settings(database_url=url, worker_id=SESSION_WORKER_ID)) as store,
        pytest.raises(StorageError) as raised,
    ):
        store.load_window("app-1")
    error = raised.value
    assert not isinstance(error, SchemaError), label
    assert error.kind in ("connection failed", "authentication failed")
    assert named in str(error)
    assert "migrate" not in str(error)
    assert "pw-7f3a9" not in leaked(error)


def test_an_unopenable_sqlite_file_is_a_storage_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"
    with MemoryStore(Settings(database_url=url)) as store, pytest.raises(StorageError) as raised:
        store.load_window("app-1")
    assert not isinstance(raised.value, SchemaError)
    assert raised.value.kind == "connection failed"


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_a_missing_table_is_a_schema_error_with_its_code(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with (
            pytest.raises(SchemaError) as raised,
            engine.connect() as conn,
            translated_errors("reading"),
        ):
            conn.execute(sa.text("SELECT * FROM memstore_no_such_table_7"))
        assert "migrate" in str(raised.value)
        if engine.dialect.name != "sqlite":
            assert raised.value.code in ("42P01", "1146")
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (DriverFailure("postgresql", "42P01", "relation x does not exist", "X"), "missing schema"),
        (DriverFailure("postgresql", "42703", "", "X"), "missing schema"),
        (DriverFailure("postgresql", "3D000", 'database "x" does not exist', "X"), "connection"),
        (DriverFailure("postgresql", "28000", 'role "x" does not exist', "X"), "authentication"),
        (
            DriverFailure("postgresql", None, "does not exist", "OperationalError", True),
            "connection",
        ),
        (DriverFailure("postgresql", None, "does not exist", "ProgrammingError"), "database error"),
        (DriverFailure("postgresql", "22021", "does not exist", "X"), "value rejected"),
        (DriverFailure("postgresql", "23505", "", "X"), "duplicate key"),
        (DriverFailure("mysql", "1146", "Table 'x' doesn't exist", "X"), "missing schema"),
        (DriverFailure("mysql", "1054", "", "X"), "missing schema"),
        (DriverFailure("mysql", "1049", "Unknown database", "X"), "connection"),
        (DriverFailure("mysql", "1045", "Access denied", "X"), "authentication"),
        (DriverFailure("mysql", "2003", "Can't connect", "X"), "connection"),
        (DriverFailure("mysql", "1406", "doesn't exist", "X"), "value rejected"),
        (DriverFailure("sqlite", None, "no such table: x", "OperationalError"), "missing schema"),
        (DriverFailure("sqlite", None, "near x: no such table", "X"), "database error"),
        (DriverFailure("sqlite", None, "x does not exist", "OperationalError"), "database error"),
        (DriverFailure("other", None, "does not exist", "X"), "database error"),
    ],
)
def test_classification_reads_codes_and_sqlite_message_starts_only(
    failure: DriverFailure, kind: str
) -> None:
    assert classify(failure).value.startswith(kind)


def test_every_failure_kind_is_reachable() -> None:
    assert {kind.value for kind in FailureKind} >= {"missing schema", "value rejected"}


# -- item 10: no chat data in errors or logs -------------------------------------------------


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_a_duplicate_id_error_carries_no_data(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db_url)
    app = f"dup-{uuid.uuid4().hex[:8]}"
    row_id = 1_000_000 + uuid.uuid4().int % 10**12
    try:
        with pytest.raises(IdCollisionError) as raised:
            SqlHistory(engine, PLAIN).insert(
                app, plan_of([secret_row(0, app), secret_row(0, app)]), fixed_ids(row_id, row_id)
            )
        assert_no_secret(leaked(raised.value))
        assert_no_secret(all_logs.text)
        assert raised.value.code in (None, "23505", "1062")
    finally:
        engine.dispose()


@pytest.mark.parametrize("db_url", ["postgres", "mysql"], indirect=True)
def test_a_value_too_long_error_carries_no_data(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db_url)
    long_app = "app-" + SECRET * 20  # longer than the column (128 characters, 512 bytes)
    try:
        with pytest.raises(StorageError) as raised:
            SqlHistory(engine, PLAIN).insert(
                long_app, plan_of([secret_row(0, long_app)]), fixed_ids(42)
            )
        assert raised.value.kind == "value rejected"
        assert raised.value.code in ("22001", "1406")
        assert_no_secret(leaked(raised.value))
        assert raised.value.__cause__ is None and raised.value.__suppress_context__
        assert_no_secret(all_logs.text)
    finally:
        engine.dispose()


def kill_connection(engine: Engine, admin: Engine | None, raw: Any) -> None:
    """Break one pooled DBAPI connection as a server restart or a network cut would."""
    if engine.dialect.name == "sqlite":
        raw.close()
        return
    assert admin is not None
    with admin.connect() as other:
        if engine.dialect.name == "postgresql":
            other.execute(
                sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": raw.info.backend_pid}
            )
        else:
            other.execute(sa.text(f"KILL {int(raw.thread_id())}"))


def kill_own_connection_before_insert(engine: Engine, admin: Engine | None, times: int = 2) -> None:
    """Break the connection the moment an INSERT is about to run, ``times`` times (a write
    that finds its connection dead before the commit is retried once on a fresh one)."""
    done: list[bool] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _kill(conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if len(done) >= times or not statement.lstrip().upper().startswith("INSERT"):
            return
        done.append(True)
        kill_connection(engine, admin, conn.connection.dbapi_connection)


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_a_connection_broken_mid_write_carries_no_data(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(db_url)
    admin = None if engine.dialect.name == "sqlite" else make_engine(db_url)
    kill_own_connection_before_insert(engine, admin)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    try:
        with pytest.raises(StorageError) as raised:
            store.append(f"kill-{uuid.uuid4().hex[:8]}", [UserMessage(text=SECRET)], SECRET_USER)
        assert not isinstance(raised.value, SchemaError)
        assert_no_secret(leaked(raised.value))
        assert_no_secret(all_logs.text)
    finally:
        store.close()
        engine.dispose()
        if admin is not None:
            admin.dispose()


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_a_write_whose_connection_dies_before_commit_is_retried_once(db_url: str) -> None:
    engine = make_engine(db_url)
    admin = None if engine.dialect.name == "sqlite" else make_engine(db_url)
    kill_own_connection_before_insert(engine, admin, times=1)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    app = f"retry-{uuid.uuid4().hex[:8]}"
    try:
        ids = store.append(app, [UserMessage(text="one"), UserMessage(text="two")])
        assert len(ids) == 2
        # written exactly once: the first attempt's transaction died with its connection
        assert [m.text for m in store.load_window(app, 10)] == ["one", "two"]
        assert [e.text for e in store.history(app)] == ["two", "one"]
    finally:
        store.purge(app)
        store.close()
        engine.dispose()
        if admin is not None:
            admin.dispose()


@pytest.mark.parametrize("db_url", ["postgres", "mysql"], indirect=True)
def test_a_read_on_a_pooled_connection_killed_meanwhile_is_retried(db_url: str) -> None:
    """No ping on a just-used connection (it would cost a round trip per read): the read
    that finds it dead runs once more on a fresh connection."""
    engine = make_engine(db_url)
    admin = make_engine(db_url)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    app = f"reread-{uuid.uuid4().hex[:8]}"
    try:
        store.append(app, [UserMessage(text="kept")])
        for _ in range(2):
            pooled = [engine.connect() for _ in range(max(1, engine.pool.checkedin()))]
            raws = [conn.connection.dbapi_connection for conn in pooled]
            for conn in pooled:
                conn.close()
            for raw in raws:  # every pooled connection: whichever the read checks out
                kill_connection(engine, admin, raw)
            assert [m.text for m in store.load_window(app, 5)] == ["kept"]
    finally:
        store.purge(app)
        store.close()
        engine.dispose()
        admin.dispose()


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_a_failed_collector_turn_logs_no_data(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    engine = read_only_engine(db_url)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    try:
        app = f"coll-{uuid.uuid4().hex[:8]}"
        with (
            pytest.raises(StorageError) as raised,
            store.collector(app, user_id=SECRET_USER) as turn,
        ):
            turn.on_text(SECRET)
        assert_no_secret(leaked(raised.value))
        assert "collector" in all_logs.text  # the failure was logged...
        assert_no_secret(all_logs.text)  # ...without the turn's text or the user id
    finally:
        store.close()
        engine.dispose()


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_the_async_store_raises_the_same_data_free_errors(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    async def main() -> StorageError:
        store = AsyncMemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID))
        app = f"adup-{uuid.uuid4().hex[:8]}"
        try:
            await store.append(app, [UserMessage(text="first")])
            row_id = 2_000_000 + uuid.uuid4().int % 10**12
            try:
                await AsyncSqlHistory(store.engine, store.cipher).insert(
                    app,
                    plan_of([secret_row(0, app), secret_row(0, app)]),
                    fixed_ids(row_id, row_id),
                )
            except StorageError as error:
                return error
            raise AssertionError("no error")
        finally:
            await store.close()

    error = asyncio.run(main())
    assert isinstance(error, IdCollisionError)
    assert_no_secret(leaked(error))
    assert_no_secret(all_logs.text)


# -- the CLI ---------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEMSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def read_only_url(db_url: str) -> str:
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        return f"sqlite:///file:{url.database}?mode=ro&uri=true"
    if url.get_backend_name() == "postgresql":
        return url.update_query_dict(
            {"options": "-c default_transaction_read_only=on"}
        ).render_as_string(hide_password=False)
    return url.update_query_dict(
        {"init_command": "SET SESSION TRANSACTION READ ONLY"}
    ).render_as_string(hide_password=False)


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_the_cli_prints_no_parameters_of_a_failed_purge(db_url: str) -> None:
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID))
    store.append(f"cli-{uuid.uuid4().hex[:8]}", [UserMessage(text=SECRET)], SECRET_USER)
    store.close()
    done = run_cli(
        "purge", "--user-id", SECRET_USER, "--yes", "--database-url", read_only_url(db_url)
    )
    assert done.returncode == 2, done.stderr
    assert "error:" in done.stderr
    assert "migrate" not in done.stderr
    assert_no_secret(done.stderr)
    # stdout holds only the command's own count line, which names the user id on purpose
    assert all(line.startswith(f"user {SECRET_USER!r}") for line in done.stdout.splitlines())


@pytest.mark.parametrize("database", ["postgres", "mysql"])
def test_the_cli_names_a_missing_database_instead_of_advising_migrate(database: str) -> None:
    missing = f"memstore_nodb_{uuid.uuid4().hex[:8]}"
    url = variant(POSTGRES_URL if database == "postgres" else MYSQL_URL, database, database=missing)
    done = run_cli("show", "app-1", "--database-url", url)
    assert done.returncode == 2
    assert missing in done.stderr and "connection failed" in done.stderr
    assert "migrate" not in done.stderr


@pytest.mark.parametrize("db_url", DATABASES, indirect=True)
def test_an_engine_passed_in_that_shows_parameters_still_leaks_nothing(
    db_url: str, all_logs: pytest.LogCaptureFixture
) -> None:
    engine = sa.create_engine(db_url)  # the caller's engine: hide_parameters is off
    admin = None if engine.dialect.name == "sqlite" else make_engine(db_url)
    kill_own_connection_before_insert(engine, admin)
    store = MemoryStore(Settings(database_url=db_url, worker_id=SESSION_WORKER_ID), engine=engine)
    try:
        with pytest.raises(StorageError) as raised:
            store.append(f"own-{uuid.uuid4().hex[:8]}", [UserMessage(text=SECRET)], SECRET_USER)
        assert_no_secret(leaked(raised.value))
        assert raised.value.__cause__ is None  # SQLAlchemy's message would hold the parameters
    finally:
        store.close()
        engine.dispose()
        if admin is not None:
            admin.dispose()


@pytest.mark.parametrize("database", ["postgres", "mysql"])
def test_cli_migrate_on_a_missing_database_is_a_clean_error(database: str) -> None:
    missing = f"memstore_nodb_{uuid.uuid4().hex[:8]}"
    url = variant(POSTGRES_URL if database == "postgres" else MYSQL_URL, database, database=missing)
    done = run_cli("migrate", "--database-url", url)
    assert done.returncode == 2
    assert done.stderr.startswith("error: migrating failed: connection failed")
    assert missing in done.stderr and "Traceback" not in done.stderr


def test_an_undecodable_cached_window_is_logged_without_its_text(
    sqlite_store: MemoryStore, all_logs: pytest.LogCaptureFixture
) -> None:
    import fakeredis

    from memstore.cache import keys
    from memstore.cache.base import WindowPolicy
    from memstore.cache.redis_window import RedisWindowCache

    client = fakeredis.FakeRedis()
    cache = RedisWindowCache(client, WindowPolicy.from_settings(sqlite_store.settings))
    with MemoryStore(sqlite_store.settings, engine=sqlite_store.engine, cache=cache) as store:
        store.append("app-c", [UserMessage(text="hello")])
        store.memory("app-c").messages()
        damaged = b'1\x1e{"type": "user", "text": ["7f3a9"]}'  # text must be a str
        client.rpush(keys.window_key("app-c"), damaged)
        assert [m.text for m in store.memory("app-c").messages()] == ["hello"]  # rebuilt
    assert "does not decode" in all_logs.text
    assert_no_secret(all_logs.text)
