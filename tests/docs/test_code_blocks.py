"""Every code block of README.md and docs/ runs (or parses), so the docs cannot drift.

The blocks of one page run in order in one namespace, in a fresh temporary directory with every
``MEMSTORE_*`` variable unset: the embedded default (SQLite file + in-process cache). See
``markdown.py`` for the markers a block may carry and docs/contributing.md for the rules.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import shlex
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from memstore import MemoryStore
from memstore.cli import cli
from tests.docs.given_shell import FIXTURES as SHELL_GIVEN
from tests.docs.markdown import MARKER_KINDS, ROOT, Block, blocks, markdown_files
from tests.docs.shell import commands, script

EXAMPLES = ROOT / "examples"


def _agents_model() -> dict[str, Any]:
    """``model``: a scripted Agents SDK model that answers once (no API key, no network)."""
    pytest.importorskip("agents")
    from agents import set_tracing_disabled

    example = runpy.run_path(str(EXAMPLES / "openai_agents_session.py"), run_name="docs_fixture")
    set_tracing_disabled(True)
    return {"model": example["ScriptedModel"]([example["say"]("Hello! How can I help?")])}


GIVEN: dict[str, Callable[[], dict[str, Any]]] = {"agents_model": _agents_model}
"""What ``<!-- docs-test: given NAME -->`` binds before a block runs."""


def _pages_with(lang: str) -> list[Path]:
    return [path for path in markdown_files() if any(b.lang == lang for b in blocks(path))]


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory and no MEMSTORE_* variables: the embedded default."""
    for name in list(os.environ):
        if name.startswith("MEMSTORE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(block: Block, namespace: dict[str, Any]) -> None:
    if block.marker == "given":
        for name in filter(None, (n.strip() for n in block.marker_arg.split(","))):
            namespace.update(GIVEN[name]())
    code = compile(block.expanded(), block.where, "exec")
    with warnings.catch_warnings():
        # the LangChain page shows RunnableWithMessageHistory, which langchain-core deprecates
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="langchain_core")
        exec(code, namespace)


