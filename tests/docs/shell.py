"""Running the docs' ``bash`` blocks: which lines run, and the script that runs a page's lines.

Of each ```` ```bash ```` block, every command (a line, ``\\``-continued or indented lines
folded in, split at ``&&``, ``#`` comments dropped) is either run or left out for a stated
reason; a command whose program is in neither :data:`RUN` nor :data:`NOT_RUN` fails the test,
so no new kind of line is silently left out. A command naming a server by URL
(``postgresql+psycopg://app@db/app``, ``redis://...``) is left out: it needs that server.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.docs.markdown import Block

RUN = frozenset({"memstore", "python", "export"})
"""Programs whose commands run (``export`` sets a variable the page's later commands use)."""

NOT_RUN = {
    "pip": "installs packages (the tests run in the installed environment)",
    "pytest": "is the test suite this test belongs to",
    "mkdocs": "serves or builds the site (CI builds it with --strict in its own step)",
}
"""Programs whose commands are shown but not run, and why."""

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Command:
    """One command of a shell block, as written (quotes and ``$VAR`` kept for the shell)."""

    block: Block
    text: str

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def program(self) -> str | None:
        """The program run (after any ``NAME=value`` prefixes); ``None`` for assignments only."""
        return next((w for w in self.words if not _ASSIGNMENT.match(w)), None)

    def server(self) -> str | None:
        """The first URL of a server the command names (one with a host), if any."""
        for word in self.words:
            for candidate in re.findall(r"[a-z][a-z0-9+.-]*://\S+", word):
                if urlsplit(candidate).hostname:
                    return candidate
        return None

    def left_out(self) -> str | None:
        """Why the command is not run, or ``None`` when it runs. An unknown program raises."""
        program = self.program
        if program in NOT_RUN:
            return NOT_RUN[program]
        if program is not None and program not in RUN:
            raise AssertionError(
                f"{self.block.where}: {self.text!r}: is {program!r} run or not? "
                "add it to RUN or NOT_RUN in tests/docs/shell.py"
            )
        server = self.server()
        if server is not None:
            return f"needs the server of {server}"
        return None


def _without_comment(line: str) -> str:
    """``line`` up to a ``#`` that starts a comment (outside quotes, after a blank)."""
    quote: str | None = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].rstrip()
    return line.rstrip()


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, in order."""
    lines: list[str] = []
    continued = False
    for raw in block.source.splitlines():
        line = _without_comment(raw)
        if not line.strip():
            continued = False
            continue
        if (continued or raw.startswith((" ", "\t"))) and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.strip())
        continued = lines[-1].endswith("\\")
        if continued:
            lines[-1] = lines[-1][:-1].rstrip()
    found = []
    for line in lines:
        found.extend(Command(block, part.strip()) for part in line.split("&&") if part.strip())
    return found


def script(steps: list[tuple[Block, str | None, list[Command]]], given: str) -> str:
    """A bash script running the page's commands in order, stopping at the first that fails
    with its place in the docs. ``steps``: per block, the fixtures of its ``given`` marker (a
    comma-separated list, or ``None``) and its commands to run; ``given`` is the command that
    prepares the named fixtures and prints shell assignments."""
    out = [
        "set -o pipefail",
        'docs_fail() { echo "docs-test: exit $1 at $2" >&2; exit 97; }',
    ]
    for block, fixtures, to_run in steps:
        if fixtures:
            where = shlex.quote(f"{block.where} (given {fixtures})")
            names = " ".join(shlex.quote(n.strip()) for n in fixtures.split(",") if n.strip())
            out.append(f"docs_given=$({given} {names}) || docs_fail $? {where}")
            out.append('eval "$docs_given"')
        for command in to_run:
            where = shlex.quote(f"{block.where}: {command.text}")
            out.append(f"echo + {where} >&2")
            out.append(f"{{ {command.text}\n}} || docs_fail $? {where}")
    return "\n".join(out) + "\n"
