"""Every command that can take more than a second draws a progress bar on a terminal, and none
otherwise (the CLI convention of docs/cli.md).

Each command of ``memstore`` is classified here as long or short; a new command that is in
neither list fails the test. Each long command runs as the installed console script twice:
with stderr (and stdin) on a pseudo-terminal, where its bar must be drawn, and with pipes,
where nothing of a bar may appear (not even its label).
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.cli import cli

KEY = "k1:" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="  # 32 bytes, base64

TURN = [
    UserMessage(text="weather in Oslo?"),
    AiMessage(tool_requests=[ToolRequest(id="w1", name="weather", arguments='{"c": "Oslo"}')]),
    ToolResult(id="w1", tool_name="weather", text="rain"),
    AiMessage(text="It rains."),
]
APPS = ("bar-1", "bar-2", "bar-3")
LJ4_MEMORIES = {
    name: [
        {"contents": [{"text": f"hello from {name}", "type": "TEXT"}], "type": "USER"},
        {"text": "hi", "toolExecutionRequests": [], "attributes": {}, "type": "AI"},
    ]
    for name in ("m1", "m2")
}


@dataclass(frozen=True)
class Long:
    """One invocation of a long command and the label its bar carries."""

    args: tuple[str, ...]
    label: str
    env: dict[str, str] = field(default_factory=dict)


LONG: dict[str, list[Long]] = {
    "reload": [Long(("reload", "--all"), "reloading"), Long(("reload", *APPS), "reloading")],
    "check": [Long(("check", "--all"), "checking"), Long(("check", *APPS), "checking")],
    "prune": [
        Long(("prune", "--all", "--keep-last", "2", "--yes"), "pruning"),
        Long(("prune", *APPS, "--keep-last", "2", "--yes"), "pruning"),
    ],
    "export": [
        Long(("export", "--all", "--output", "out.jsonl"), "exporting"),
        Long(("export", *APPS, "--format", "openai"), "exporting"),
        Long(("export", "--user-id", "u-1", "--output", "user.jsonl"), "exporting"),
    ],
    "import": [
        Long(("import", "export.jsonl"), "importing"),
        Long(
            ("import", "memories.json", "--from", "langchain4j-json", "--app-prefix", "j4-"),
            "importing sessions",
        ),
    ],
    "rekey": [Long(("rekey", "--yes"), "rekeying", {"MEMSTORE_ENCRYPTION_KEYS": KEY})],
    "purge": [Long(("purge", *APPS, "--yes"), "purging")],
}
"""Commands whose work grows with the data (apps, rows, records): a progress bar each."""

SHORT: dict[str, str] = {
    "demo": "a fixed story on a scratch database, printed as it goes",
    "migrate": "a few DDL statements per revision: no unit of progress to count",
    "show": "one app's window or history, bounded by --limit",
    "stats": "a handful of aggregate queries",
    "workers": "one small table",
    "health": "one probe per dependency, bounded by --timeout",
}
"""Commands that finish in about a second whatever the store holds: no bar."""


def test_every_command_is_classified_long_or_short() -> None:
    assert not set(LONG) & set(SHORT)
    assert set(LONG) | set(SHORT) == set(cli.commands), (
        "classify each new command in LONG (with an invocation) or SHORT (with a reason)"
    )


def _bar(label: str) -> re.Pattern[str]:
    """A drawn click bar: the label, then ``[`` bar characters ``]``."""
    return re.compile(re.escape(label) + r"\s+\[[# -]*\]")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with a few apps (one user), an export file and a LangChain4j memories file."""
    path = tmp_path_factory.mktemp("bars")
    store = MemoryStore(Settings(database_url=f"sqlite:///{path / 'memstore.db'}"))
    store.migrate()
    for app in APPS:
        store.append(app, TURN, user_id="u-1")
    with (path / "export.jsonl").open("w") as out:
        for record in store.export(list(APPS)):
            out.write(json.dumps(record) + "\n")
    store.close()
    (path / "memories.json").write_text(json.dumps(LJ4_MEMORIES))
    return path


def _command(folder: Path, case: Long, tag: str) -> tuple[list[str], dict[str, str], Path]:
    """A copy of the folder for one run (commands change what is stored), the command line and
    the environment (no MEMSTORE_* settings but the case's)."""
    work = folder.parent / f"{folder.name}-{tag}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(folder, work)
    exe = shutil.which("memstore", path=str(Path(sys.executable).parent)) or shutil.which(
        "memstore"
    )
    command = [exe] if exe else [sys.executable, "-m", "memstore"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTORE_")}
    env.update(case.env)
    return [*command, *case.args], env, work


def _on_terminal(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run with stdin and stderr on a pseudo-terminal (stdout a pipe): exit code and what the
    terminal showed."""
    master, slave = pty.openpty()
    shown: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every copy of the terminal's other end is closed
                return
            if not chunk:
                return
            shown.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        child = subprocess.run(
            args, stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd, timeout=120
        )
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    return child.returncode, b"".join(shown).decode(errors="replace")


def _cases() -> list[Any]:
    return [
        pytest.param(case, id=" ".join(case.args[:2])) for cases in LONG.values() for case in cases
    ]


@pytest.mark.parametrize("case", _cases())
def test_a_long_command_draws_a_bar_on_a_terminal_only(folder: Path, case: Long) -> None:
    args, env, work = _command(folder, case, "tty")
    code, terminal = _on_terminal(args, env, work)
    assert code == 0, terminal
    assert _bar(case.label).search(terminal), f"no progress bar on the terminal:\n{terminal}"

    args, env, work = _command(folder, case, "pipe")
    piped = subprocess.run(
        args, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=work
    )
    assert piped.returncode == 0, piped.stderr
    for stream in (piped.stdout, piped.stderr):
        assert case.label not in stream.splitlines(), "a bar's label without a terminal"
        assert not _bar(case.label).search(stream), "a progress bar without a terminal"
