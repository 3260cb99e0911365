"""``memstore prune`` with click's CliRunner on a private SQLite file."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.cli import cli
from memstore.sql.schema import display, original

OLD = datetime.now(timezone.utc) - timedelta(days=120)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, MemoryStore]]:
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    monkeypatch.delenv("MEMSTORE_RETENTION_DAYS", raising=False)
    url = f"sqlite:///{tmp_path / 'prune.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    for app in ("a", "b"):
        store.append(app, [UserMessage(text="old question"), AiMessage(text="old answer")])
        with store.engine.begin() as conn:
            for table in (original, display):
                conn.execute(table.update().where(table.c.app_id == app).values(created_at=OLD))
        store.append(
            app,
            [
                UserMessage(text="new"),
                AiMessage(tool_requests=[ToolRequest(id="c", name="t", arguments="{}")]),
                ToolResult(id="c", tool_name="t", text="r"),
                AiMessage(text="done"),
            ],
        )
    yield url, store
    store.close()


def run(url: str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [*args, "--database-url", url], input=input)
    return result.exit_code, result.stdout, result.stderr


def counts(store: MemoryStore, app: str) -> tuple[int, int]:
    with store.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(t).where(t.c.app_id == app)
                ).scalar()
                or 0
            )
            for t in (original, display)
        )


def test_prune_refuses_without_a_terminal_and_dry_run_changes_nothing(
    db: tuple[str, MemoryStore],
) -> None:
    url, store = db
    before = counts(store, "a")
    code, _, err = run(url, "prune", "a", "--older-than", "90d")
    assert code == 1 and "refusing to prune without a terminal" in err
    code, out, _ = run(url, "prune", "a", "--older-than", "90d", "--dry-run", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["dry_run"] and data["reports"][0]["original_rows"] == 2
    assert counts(store, "a") == before


def test_prune_by_age_with_yes_writes_an_audit_line(
    db: tuple[str, MemoryStore], caplog: pytest.LogCaptureFixture
) -> None:
    url, store = db
    with caplog.at_level(logging.INFO, logger="memstore.audit"):
        code, out, _ = run(url, "prune", "a", "--older-than", "90d", "--yes")
    assert code == 0, out
    assert "a: removed 2 original rows, 2 display rows" in out
    assert any("prune app='a'" in r.getMessage() for r in caplog.records)
    assert counts(store, "a") == (4, 2)
    assert counts(store, "b") == (6, 4)
    assert [m.type for m in store.load_window("a")] == ["user", "ai", "tool_result", "ai"]


def test_prune_keep_last_keeps_the_tool_group_whole(db: tuple[str, MemoryStore]) -> None:
    url, store = db
    code, _, _ = run(url, "prune", "b", "--keep-last", "2", "--yes")
    assert code == 0
    assert [m.type for m in store.load_window("b")] == ["ai", "tool_result", "ai"]


def test_prune_all_uses_the_retention_setting(
    db: tuple[str, MemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, store = db
    code, _, err = run(url, "prune", "--all", "--yes")
    assert code == 2 and "MEMSTORE_RETENTION_DAYS" in err
    monkeypatch.setenv("MEMSTORE_RETENTION_DAYS", "90")
    code, out, _ = run(url, "prune", "--all", "--yes")
    assert code == 0, out
    assert "original rows: 4" in out
    assert counts(store, "a") == (4, 2) and counts(store, "b") == (4, 2)


@pytest.mark.parametrize(
    "args",
    [
        ("a", "--older-than", "ninety"),
        ("a", "--older-than", "90"),
        ("a", "--keep-last", "0"),
        ("--older-than", "90d"),
        ("a", "--all", "--older-than", "90d"),
    ],
)
def test_prune_usage_errors(db: tuple[str, MemoryStore], args: tuple[str, ...]) -> None:
    url, store = db
    code, _, _ = run(url, "prune", *args, "--yes")
    assert code == 2
    assert counts(store, "a") == (6, 4)


def test_prune_all_writes_audit_lines_only_for_apps_that_lost_rows(
    db: tuple[str, MemoryStore], caplog: pytest.LogCaptureFixture
) -> None:
    url, store = db
    store.append("young", [UserMessage(text="nothing old here")])
    with caplog.at_level(logging.INFO, logger="memstore.audit"):
        code, _, _ = run(url, "prune", "--all", "--older-than", "90d", "--yes")
    assert code == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "memstore.audit"]
    assert sorted(line.split()[1] for line in lines) == ["app='a'", "app='b'"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memstore.audit"):
        code, _, _ = run(url, "prune", "--all", "--older-than", "90d", "--yes")
    assert code == 0
    assert not [r for r in caplog.records if r.name == "memstore.audit"]  # the nightly rerun
