"""``memstore import --from langchain-sql`` on tables written by the real langchain-community
``SQLChatMessageHistory`` (SQLite, PostgreSQL, MariaDB), and ``--from langchain4j-json``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from memstore import MemoryStore, Settings, ToolResult
from memstore.cli import cli
from memstore.formats import validate
from memstore.sql import admin
from tests.conftest import migrated_engine

pytest.importorskip("langchain_core")
sql_history = pytest.importorskip("langchain_community.chat_message_histories.sql")

from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from memstore.adapters.langchain import MemstoreChatMessageHistory  # noqa: E402

GOOD: list[BaseMessage] = [
    SystemMessage("You book trips."),
    HumanMessage("weather in Oslo and Bergen?"),
    AIMessage(
        "",
        tool_calls=[
            {"id": "call_w1", "name": "weather", "args": {"city": "Oslo"}},
            {"id": "call_w2", "name": "weather", "args": {"city": "Bergen"}},
        ],
    ),
    ToolMessage("rain, 7C", tool_call_id="call_w1", name="weather"),
    ToolMessage("no such city", tool_call_id="call_w2", status="error"),
    AIMessage("Rain in Oslo; Bergen is unknown."),
]
LEGACY: list[BaseMessage] = [
    ToolMessage("orphan", tool_call_id="call_lost"),
    HumanMessage("book it"),
    AIMessage("", tool_calls=[{"id": "call_b1", "name": "book", "args": {}}]),
    HumanMessage("hello?"),
]


def write_history(url: str, table: str, sessions: dict[str, list[BaseMessage]]) -> None:
    """Fill ``table`` at ``url`` with the real ``SQLChatMessageHistory``."""
    for session_id, messages in sessions.items():
        history = sql_history.SQLChatMessageHistory(
            session_id=session_id, connection=url, table_name=table
        )
        history.add_messages(messages)
        history.engine.dispose()


def run_import(*args: str) -> Result:
    return CliRunner().invoke(cli, ["import", *args])


def row_counts(engine: sa.Engine, apps: list[str]) -> list[tuple[int, int]]:
    out = []
    for app in apps:
        counts = admin.counts_for(engine, app_id=app)
        out.append((counts.original_rows, counts.display_rows))
    return out


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def databases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(source URL, memstore URL): the source table lives in the test database (a fresh
    table name per test, dropped after it); memstore's tables are the migrated ones."""
    engine = migrated_engine(str(request.param), tmp_path_factory)
    url = engine.url.render_as_string(hide_password=False)
    yield url, url


def test_import_langchain_sql_real_tables(
    databases: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = databases
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    table = f"lc_src_{uuid.uuid4().hex[:10]}"
    prefix = f"lc-{uuid.uuid4().hex[:8]}-"
    write_history(source, table, {"good": GOOD, "legacy": LEGACY})
    engine = sa.create_engine(target)
    try:
        first = run_import(
            source, "--from", "langchain-sql", "--table", table, "--app-prefix", prefix,
            "--database-url", target,
        )  # fmt: skip
        assert first.exit_code == 0, first.output
        assert f"good -> {prefix}good: 6 messages" in first.stdout
        assert f"legacy -> {prefix}legacy: 4 messages (" in first.stdout
        assert "orphan_result: 1, unanswered_request: 1, wrong_first_role: 1" in first.stdout
        assert "sessions: 2, imported: 2, skipped: 0, messages: 10" in first.stdout

        store = MemoryStore(Settings(database_url=target))
        good, legacy = f"{prefix}good", f"{prefix}legacy"
        window = store.load_window(good)
        kinds = ["system", "user", "ai", "tool_result", "tool_result", "ai"]
        assert [m.type for m in window] == kinds
        assert [c.id for c in window[2].tool_requests] == ["call_w1", "call_w2"]
        assert json.loads(window[2].tool_requests[0].arguments) == {"city": "Oslo"}
        results = [m for m in window if isinstance(m, ToolResult)]
        assert [(r.id, r.tool_name, r.is_error) for r in results] == [
            ("call_w1", "weather", False),
            ("call_w2", "weather", True),
        ]
        for app in (good, legacy):
            for provider in ("openai", "anthropic"):
                assert validate(store.load_window(app), provider) == [], (app, provider)
        # The adapter reads the imported rows back as the messages the source held.
        assert MemstoreChatMessageHistory(store, good).messages == GOOD
        # The orphan result is kept opaque (an empty system message in windows), so the
        # adapter still reads it back.
        assert MemstoreChatMessageHistory(store, legacy).messages == LEGACY
        window = store.load_window(legacy)
        assert [m.type for m in window] == ["system", "user", "ai", "tool_result", "user"]
        assert window[0].text == "" and window[3].id == "call_b1"  # answered at read time

        before = row_counts(engine, [good, legacy])
        again = run_import(
            source, "--from", "langchain-sql", "--table", table, "--app-prefix", prefix,
            "--database-url", target, "--json",
        )  # fmt: skip
        assert again.exit_code == 0, again.output
        assert [r["skipped"] for r in json.loads(again.stdout)] == [True, True]
        assert row_counts(engine, [good, legacy]) == before
        store.close()
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {table}"))
        engine.dispose()


@pytest.fixture
def on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str, MemoryStore]]:
    """(source URL, memstore URL, store): private SQLite files, no Redis."""
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    target = f"sqlite:///{tmp_path / 'm.db'}"
    store = MemoryStore(Settings(database_url=target))
    store.migrate()
    yield f"sqlite:///{tmp_path / 'lc.db'}", target, store
    store.close()


