"""The row codec: canonical messages to and from ``chat_history_original`` rows."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from memstore.core.crypto import DISPLAY_CONTENT, ORIGINAL_PAYLOAD, RowCipher, is_sealed
from memstore.core.display import DisplayDraft
from memstore.core.summary import is_summary
from memstore.errors import StorageError
from memstore.messages import MESSAGE_ADAPTER, STORED, AiMessage, Message, ToolResult

USER = "user"
AI = "ai"
TOOL_REQUEST = "toolExecutionRequest"
TOOL_RESULT = "toolExecutionResult"
SYSTEM = "system"
SUMMARY = "summary"
"""A compaction's summary (a system message carrying ``memstore_summary`` metadata)."""


def message_type(message: Message) -> str:
    """The ``message_type`` column value for ``message``."""
    if isinstance(message, AiMessage):
        return TOOL_REQUEST if message.tool_requests else AI
    if isinstance(message, ToolResult):
        return TOOL_RESULT
    if is_summary(message):
        return SUMMARY
    return SYSTEM if message.type == "system" else USER


def encode_payload(message: Message) -> str:
    """The payload column: the message's canonical JSON (arguments kept verbatim inside it).

    ``model_dump_json()`` with its defaults, called on the serializer directly (it spares
    the keyword handling, a fifth of the call)."""
    return message.__pydantic_serializer__.to_json(message).decode()


def decode_payload(payload: str, row_id: int) -> Message:
    """Parse a payload column back into a message; a corrupt row is a ``StorageError``."""
    try:
        return MESSAGE_ADAPTER.validate_json(payload, context=STORED)
    except (ValidationError, ValueError) as error:
        # ``from None``: the validation error quotes the payload, i.e. chat text.
        raise StorageError(
            f"row {row_id} of chat_history_original has a corrupt payload ({type(error).__name__})",
            kind="corrupt row",
        ) from None


def open_payload(cipher: RowCipher, app_id: str, row_id: int, payload: str) -> str:
    """The payload column's plaintext (the message JSON), sealed or not."""
    return cipher.open(payload, ORIGINAL_PAYLOAD, app_id, row_id)


def decode_row(cipher: RowCipher, app_id: str, row_id: int, payload: str) -> Message:
    """The message of one stored original row (opened, then parsed). Without keys the payload
    is parsed as it is (nothing added to the read path); a sealed one then fails to parse and
    raises :class:`~memstore.errors.UnknownKeyError` naming its key id."""
    if not cipher.enabled:
        try:
            return decode_payload(payload, row_id)
        except StorageError:
            if is_sealed(payload):
                cipher.open(payload, ORIGINAL_PAYLOAD, app_id, row_id)  # raises, naming the key
            raise
    return decode_payload(cipher.open(payload, ORIGINAL_PAYLOAD, app_id, row_id), row_id)


def open_content(cipher: RowCipher, app_id: str, row_id: int, content: str) -> str:
    """The display row's text, sealed or not."""
    return cipher.open(content, DISPLAY_CONTENT, app_id, row_id)


def seal_original(cipher: RowCipher, row: dict[str, Any]) -> dict[str, Any]:
    """A full original row dict (with ``id``) with its payload sealed (as it is when off)."""
    if cipher.enabled:
        row["payload"] = cipher.seal(row["payload"], ORIGINAL_PAYLOAD, row["app_id"], row["id"])
    return row


def seal_display(cipher: RowCipher, row: dict[str, Any]) -> dict[str, Any]:
    """A full display row dict (with ``id``) with its content sealed (as it is when off)."""
    if cipher.enabled:
        row["content"] = cipher.seal(row["content"], DISPLAY_CONTENT, row["app_id"], row["id"])
    return row


def original_row(
    row_id: int, app_id: str, user_id: str | None, message: Message, now: Any
) -> dict[str, Any]:
    """The full column dict of one original-history row."""
    return {
        "id": row_id,
        "app_id": app_id,
        "user_id": user_id,
        "message_type": message_type(message),
        "tool_call_id": message.id if isinstance(message, ToolResult) else None,
        "payload": encode_payload(message),
        "created_at": now,
        "updated_at": now,
        "is_deleted": False,
    }


def display_row(
    row_id: int, app_id: str, user_id: str | None, draft: DisplayDraft, now: Any
) -> dict[str, Any]:
    """The full column dict of one display-history row."""
    return {
        "id": row_id,
        "app_id": app_id,
        "user_id": user_id,
        "role": draft.role,
        "content": draft.content,
        "status": draft.status,
        "created_at": now,
        "updated_at": now,
        "is_deleted": False,
    }
