"""``memstore show`` marks a compaction's summary and the range it covers."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memstore import AiMessage, MemoryStore, Settings, UserMessage
from memstore.cli import cli


def test_show_marks_the_summary_and_its_range(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    store.append(
        "app",
        [UserMessage(text=f"q{i}") if i % 2 == 0 else AiMessage(text=f"a{i}") for i in range(6)],
    )
    report = store.memory("app").compact(lambda m: "the story so far", keep_last_messages=2)
    store.close()
    mark = f"[summary of ids {report.first_id}..{report.last_id}: 4 messages]"
    runner = CliRunner()
    window = runner.invoke(cli, ["show", "app", "--database-url", url])
    assert window.exit_code == 0
    lines = window.stdout.splitlines()
    assert "the story so far" in lines[0] and mark in lines[0]
    assert len(lines) == 3 and "q0" not in window.stdout
    original = runner.invoke(cli, ["show", "app", "--original", "--database-url", url])
    assert original.exit_code == 0
    assert "q0" in original.stdout and mark in original.stdout
    assert original.stdout.splitlines()[-1].startswith(str(report.summary_id))
    raw = runner.invoke(cli, ["show", "app", "--format", "json", "--database-url", url])
    assert json.loads(raw.stdout)[0]["metadata"]["memstore_summary"]["last_id"] == report.last_id
    openai = runner.invoke(cli, ["show", "app", "--format", "openai", "--database-url", url])
    assert json.loads(openai.stdout)[0] == {"role": "system", "content": "the story so far"}
    display = runner.invoke(cli, ["show", "app", "--display", "--database-url", url])
    assert "the story so far" not in display.stdout
    exported = runner.invoke(
        cli, ["export", "app", "--format", "openai", "--output", "-", "--database-url", url]
    )
    assert exported.exit_code == 0, exported.output
    conversation = json.loads(exported.stdout.splitlines()[0])["conversation"]
    assert [m["content"] for m in conversation] == ["q0", "a1", "q2", "a3", "q4", "a5"]