def test_import_langchain_sql_resumes_after_interruption(
    on_sqlite: tuple[str, str, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore import importers

    source, target, store = on_sqlite
    write_history(source, "message_store", {"a": GOOD, "b": LEGACY, "c": GOOD[:2]})
    real = importers.import_session
    calls: list[str] = []

    def stop_at_second(*args: Any) -> Any:
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C between sessions
        return real(*args)

    monkeypatch.setattr("memstore.cli.transfer.import_session", stop_at_second)
    cut = run_import(source, "--from", "langchain-sql", "--database-url", target)
    assert cut.exit_code == 1
    assert "interrupted after 1 of 3 sessions" in cut.stderr
    assert "a -> a: 6 messages" in cut.stdout
    assert row_counts(store.engine, ["a", "b", "c"]) == [(6, 2), (0, 0), (0, 0)]

    monkeypatch.setattr("memstore.cli.transfer.import_session", real)
    rest = run_import(source, "--from", "langchain-sql", "--database-url", target)
    assert rest.exit_code == 0, rest.output
    assert "a -> a: already imported, skipped" in rest.stdout
    assert "sessions: 3, imported: 2, skipped: 1, messages: 6" in rest.stdout
    assert MemstoreChatMessageHistory(store, "c").messages == GOOD[:2]
    assert MemstoreChatMessageHistory(store, "a").messages == GOOD


def test_import_langchain_sql_bad_sources_write_nothing(
    on_sqlite: tuple[str, str, MemoryStore],
) -> None:
    source, target, store = on_sqlite
    write_history(source, "message_store", {"a": GOOD})
    missing = run_import(
        source, "--from", "langchain-sql", "--table", "nope", "--database-url", target
    )
    assert missing.exit_code != 0
    assert "no SQLChatMessageHistory table 'nope' there" in str(missing.exception)
    engine = sa.create_engine(source)
    with engine.begin() as conn:  # a row langchain cannot read, in a later session
        conn.execute(
            sa.text("INSERT INTO message_store (session_id, message) VALUES ('z', :m)"),
            {"m": json.dumps({"type": "alien", "data": {"content": "secret words"}})},
        )
    engine.dispose()
    bad = run_import(source, "--from", "langchain-sql", "--database-url", target)
    assert bad.exit_code != 0
    assert "session 'z' row 7: langchain cannot read the message" in str(bad.exception)
    assert "secret" not in str(bad.exception)
    assert row_counts(store.engine, ["a", "z"]) == [(0, 0), (0, 0)]
    wrong = run_import(source, "--from", "langchain-sql", "--app-id", "x", "--database-url", target)
    assert wrong.exit_code == 2 and "--app-id is an option of --from langchain4j-json" in (
        wrong.output
    )


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _unreachable_sources() -> list[str]:
    import os

    sources = [f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/test"]
    postgres, mysql = (
        os.environ.get("MEMSTORE_TEST_POSTGRES_URL"),
        os.environ.get("MEMSTORE_TEST_MYSQL_URL"),
    )
    if postgres:
        sources.append(str(sa.make_url(postgres).set(database="no_such_database_here")))
    if mysql:
        url = sa.make_url(mysql)
        sources.append(str(url.set(database="no_such_database_here")))
        sources.append(
            url.set(username="nobody_here", password="wrong").render_as_string(hide_password=False)
        )
    return sources


@pytest.mark.parametrize("source_kind", ["langchain-sql", "openai-agents-sql"])
def test_an_unreachable_source_is_an_import_source_error(source_kind: str, tmp_path: Path) -> None:
    from memstore.importers import ImportSourceError

    target = f"sqlite:///{tmp_path / 'target.db'}"
    for source in _unreachable_sources():
        result = run_import(source, "--from", source_kind, "--database-url", target)
        assert isinstance(result.exception, ImportSourceError), (source, result.exception)
        assert "wrong" not in str(result.exception)  # never the password
