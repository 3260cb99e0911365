"""``memstore import --from openai-agents-sqlite`` on tables written by the real SDK."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memstore import MemoryStore, Settings, ToolResult
from memstore.adapters.openai_agents import MemstoreSession
from memstore.cli import cli
from memstore.core.validate import validate

agents = pytest.importorskip("agents")

GOOD: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Oslo?"},
    {"type": "function_call", "call_id": "w1", "name": "weather", "arguments": '{"city":"Oslo"}'},
    {"type": "function_call_output", "call_id": "w1", "output": "rain, 7C"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "It rains.", "annotations": []}],
    },
]
LEGACY: list[dict[str, Any]] = [
    {"type": "function_call_output", "call_id": "lost", "output": "orphan"},
    {"role": "user", "content": "book it"},
    {"type": "function_call", "call_id": "b1", "name": "book", "arguments": "{}"},
    {"role": "user", "content": "hello?"},
]


def write_sessions(path: Path) -> None:
    async def fill() -> None:
        for session_id, items in (("good", GOOD), ("legacy", LEGACY)):
            session = agents.SQLiteSession(session_id, str(path))
            await session.add_items(items)
            session.close()

    asyncio.run(fill())


def test_import_agents_sqlite_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    source = tmp_path / "agents.db"
    write_sessions(source)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()

    def run(*args: str) -> Any:
        return CliRunner().invoke(
            cli,
            ["import", str(source), "--from", "openai-agents-sqlite", *args, "--database-url", url],
        )

    result = run("--app-prefix", "ag-")
    assert result.exit_code == 0, result.output
    assert "good -> ag-good: 4 messages" in result.stdout
    assert "legacy -> ag-legacy: 4 messages" in result.stdout
    assert "orphan_result: 1, unanswered_request: 1, wrong_first_role: 1" in result.stdout
    assert "sessions: 2, imported: 2, skipped: 0, messages: 8" in result.stdout

    window = store.load_window("ag-good")
    assert [m.type for m in window] == ["user", "ai", "tool_result", "ai"]
    assert isinstance(window[2], ToolResult) and window[2].tool_name == "weather"
    assert window[1].tool_requests[0].arguments == '{"city":"Oslo"}'
    for app in ("ag-good", "ag-legacy"):
        assert validate(store.load_window(app), "openai") == []
    assert store.history("ag-good")[-1].text == "weather in Oslo?"

    async def read_back() -> list[Any]:
        from memstore.aio import AsyncMemoryStore

        async with AsyncMemoryStore(Settings(database_url=url)) as aio:
            return await MemstoreSession("ag-good", aio).get_items()

    assert asyncio.run(read_back()) == GOOD

    again = run("--app-prefix", "ag-", "--json")
    assert again.exit_code == 0
    assert [r["skipped"] for r in json.loads(again.stdout)] == [True, True]
    assert len(store.load_window("ag-good")) == 4
    store.close()


def test_import_agents_sqlite_refuses_other_files(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"not sqlite at all" * 100)
    result = CliRunner().invoke(
        cli,
        [
            "import",
            str(bogus),
            "--from",
            "openai-agents-sqlite",
            "--database-url",
            f"sqlite:///{tmp_path / 'm.db'}",
        ],
    )
    assert result.exit_code != 0
    assert "not an Agents SDK session file" in str(result.exception)


def test_import_agents_sqlalchemy_session_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's SQLAlchemySession tables, written by the SDK itself on an aiosqlite URL."""
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    source = f"sqlite+aiosqlite:///{tmp_path / 'sa.db'}"

    async def fill() -> None:
        for session_id, items in (("good", GOOD), ("legacy", LEGACY)):
            session = SQLAlchemySession.from_url(session_id, url=source, create_tables=True)
            await session.add_items(items)
            await session.engine.dispose()

    asyncio.run(fill())
    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    result = CliRunner().invoke(
        cli, ["import", source, "--from", "openai-agents-sql", "--database-url", url]
    )
    assert result.exit_code == 0, result.output
    assert "sessions: 2, imported: 2, skipped: 0, messages: 8" in result.stdout
    assert [m.type for m in store.load_window("good")] == ["user", "ai", "tool_result", "ai"]
    assert validate(store.load_window("legacy"), "openai") == []
    again = CliRunner().invoke(
        cli, ["import", source, "--from", "openai-agents-sql", "--database-url", url]
    )
    assert "imported: 0, skipped: 2" in again.stdout
    store.close()
