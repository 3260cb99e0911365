"""Input checks that run before anything is written or read: ids, integers, message limits."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from memstore.errors import (
    InvalidAppIdError,
    InvalidInputError,
    InvalidMessageError,
    MemstoreError,
    MessageTooLargeError,
)
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolResult,
    UserMessage,
    check_ai_shape,
)

MAX_ID_CHARS = 128
MAX_CALL_ID_CHARS = 255
MAX_ROW_ID = 2**63 - 1
"""The largest row id (a signed 64-bit ``BIGINT`` on every database)."""
MAX_WINDOW_MESSAGES = 100_000
"""The most messages one window load may ask for (the bound of ``window_size``/``reload_max``)."""


def bounded_int(
    value: object,
    name: str,
    *,
    minimum: int,
    maximum: int,
    error: type[MemstoreError] = InvalidInputError,
) -> int:
    """``value`` when it is an ``int`` (not a ``bool``) within ``minimum..maximum``; otherwise
    raise ``error`` before any I/O (a database would overflow, or silently accept, it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{name} must be an integer, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        shown = str(value) if value.bit_length() <= 128 else f"a {value.bit_length()}-bit integer"
        raise error(f"{name} must be from {minimum} to {maximum}, got {shown}")
    return value


def normalize_app_id(app_id: object, *, what: str = "app_id") -> str:
    """Return ``app_id`` as the string stored in the database, or raise ``InvalidAppIdError``.

    Strings of 1-128 characters without control characters are kept as they are (no trimming,
    no case folding: ids compare byte for byte). Integers become their decimal string.
    """
    if isinstance(app_id, bool) or not isinstance(app_id, (str, int)):
        raise InvalidAppIdError(f"{what} must be a string or an int, got {type(app_id).__name__}")
    if isinstance(app_id, int) and abs(app_id) >= 10**MAX_ID_CHARS:
        raise InvalidAppIdError(f"{what} is an integer of more than {MAX_ID_CHARS} digits")
    value = str(app_id) if isinstance(app_id, int) else app_id
    if not value:
        raise InvalidAppIdError(f"{what} must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidAppIdError(f"{what} is {len(value)} characters long; the limit is 128")
    if not _printable_ascii(value):
        for char in value:
            if unicodedata.category(char) in ("Cc", "Cs"):
                raise InvalidAppIdError(
                    f"{what} contains the control character U+{ord(char):04X}; "
                    "ids must be printable"
                )
    return value


def normalize_user_id(user_id: object) -> str | None:
    """Like :func:`normalize_app_id`, with ``None`` allowed."""
    return None if user_id is None else normalize_app_id(user_id, what="user_id")


def _printable_ascii(value: str) -> bool:
    """True for printable ASCII, which holds no control character or surrogate (a check in C
    that spares the per-character Unicode lookup for the usual ids)."""
    return value.isascii() and value.isprintable()


def _field(position: int, message: Message, part: str, call_id: str | None) -> str:
    """The name of a checked field in error texts (built only when a check fails)."""
    where = f"message {position} ({message.type}) {part}"
    return where if call_id is None else f"{where} of {call_id!r}"


def _check_text(
    value: str,
    limit: int,
    position: int,
    message: Message,
    part: str,
    call_id: str | None = None,
) -> None:
    if value.isascii():  # O(1): no surrogate, one byte a character
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as error:
            field = _field(position, message, part, call_id)
            raise InvalidMessageError(
                f"{field} is not valid unicode (lone surrogate at {error.start})"
            ) from error
    if "\x00" in value:
        field = _field(position, message, part, call_id)
        raise InvalidMessageError(f"{field} contains a NUL character, which databases reject")
    if size > limit:
        field = _field(position, message, part, call_id)
        raise MessageTooLargeError(
            f"{field} is {size} bytes; the limit is {limit} bytes", size=size, limit=limit
        )


def _check_call_id(value: str, position: int, message: Message, part: str) -> None:
    _check_text(value, MAX_CALL_ID_CHARS * 4, position, message, part)
    if not _printable_ascii(value) and any(unicodedata.category(c) == "Cc" for c in value):
        field = _field(position, message, part, None)
        raise InvalidMessageError(f"{field} contains a control character")
    if len(value) > MAX_CALL_ID_CHARS:
        field = _field(position, message, part, None)
        raise InvalidMessageError(f"{field} is longer than {MAX_CALL_ID_CHARS} characters")


def check_messages(messages: Iterable[Message], max_text_bytes: int) -> None:
    """Raise before writing when any text, name, arguments or reasoning field breaks the limits."""
    limit = max_text_bytes
    for position, message in enumerate(messages):
        if isinstance(message, (UserMessage, SystemMessage)):
            _check_text(message.text, limit, position, message, "text")
        elif isinstance(message, ToolResult):
            _check_call_id(message.id, position, message, "id")
            _check_text(message.tool_name, limit, position, message, "tool_name")
            _check_text(message.text, limit, position, message, "text")
        elif isinstance(message, AiMessage):
            check_ai_shape(message)
            if message.text is not None:
                _check_text(message.text, limit, position, message, "text")
            for call in message.tool_requests:
                _check_call_id(call.id, position, message, "tool call id")
                _check_text(call.name, limit, position, message, "tool name")
                _check_text(call.arguments, limit, position, message, "arguments", call.id)
            for number, part in enumerate(message.reasoning):
                for label in ("provider", "kind", "text", "signature", "id"):
                    value = getattr(part, label)
                    if value is not None:
                        _check_text(value, limit, position, message, f"reasoning[{number}].{label}")


def normalize_app_ids(app_ids: object) -> list[str]:
    """A list of app ids; a single id (a string or int) is one app, never its characters."""
    if isinstance(app_ids, (str, int)):
        return [normalize_app_id(app_ids)]
    if not isinstance(app_ids, Iterable):
        raise InvalidAppIdError(f"app_ids must be a list of ids, got {type(app_ids).__name__}")
    return [normalize_app_id(app_id) for app_id in app_ids]
