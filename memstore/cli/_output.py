"""How the commands of the ``memstore`` command line print: JSON, chat text made safe for a
terminal, and messages in a provider's request format."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import click

from memstore.messages import Message

PROVIDER_FORMATS = ("openai", "anthropic", "langchain4j")


class _NoBar:
    """What :func:`progress_bar` returns off a terminal: the same context manager and
    iteration as click's bar, drawing nothing (click 8.1, the lowest version allowed, has no
    ``hidden=`` and prints the label to a pipe)."""

    def __init__(self, iterable: Iterable[Any] | None) -> None:
        self._iterable: Iterable[Any] = iterable if iterable is not None else ()

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable)

    def update(self, n_steps: int, current_item: object = None) -> None:
        """Nothing to draw."""


def progress_bar(iterable: Iterable[Any] | None = None, *, length: int | None, label: str) -> Any:
    """The progress bar of a command that can take more than a second: drawn on stderr when
    stderr is a terminal, and nothing at all otherwise (not even the label line click prints
    to a pipe), so logs and captured output stay clean."""
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        terminal = False
    if not terminal:
        return _NoBar(iterable)
    return click.progressbar(iterable, length=length, label=label, file=sys.stderr)


def _emit_json(data: object) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, default=str, indent=2))


_TERMINAL_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""What a terminal acts on instead of showing: C0 and C1 controls (ESC starts colour changes,
screen clears, OSC 52 clipboard writes; newlines and tabs are kept) and the bidirectional
overrides that make text read differently from its order."""


def terminal_safe(text: str) -> str:
    """Chat text for a terminal: every control character shown as its escape (``\x1b``,
    ``\u202e``), never acted on. JSON output escapes them already."""
    return _TERMINAL_CONTROLS.sub(lambda match: ascii(match.group())[1:-1], text)


def _provider_format(messages: list[Message], fmt: str) -> object:
    from memstore import formats

    if fmt == "openai":
        return formats.to_openai(messages)
    if fmt == "anthropic":
        system, turns = formats.to_anthropic(messages)
        return {"system": system, "messages": turns}
    return formats.to_langchain4j(messages)
