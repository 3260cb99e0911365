"""Tables the docs keep by hand, checked against the code: the CLI synopsis names every
command, and the migrations table in docs/operations.md has one row per revision."""

from __future__ import annotations

import re

from memstore.cli import cli
from tests.docs.markdown import DOCS, ROOT, blocks


def test_the_cli_synopsis_names_every_command() -> None:
    synopsis = next(block for block in blocks(DOCS / "cli.md") if block.lang == "bash")
    named = set(re.findall(r"^memstore ([a-z-]+)", synopsis.source, flags=re.MULTILINE))
    named.discard("--version")
    assert named == set(cli.commands), "docs/cli.md's synopsis drifted from memstore/cli/"


def test_the_migrations_table_has_one_row_per_revision() -> None:
    revisions = {
        re.search(r'^revision = "(\w+)"', path.read_text(), flags=re.MULTILINE).group(1)  # type: ignore[union-attr]
        for path in (ROOT / "migrations" / "versions").glob("*.py")
    }
    text = (DOCS / "operations.md").read_text()
    rows = set(re.findall(r"^\| `(\d{4})` \|", text, flags=re.MULTILINE))
    assert rows == revisions, "docs/operations.md's migrations table drifted from migrations/"