@pytest.mark.parametrize("path", _pages_with("python"), ids=_page_id)
def test_python_blocks_run(path: Path, scratch: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    ran = 0
    try:
        for block in blocks(path):
            if block.lang != "python" or block.marker == "skip":
                continue
            _run(block, namespace)
            ran += 1
        assert ran or all(b.marker == "skip" for b in blocks(path) if b.lang == "python")
    finally:
        for value in namespace.values():
            if isinstance(value, MemoryStore):
                value.close()
        _close_default_event_loop()


def _close_default_event_loop() -> None:
    """``Runner.run_sync`` leaves the thread's default event loop open, by design; a page that
    used it would leak that loop into later tests."""
    with warnings.catch_warnings():  # policies are deprecated from Python 3.14 on
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        loop = getattr(getattr(policy, "_local", None), "_loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running():
            loop.close()
            policy.set_event_loop(None)


def test_markers_are_known_and_explained() -> None:
    for path in markdown_files():
        for block in blocks(path):
            if block.marker is None:
                continue
            assert block.marker in MARKER_KINDS, f"{block.where}: unknown marker {block.marker}"
            assert block.marker_arg, f"{block.where}: a {block.marker} marker needs its argument"
            if block.marker == "given":
                names = [n.strip() for n in block.marker_arg.split(",")]
                known = SHELL_GIVEN if block.lang == "bash" else GIVEN
                assert set(names) <= set(known), f"{block.where}: unknown fixture {names}"


@pytest.mark.parametrize("path", _pages_with("json"), ids=_page_id)
def test_json_blocks_parse(path: Path) -> None:
    for block in blocks(path):
        if block.lang == "json":
            json.loads(block.source)


def _command_lines(block: Block) -> list[str]:
    """The ``memstore ...`` invocations of a shell block, continuation lines folded in."""
    commands: list[str] = []
    for raw in block.source.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if raw.startswith((" ", "\t")) and commands and line.strip():
            commands[-1] += " " + line.strip()
            continue
        for part in line.split("&&"):
            part = part.strip()
            if part == "memstore" or part.startswith("memstore "):
                commands.append(part)
    return commands


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command the words name, and the words after it."""
    command: click.Command = cli
    while words and isinstance(command, click.Group) and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    return command, words


def _option_names(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names


@pytest.mark.parametrize("path", _pages_with("bash"), ids=_page_id)
def test_shell_blocks_name_real_commands_and_options(path: Path) -> None:
    for block in blocks(path):
        if block.lang != "bash":
            continue
        for line in _command_lines(block):
            words = [
                w for w in shlex.split(line.replace("|", " ").replace("[", " ").replace("]", " "))
            ][1:]
            first_is_word = bool(words) and not words[0].startswith("-")
            command, rest = _resolve(list(words))
            if first_is_word:
                assert command is not cli, f"{block.where}: unknown command in {line!r}"
            options = {w.split("=")[0] for w in rest if w.startswith("--")}
            unknown = options - _option_names(command)
            assert not unknown, f"{block.where}: {line!r}: no such option {sorted(unknown)}"


SHELL_LANGS = ("bash", "sh", "shell", "console", "zsh")


def test_shell_blocks_are_bash() -> None:
    """The runner below reads ```` ```bash ```` blocks: another shell tag would escape it."""
    for path in markdown_files():
        for block in blocks(path):
            assert block.lang not in SHELL_LANGS[1:], f"{block.where}: tag it bash"


@pytest.mark.parametrize("path", _pages_with("bash"), ids=_page_id)
def test_shell_blocks_run(path: Path, scratch: Path) -> None:
    """The page's ``bash`` blocks run in order in one shell, in the fresh folder on the
    embedded default, with no terminal (a command that would ask must show ``--yes``): every
    command that runs (see tests/docs/shell.py) exits 0."""
    steps = []
    for block in blocks(path):
        if block.lang != "bash" or block.marker == "skip":
            continue
        to_run = [command for command in commands(block) if command.left_out() is None]
        steps.append((block, block.marker_arg if block.marker == "given" else None, to_run))
    if not any(to_run or fixtures for _, fixtures, to_run in steps):
        pytest.skip("no command of this page runs here (installs, the test suite, servers)")
    (scratch / "examples").symlink_to(EXAMPLES)  # as in a checkout: `python examples/...`
    env = {name: value for name, value in os.environ.items() if not name.startswith("MEMSTORE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    given = f"{shlex.quote(sys.executable)} -m tests.docs.given_shell"
    shell = subprocess.Popen(
        ["bash", "-c", script(steps, given)],
        cwd=scratch,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a timeout ends every process the page started
    )
    try:
        _out, err = shell.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(shell.pid, signal.SIGKILL)
        _out, err = shell.communicate()
        raise AssertionError(f"{_page_id(path)}: ran over 10 minutes\n{err[-4000:]}") from None
    assert shell.returncode == 0, err[-4000:]


def test_destructive_commands_in_the_docs_show_yes() -> None:
    """``purge``, ``prune``, ``rekey`` and ``migrate downgrade`` ask on a terminal and refuse
    without one: a docs line that does not show ``--yes`` (or ``--dry-run``) fails when copied
    into a script."""
    for path in markdown_files():
        for block in blocks(path):
            if block.lang != "bash":
                continue
            for line in _command_lines(block):
                words = shlex.split(line.replace("[", " ").replace("]", " "))[1:]
                destructive = words[:1] in (["purge"], ["prune"], ["rekey"]) or words[:2] == [
                    "migrate",
                    "downgrade",
                ]
                if destructive and not {"--yes", "--dry-run"} & set(words):
                    raise AssertionError(f"{block.where}: {line!r} asks first: show --yes")


def test_every_example_is_shown_in_the_docs_and_runs(scratch: Path) -> None:
    included = {p for path in markdown_files() for b in blocks(path) for p in b.snippets()}
    for example in sorted(EXAMPLES.glob("*.py")):
        assert example in included, f"{example.name} is not included by any docs page"
        for _ in range(2):  # a second run in the same folder works too (as users rerun them)
            runpy.run_path(str(example), run_name="__main__")
