"""The display row of one streamed turn: its reply text and one summary line per tool call,
marked when the turn failed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memstore.core.display import DisplayDraft, ToolFormatter, display_drafts
from memstore.messages import Message, UserMessage

FAILED_MARK = "[failed]"
"""What starts the last line of a failed turn's display row (then the reason)."""


def turn_display(
    messages: Sequence[Message],
    formatters: Mapping[str, ToolFormatter],
    failure: str | None = None,
) -> DisplayDraft | None:
    """The turn's one display row: reply text plus one summary line per tool call; with
    ``failure`` the row has status ``failed`` and ends with ``[failed] <reason>``.
    ``None`` when a turn that did not fail produced nothing to show."""
    # without user messages nothing splits the reply: at most one row, holding every line
    replies = display_drafts([m for m in messages if not isinstance(m, UserMessage)], formatters)
    if failure is None:
        return replies[0] if replies else None
    lines = [draft.content for draft in replies]
    lines.append(f"{FAILED_MARK} {failure}")
    return DisplayDraft("ai", "\n".join(lines), status="failed")
