"""Which LangChain messages of a graph's ``messages`` still have to be stored, and storing them.

Shared by :class:`~memstore.adapters.langchain.MemstoreMiddleware` and
:class:`~memstore.adapters.langgraph.MemstoreMirrorSaver`. Both see the whole message list
of a LangGraph state and must store each message exactly once, in an order the loader accepts:

* :func:`pending` (pure): the messages whose id is not yet stored, in state order, except that
  each run of tool results is sorted into the call order of the AI message that requested them
  (parallel tools finish in any order); the loader's synthetic interrupted results are never
  pending;
* :func:`write_pending` / :func:`awrite_pending`: store them in one transaction, skipping any
  whose LangChain id is already among the app's newest rows (a step that committed its write
  and then crashed before the graph recorded it would otherwise store the message twice).
  With ``recheck=False`` the caller vouches that no such write can exist (the middleware,
  once a write of the same graph invocation has checked) and the read is skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from typing import Any

from memstore.extras import needs_extra

with needs_extra("memstore.adapters.langchain.MemstoreMiddleware", "langchain"):
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from memstore.adapters._history import StoreAccess
from memstore.adapters._lc_convert import (
    FOREIGN_KEY,
    LANGCHAIN_KEY,
    from_canonical,
    is_orphan_result,
    to_canonical,
)
from memstore.core.steps import adrive, drive
from memstore.core.window import SYNTHETIC_MARK, StoredMessage
from memstore.messages import Message
from memstore.store_reads import Steps
from memstore.store_writes import acall, call

RECHECK_MARGIN = 8
"""Newest rows read beyond the batch size when checking for messages stored already."""

__all__ = [
    "awrite_pending",
    "is_synthetic",
    "pending",
    "stored_message_ids",
    "window_messages",
    "write_pending",
]


def is_synthetic(message: BaseMessage) -> bool:
    """True for the loader's made-up answer to an interrupted call (never stored)."""
    foreign = message.response_metadata.get(FOREIGN_KEY)
    return (
        isinstance(message, ToolMessage)
        and isinstance(foreign, dict)
        and (SYNTHETIC_MARK in foreign)
    )


def _call_positions(messages: Sequence[BaseMessage]) -> dict[str, int]:
    """Call id -> its index among the calls of the latest AI message requesting it."""
    positions: dict[str, int] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            for index, call in enumerate(message.tool_calls):
                if call.get("id"):
                    positions[str(call["id"])] = index
    return positions


def pending(messages: Sequence[BaseMessage], stored: Collection[str]) -> list[BaseMessage]:
    """The messages not in ``stored`` (by id), in the order to store them.

    State order, except that every run of consecutive tool results is put in the order of
    their calls (results answering no known call keep their place after the known ones).
    Synthetic interrupted results are left out.
    """
    fresh = [m for m in messages if (m.id is None or m.id not in stored) and not is_synthetic(m)]
    positions = _call_positions(messages)
    unknown = len(positions) + 1
    out: list[BaseMessage] = []
    run: list[ToolMessage] = []
    for message in [*fresh, None]:
        if isinstance(message, ToolMessage):
            run.append(message)
            continue
        run.sort(key=lambda result: positions.get(result.tool_call_id, unknown))
        out.extend(run)
        run = []
        if message is not None:
            out.append(message)
    return out


def stored_message_ids(rows: Iterable[StoredMessage]) -> set[str]:
    """The LangChain message ids of rows written through the LangChain adapters."""
    ids: set[str] = set()
    for row in rows:
        record = row.message.metadata.get(LANGCHAIN_KEY)
        data = record.get("data") if isinstance(record, dict) else None
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            ids.add(data["id"])
    return ids


def _unseen(batch: Sequence[BaseMessage], rows: Iterable[StoredMessage]) -> list[Message]:
    seen = stored_message_ids(rows)
    return [to_canonical(m) for m in batch if m.id is None or m.id not in seen]


def _write_pending_steps(
    batch: Sequence[BaseMessage],
    recheck: bool,
    newest_rows: Callable[[int], Any],
    append: Callable[[list[Message]], Any],
) -> Steps[None]:
    """:func:`write_pending` decided once: ``newest_rows(limit)`` reads the app's newest rows,
    ``append(messages)`` stores the rest."""
    if not batch:
        return
    if recheck:
        rows = yield partial(newest_rows, len(batch) + RECHECK_MARGIN)
        messages = _unseen(batch, rows)
    else:
        messages = [to_canonical(m) for m in batch]
    if messages:
        yield partial(append, messages)


def write_pending(
    access: StoreAccess,
    app_id: str,
    user_id: str | None,
    batch: Sequence[BaseMessage],
    *,
    recheck: bool = True,
) -> None:
    """Store ``batch`` (from :func:`pending`) in one transaction, minus what is stored already.

    ``recheck=False`` skips the read of the app's newest rows: only for a caller that knows
    no earlier attempt can have committed any message of ``batch``.
    """
    newest = partial(access.newest_rows, app_id, before_id=None)
    append = partial(access.append, app_id, user_id=user_id)
    drive(_write_pending_steps(batch, recheck, newest, append), call)


async def awrite_pending(
    access: StoreAccess,
    app_id: str,
    user_id: str | None,
    batch: Sequence[BaseMessage],
    *,
    recheck: bool = True,
) -> None:
    """:func:`write_pending` as a coroutine."""
    newest = partial(access.anewest_rows, app_id, before_id=None)
    append = partial(access.aappend, app_id, user_id=user_id)
    await adrive(_write_pending_steps(batch, recheck, newest, append), acall)


def window_messages(window: Iterable[Message]) -> list[BaseMessage]:
    """The LangChain messages of a window, each with an id (the graph state needs them).

    Opaque tool results (answering a call that was never stored) are left out. Rows stored
    through LangChain keep their own id. Rows written another way and the
    synthetic interrupted results get a fresh random one: the middleware records it as stored
    at once, so it only has to be unique within the state.
    """
    out: list[BaseMessage] = []
    for message in window:
        converted: Any = from_canonical(message)
        if converted is None or is_orphan_result(message, converted):
            continue
        if converted.id is None:
            converted.id = f"memstore-{uuid.uuid4()}"
        out.append(converted)
    return out
