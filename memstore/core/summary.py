"""Summary rows: what a compaction stores, and how a window gives it to the model. Pure.

A compaction (:meth:`memstore.ChatMemory.compact`) stores one row in the original history:
a :class:`~memstore.SystemMessage` holding the summary text, whose metadata key
:data:`SUMMARY_MARK` records the id range it covers::

    {"memstore_summary": {"first_id": 7, "last_id": 93, "messages": 40}}

Its ``message_type`` column is ``"summary"``. Rows with ``first_id <= id <= last_id`` are
*covered*: windows built with summaries are ``[summary] + the newest whole units after
last_id``. Appends never carry :data:`SUMMARY_MARK` (memstore refuses it), so a message with
the mark is always a summary memstore wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memstore.errors import InvalidInputError
from memstore.messages import Message, SystemMessage, UserMessage

SUMMARY_MARK = "memstore_summary"
"""Metadata key of a summary message (its value: the covered range)."""

SummaryRole = Literal["system", "user", "exclude"]
SUMMARY_ROLES: tuple[str, ...] = ("system", "user", "exclude")


@dataclass(frozen=True, slots=True)
class SummaryInfo:
    """The range a summary covers (ids of the original history, both ends included)."""

    first_id: int
    last_id: int
    messages: int
    """Messages given to the summarizer besides the previous summary."""

    def as_metadata(self) -> dict[str, int]:
        return {"first_id": self.first_id, "last_id": self.last_id, "messages": self.messages}


def is_summary(message: Message) -> bool:
    """True for a summary (stored row or window message)."""
    return SUMMARY_MARK in message.metadata and isinstance(message, (SystemMessage, UserMessage))


def summary_info(message: Message) -> SummaryInfo | None:
    """The covered range of a summary message; ``None`` for any other message."""
    if not is_summary(message):
        return None
    value = message.metadata[SUMMARY_MARK]
    if not isinstance(value, Mapping):
        return None
    try:
        return SummaryInfo(int(value["first_id"]), int(value["last_id"]), int(value["messages"]))
    except (KeyError, TypeError, ValueError):
        return None


def stored_summary(text: str, info: SummaryInfo) -> SystemMessage:
    """The message a compaction stores."""
    return SystemMessage(text=text, metadata={SUMMARY_MARK: info.as_metadata()})


def summary_role(value: str) -> SummaryRole:
    """Validate a ``summary_role`` value."""
    if value == "system":
        return "system"
    if value == "user":
        return "user"
    if value == "exclude":
        return "exclude"
    raise InvalidInputError(f"summary_role must be one of {list(SUMMARY_ROLES)}, got {value!r}")


def window_summary(row_id: int, message: Message, role: SummaryRole) -> Message | None:
    """How a stored summary opens a window: a system message (default), a user message, or
    nothing (``"exclude"``). Its metadata keeps the range and adds the row's ``id``."""
    info = summary_info(message)
    if info is None or role == "exclude":
        return None
    metadata: dict[str, Any] = {SUMMARY_MARK: {**info.as_metadata(), "id": row_id}}
    if role == "user":
        return UserMessage(text=message.text, metadata=metadata)
    return SystemMessage(text=message.text, metadata=metadata)


def carries_summary_mark(message: Message) -> bool:
    """True when a message to append carries the reserved :data:`SUMMARY_MARK` key."""
    return SUMMARY_MARK in message.metadata
