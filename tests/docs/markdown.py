"""Reading the docs' Markdown: fenced code blocks with their test markers, sections, tables.

The docs are checked against the code by the tests beside this module; these helpers only parse.
A code block's marker is an HTML comment on the last non-blank line before its opening fence:
``<!-- docs-test: skip REASON -->`` or ``<!-- docs-test: given NAME[, NAME] -->`` (for a
``bash`` block, NAME is a fixture of ``given_shell.py``; for a ``python`` block, one of
``test_code_blocks.GIVEN``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,})(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>\w+)\s*(?P<arg>.*?)\s*-->\s*$")
_SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')
MARKER_KINDS = ("skip", "given")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int
    """1-based line of the opening fence."""
    lang: str
    source: str
    marker: str | None = None
    """``skip`` or ``given`` (see the module docstring), or ``None``."""
    marker_arg: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def expanded(self) -> str:
        """The source with every ``--8<-- "path"`` line replaced by that file's text."""
        lines = []
        for line in self.source.splitlines():
            match = _SNIPPET.match(line)
            lines.append((ROOT / match["path"]).read_text() if match else line)
        return "\n".join(lines) + "\n"

    def snippets(self) -> list[Path]:
        return [
            ROOT / match["path"]
            for match in map(_SNIPPET.match, self.source.splitlines())
            if match is not None
        ]


def markdown_files() -> list[Path]:
    """README.md and every page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced code block of ``path``, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = index + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = "\n".join(line[indent:] for line in lines[index + 1 : end])
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = _MARKER.match(previous)
        found.append(
            Block(
                path=path,
                line=index + 1,
                lang=opening["lang"],
                source=body + "\n",
                marker=marker["kind"] if marker else None,
                marker_arg=marker["arg"] if marker else "",
            )
        )
        index = end + 1
    return found


def prose(path: Path) -> str:
    """The text of ``path`` without its fenced code blocks."""
    kept: list[str] = []
    fence: str | None = None
    for line in path.read_text().splitlines():
        opening = _FENCE.match(line)
        if fence is None and opening is not None:
            fence = opening["fence"]
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def sections(path: Path, level: int = 2) -> dict[str, str]:
    """Heading text -> the section's text (up to the next heading of the same or higher level)."""
    heading = re.compile(rf"^#{{1,{level}}} (?P<title>.+?)\s*$")
    result: dict[str, str] = {}
    title: str | None = None
    body: list[str] = []
    in_fence = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else heading.match(line)
        if match:
            if title is not None:
                result[title] = "\n".join(body)
            depth = len(line) - len(line.lstrip("#"))
            title, body = (match["title"], []) if depth == level else (None, [])
            continue
        body.append(line)
    if title is not None:
        result[title] = "\n".join(body)
    return result


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (header and separator rows left out)."""

    def cells(line: str) -> list[str] | None:
        stripped = line.strip()
        if not (stripped.startswith("|") and stripped.endswith("|")):
            return None
        return [cell.strip() for cell in stripped[1:-1].split("|")]

    def is_separator(row: list[str] | None) -> bool:
        return row is not None and all(set(cell) <= set("-: ") for cell in row)

    lines = text.splitlines()
    rows = []
    for index, line in enumerate(lines):
        row = cells(line)
        following = cells(lines[index + 1]) if index + 1 < len(lines) else None
        if row is None or is_separator(row) or is_separator(following):
            continue
        rows.append(row)
    return rows


def code_spans(text: str) -> list[tuple[str, bool]]:
    """Every inline code span of ``text`` (line breaks folded), with whether it is bold."""
    folded = re.sub(r"\s*\n\s*", " ", text)
    folded = re.sub(r"(`{2,}).+?\1", "", folded)  # spans quoting backticks: never signatures
    return [
        (match["code"], bool(match["open"] and match["close"]))
        for match in re.finditer(r"(?P<open>\*\*)?`(?P<code>[^`]+)`(?P<close>\*\*)?", folded)
    ]
