"""``memstore export`` and ``memstore import`` with click's CliRunner on private SQLite files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.cli import cli
from memstore.errors import ImportRecordError

TURN = [
    UserMessage(text="make a file"),
    AiMessage(tool_requests=[ToolRequest(id="c1", name="write", arguments='{"p": 1}')]),
    ToolResult(id="c1", tool_name="write", text="ok"),
    AiMessage(text="done"),
]


def make(tmp_path: Path, name: str) -> tuple[str, MemoryStore]:
    url = f"sqlite:///{tmp_path / name}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    return url, store


@pytest.fixture(autouse=True)
def _no_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)


def invoke(url: str, *args: str) -> tuple[int, str, str, BaseException | None]:
    result = CliRunner().invoke(cli, [*args, "--database-url", url])
    return result.exit_code, result.stdout, result.stderr, result.exception


def test_export_to_a_file_and_import_into_another_database(tmp_path: Path) -> None:
    source_url, source = make(tmp_path, "source.db")
    target_url, target = make(tmp_path, "target.db")
    source.append("a", TURN, user_id="u")
    source.append("b", TURN)
    dump = tmp_path / "dump.jsonl"
    code, _, err, _ = invoke(source_url, "export", "a", "b", "--output", str(dump))
    assert code == 0 and "exported 13 records" in err
    lines = dump.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format"] == "memstore-export"

    code, out, _, _ = invoke(target_url, "import", str(dump))
    assert code == 0, out
    assert "a: 4 original rows, 2 display rows, 0 tool executions imported; 0 already stored" in out
    assert "records: 12, inserted: 12, skipped: 0" in out
    assert target.load_window("a") == source.load_window("a") == TURN
    assert target.history("b") == source.history("b")

    code, out, _, _ = invoke(target_url, "import", str(dump), "--json")
    assert code == 0
    assert json.loads(out)["total"]["original_skipped"] == 8
    source.close()
    target.close()


def test_import_validates_the_whole_file_before_writing(tmp_path: Path) -> None:
    source_url, source = make(tmp_path, "source.db")
    target_url, target = make(tmp_path, "target.db")
    source.append("a", TURN)
    dump = tmp_path / "dump.jsonl"
    assert invoke(source_url, "export", "a", "--output", str(dump))[0] == 0
    lines = dump.read_text(encoding="utf-8").splitlines()
    dump.write_text("\n".join([*lines, "{not json"]) + "\n", encoding="utf-8")
    code, _, _, error = invoke(target_url, "import", str(dump))
    assert code != 0 and isinstance(error, ImportRecordError) and error.line == len(lines) + 1
    assert target.load_window("a") == []
    source.close()
    target.close()


def test_export_by_user_and_in_a_provider_format(tmp_path: Path) -> None:
    url, store = make(tmp_path, "m.db")
    store.append("a", TURN, user_id="u")
    store.append("a", [UserMessage(text="other")], user_id="v")
    code, out, _, _ = invoke(url, "export", "--user-id", "v")
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["record"] for r in records] == ["header", "original", "display"]
    code, out, _, _ = invoke(url, "export", "a", "--format", "openai")
    assert code == 0
    line = json.loads(out)
    assert line["app_id"] == "a" and line["conversation"][1]["tool_calls"][0]["id"] == "c1"
    assert invoke(url, "export", "--user-id", "v", "--format", "openai")[0] == 2
    assert invoke(url, "export")[0] == 2
    store.close()


def test_export_all_writes_every_app_and_usage_is_one_scope(tmp_path: Path) -> None:
    url, store = make(tmp_path, "all")
    for app in ("a-1", "a-2", "a-3"):
        store.append(app, [UserMessage(text=f"hello {app}")])
    out_file = tmp_path / "all.jsonl"
    code, _, err, _ = invoke(url, "export", "--all", "--output", str(out_file))
    assert code == 0 and "exported" in err
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert {r["app_id"] for r in records if "app_id" in r} == {"a-1", "a-2", "a-3"}
    code, out, _, _ = invoke(url, "export", "--all", "--format", "openai")
    assert code == 0 and len(out.splitlines()) == 3
    for bad in (["export", "--all", "a-1"], ["export", "--all", "--user-id", "u"], ["export"]):
        code, _, _, _ = invoke(url, *bad)
        assert code == 2, bad
