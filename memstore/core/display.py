"""Display history rows: what a person saw, derived from a batch of canonical messages.

A user message becomes one ``user`` row. The messages after it (AI replies, tool requests,
tool results) become one ``ai`` row: the reply text with one summary line per tool call.
A formatter per tool name can replace the default summary line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage

logger = logging.getLogger("memstore")

ToolFormatter = Callable[[ToolRequest, "ToolResult | None"], str]
"""Turns one tool call (and its result, when the batch holds it) into one display line."""

_SUMMARY_ARGS_CHARS = 80
_SUMMARY_RESULT_CHARS = 80


@dataclass(frozen=True, slots=True)
class DisplayDraft:
    """A display row before it gets its id."""

    role: str
    content: str
    status: str = "ok"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def default_tool_summary(request: ToolRequest, result: ToolResult | None) -> str:
    """``[tool] name(args)``, plus ``-> ok`` or ``-> error: ...`` when the result is known."""
    line = f"[tool] {request.name}({_one_line(request.arguments, _SUMMARY_ARGS_CHARS)})"
    if result is None:
        return line
    if result.is_error:
        return f"{line} -> error: {_one_line(result.text, _SUMMARY_RESULT_CHARS)}"
    return f"{line} -> ok"


def tool_summary(
    request: ToolRequest, result: ToolResult | None, formatters: Mapping[str, ToolFormatter]
) -> str:
    """The display line of one call: its registered formatter's, or the default one."""
    formatter = formatters.get(request.name)
    if formatter is not None:
        try:
            return _one_line(str(formatter(request, result)), 1000)
        except Exception:  # a display nicety must never lose a durable write
            logger.warning(
                "tool formatter for %r failed; using the default", request.name, exc_info=True
            )
    return default_tool_summary(request, result)


def display_drafts(
    messages: Sequence[Message], formatters: Mapping[str, ToolFormatter]
) -> list[DisplayDraft]:
    """The display rows for one appended batch, in order."""
    results = {m.id: m for m in messages if isinstance(m, ToolResult)}
    drafts: list[DisplayDraft] = []
    reply: list[str] = []

    def close_reply() -> None:
        if reply:
            drafts.append(DisplayDraft("ai", "\n".join(reply)))
            reply.clear()

    for message in messages:
        if isinstance(message, UserMessage):
            close_reply()
            drafts.append(DisplayDraft("user", message.text))
        elif isinstance(message, AiMessage):
            if message.text:
                reply.append(message.text)
            reply.extend(
                tool_summary(call, results.get(call.id), formatters)
                for call in message.tool_requests
            )
    close_reply()
    return drafts
