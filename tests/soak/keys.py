"""Every message the soak writes carries a text unique to the run (a tool request: its call
id), so a message can be recognised in a window and in the database without its row id."""

from __future__ import annotations

from memstore.core.window import is_synthetic
from memstore.messages import AiMessage, Message, ToolResult


def message_key(message: Message) -> str | None:
    """The unique text of a soak message; ``None`` for a result the loader made up."""
    if isinstance(message, ToolResult):
        return None if is_synthetic(message) else message.text
    if isinstance(message, AiMessage) and not message.text:
        return "req:" + ",".join(request.id for request in message.tool_requests)
    return getattr(message, "text", None)
