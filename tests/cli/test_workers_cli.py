"""``memstore workers``: the leased worker ids, through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memstore import MemoryStore, Settings, UserMessage
from memstore.cli import cli
from memstore.sql.leases import holder_description


def workers(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["workers", *args, "--database-url", url])
    return result.exit_code, result.stdout


def test_workers_lists_the_held_leases_and_the_lapsed_ones_on_request(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'workers.db'}"
    first = MemoryStore(Settings(database_url=url, redis_url=None))
    first.migrate()
    assert workers(url) == (0, "no live worker leases\n")
    second = MemoryStore(Settings(database_url=url, redis_url=None))
    first.append("app", [UserMessage(text="a")])
    second.append("app", [UserMessage(text="b")])
    code, out = workers(url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "epoch", "expires", "in", "holder"]
    listed = [line.split() for line in lines[1:]]
    assert [(row[0], row[1], row[3]) for row in listed] == [
        ("0", "1", holder_description()),
        ("1", "1", holder_description()),
    ]
    assert all(50 < float(row[2].rstrip("s")) <= 60 for row in listed)
    second.close()
    code, out = workers(url, "--json")
    assert [item["worker_id"] for item in json.loads(out)] == [0]
    code, out = workers(url, "--all", "--json")
    data = json.loads(out)
    assert [(item["worker_id"], item["expired"], item["epoch"]) for item in data] == [
        (0, False, 1),
        (1, True, 1),
    ]
    assert set(data[0]) == {"worker_id", "holder", "epoch", "expires_in_seconds", "expired"}
    first.close()
    code, out = workers(url, "--all")
    assert code == 0 and out.count("lapsed") == 2
