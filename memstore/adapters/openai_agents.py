"""OpenAI Agents SDK session on memstore: ``pip install 'memstore[openai-agents]'``.

>>> import asyncio
>>> from memstore import MemoryStore, Settings
>>> from memstore.adapters.openai_agents import MemstoreSession
>>> store = MemoryStore(Settings(database_url="sqlite:///:memory:"))
>>> store.migrate()
>>> session = MemstoreSession("user-42", store)
>>> asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
>>> asyncio.run(session.get_items())
[{'role': 'user', 'content': 'hi'}]

The one-line switch (instead of ``SQLiteSession("user-42", "conversations.db")``)::

    session = MemstoreSession("user-42", store)
    result = await Runner.run(agent, "What's the weather?", session=session)

After a compaction (:meth:`memstore.ChatMemory.compact` on the session id) the session's
items are the summary (a ``system`` item; ``user``, or none, per the ``summary_role``
setting) followed by the items after the range it covers, as the SDK's compaction sessions
replace older items; the summary counts toward ``limit``. The stored items stay in the
database (``memstore show --original``, export).

Semantics are the SDK's: ``get_items()`` returns every item in the order added,
``get_items(limit)`` the latest ``limit`` items in chronological order (the default limit comes
from ``session_settings.limit``; ``limit <= 0`` gives ``[]``), ``pop_item()`` removes and
returns the newest item (``None`` when empty), ``clear_session()`` removes everything.

Each item is one row of the original history (``session_id`` is the app id), the item itself
(exactly as given, JSON) in ``metadata["openai_agents_item"]``, so every item type round-trips
unchanged. The row is what the rest of memstore understands of the item:

* a user / assistant / system / developer message -> ``UserMessage`` / ``AiMessage`` /
  ``SystemMessage`` with the text of its content parts (other parts show as ``[input_image]``
  and the like);
* ``function_call`` -> ``AiMessage(tool_requests=[ToolRequest(call_id, name, arguments)])``
  (a ``toolExecutionRequest`` row), ``function_call_output`` -> ``ToolResult(call_id,
  tool_name of the matching call, output)`` (a ``toolExecutionResult`` row), so the window,
  the loader's edge check, ``memstore check`` and the display history see the tool calls;
* everything else (reasoning, hosted and other tool-call items, an output whose call is not in
  the session) -> an opaque row: an empty ``SystemMessage`` with the item in ``metadata``. It
  gets no display row, and in a window it is an empty system message that both providers
  accept; an empty AI message instead would break Anthropic's non-empty-content rule.

Rows written by other means (``store.append``, the collector, a LangChain4j service) are read
as Responses input items: ``{"role": ..., "content": text}`` messages, ``function_call`` and
``function_call_output`` items. Popping such an AI row with several calls removes its last
call only.

**Event loops and threads.** With a :class:`~memstore.MemoryStore` every call runs in a worker
thread (``asyncio.to_thread``), so any loop or thread may use the session. With an
:class:`~memstore.aio.AsyncMemoryStore` the session uses it natively on its home loop (the
first loop it is used on) and on any other loop (``Runner.run_sync`` in another thread, a
second ``asyncio.run``) runs the call in a worker thread on a sync twin on the same database
and cache (see :mod:`memstore.adapters._history`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, cast

from memstore.extras import missing_extra

try:
    from agents.items import TResponseInputItem
    from agents.memory import SessionABC, SessionSettings
except ImportError as error:
    raise missing_extra(__name__, "openai-agents", error) from error

from memstore.adapters._history import OPAQUE_MARK, Store, StoreAccess, opaque
from memstore.core.inputs import (
    MAX_ROW_ID,
    MAX_WINDOW_MESSAGES,
    bounded_int,
    normalize_app_id,
    normalize_user_id,
)
from memstore.core.summary import is_summary, summary_info, window_summary
from memstore.core.window import StoredMessage
from memstore.errors import InvalidMessageError
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)

AGENTS_KEY = "openai_agents_item"
"""The ``metadata`` key holding the item exactly as it was added."""

__all__ = ["AGENTS_KEY", "MemstoreSession", "item_to_message", "message_to_items"]

_PAGE_EXTRA = 16
"""Rows read beyond ``limit`` per page of ``get_items(limit)``."""


class MemstoreSession(SessionABC):
    """The Agents SDK's ``Session`` on a memstore store.

    Args:
        session_id: the app id the items are stored under (1-128 characters).
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`.
        session_settings: the SDK's ``SessionSettings`` (or its dict form); its ``limit`` is
            the default of :meth:`get_items`.
        user_id: stored on every row written (for ``memstore purge --user-id``).

    Example::

        session = MemstoreSession("user-42", store)
        await Runner.run(agent, "Add 1 and 2", session=session)
        await session.get_items(limit=2)        # the latest two items
    """

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        user_id: str | None = None,
    ) -> None:
        self.session_id = normalize_app_id(session_id, what="session_id")
        self.user_id = normalize_user_id(user_id)
        self.session_settings = _settings(session_settings)
        self._access = StoreAccess(store)

    @property
    def store(self) -> Store:
        return self._access.store

    def _default_limit(self) -> int | None:
        settings = self.session_settings  # the SDK types it optional
        return None if settings is None else settings.limit

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, chronological.

        Args:
            limit: the latest ``limit`` items only (still oldest first); ``None`` uses
                ``session_settings.limit``, and when that is ``None`` too every item.

        Returns:
            The items as they were added (rows from elsewhere converted).
        """
        wanted = self._default_limit() if limit is None else limit
        if wanted is not None:
            # any int up to the window bound; zero and negatives mean "no items", as in the SDK
            bounded_int(wanted, "limit", minimum=-MAX_ROW_ID, maximum=MAX_WINDOW_MESSAGES)
        if wanted is not None and wanted <= 0:
            return []
        rows: list[StoredMessage] | None = None
        page = 0 if wanted is None else wanted + _PAGE_EXTRA
        if wanted is None:
            summary = await self._access.alatest_summary(self.session_id)
        else:  # the first page and the summary in one read
            rows, summary = await self._access.anewest_rows_and_summary(self.session_id, page)
        info = None if summary is None else summary_info(summary.message)
        floor = -1 if info is None else info.last_id
        lead: list[TResponseInputItem] = []
        if summary is not None and info is not None:
            opener = window_summary(summary.id, summary.message, self.store.settings.summary_role)
            lead = [] if opener is None else _items([StoredMessage(summary.id, opener)])
        if wanted is None:
            every = await self._access.aall_rows(self.session_id)
            return lead + _items([r for r in every if r.id > floor and not is_summary(r.message)])
        want = wanted - len(lead)
        items: list[TResponseInputItem] = []
        before: int | None = None
        while len(items) < want:
            if rows is None:
                rows = await self._access.anewest_rows(self.session_id, page, before)
            items = _items([r for r in rows if r.id > floor]) + items
            if len(rows) < page or (rows and rows[0].id <= floor):
                break
            before = rows[0].id
            rows = None
        return (lead + items[-want:]) if want > 0 else lead[-wanted:]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, in one transaction.

        Args:
            items: Responses input items (dicts); each must be JSON.
        """
        batch = [item_to_message(item) for item in items]
        if batch:
            await self._access.aappend(self.session_id, batch, self.user_id)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (``None`` when the session is empty).

        The row is hard-deleted, the cached window dropped (the next read rebuilds it), and
        the display row deleted when the item alone produced it (a user message, a plain
        reply); a display row that also shows other items stays.
        """
        popped = await self._access.apop(self.session_id, _shrink)
        if popped is None:
            return None
        return message_to_items(popped.message)[-1]

    async def clear_session(self) -> None:
        """Hard-delete every row of the session in both tables and its cached window."""
        await self._access.apurge(self.session_id)

    def close(self) -> None:
        """Close what the session opened: nothing. The store passed in is the caller's to
        close (``store.close()``), as an injected client is for the SDK's own sessions; this
        exists so code written for ``SQLiteSession.close()`` keeps working."""


def _settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    return SessionSettings(**value)


def _items(rows: list[StoredMessage]) -> list[TResponseInputItem]:
    return [item for row in rows for item in message_to_items(row.message)]


def _shrink(message: Message) -> Message | Literal[False] | None:
    """What a pop leaves of the newest row: ``None`` deletes it, a message replaces it, and
    ``False`` skips it (another adapter's opaque row: not an item of this session)."""
    items = message_to_items(message)
    if not items:
        return False
    if len(items) == 1 or not isinstance(message, AiMessage):
        return None
    if len(message.tool_requests) == 1 and message.text is not None:
        return AiMessage(text=message.text, metadata=message.metadata)
    return message.model_copy(update={"tool_requests": message.tool_requests[:-1]})


# -- items -> canonical ----------------------------------------------------------------------------


def _part_text(part: object) -> str:
    if isinstance(part, Mapping):
        for key in ("text", "refusal"):
            value = part.get(key)
            if isinstance(value, str):
                return value
        return f"[{part.get('type', 'part')}]"
    return part if isinstance(part, str) else ""


def _content_text(content: object) -> str:
    """Display text of a message's content: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    return ""


def _item_json(item: object) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise InvalidMessageError(
            f"session items must be dicts (TResponseInputItem), got {type(item).__name__}"
        )
    try:
        copy: dict[str, Any] = json.loads(json.dumps(item, allow_nan=False, ensure_ascii=False))
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(f"a session item is not JSON: {error}") from error
    return copy


def item_to_message(item: TResponseInputItem) -> Message:
    """The canonical row of one item (the item itself in ``metadata``)."""
    data = _item_json(item)
    metadata: dict[str, Any] = {AGENTS_KEY: data}
    kind = data.get("type")
    call_id = data.get("call_id")
    if kind == "function_call" and isinstance(call_id, str) and call_id:
        name = data.get("name")
        arguments = data.get("arguments")
        if isinstance(name, str) and name:
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            request = ToolRequest(id=call_id, name=name, arguments=arguments)
            return AiMessage(text=None, tool_requests=[request], metadata=metadata)
    elif kind == "function_call_output" and isinstance(call_id, str) and call_id:
        output = data.get("output")
        text = output if isinstance(output, str) else _content_text(output)
        # tool_name "" is filled in from the call (in the batch or stored) before writing.
        return ToolResult(id=call_id, tool_name="", text=text, metadata=metadata)
    elif kind in (None, "message"):
        role = data.get("role")
        text = _content_text(data.get("content"))
        if role == "user":
            return UserMessage(text=text, metadata=metadata)
        if role == "assistant":
            return AiMessage(text=text, metadata=metadata)
        if role in ("system", "developer"):
            return SystemMessage(text=text, metadata=metadata)
    return opaque(metadata)


# -- canonical -> items ----------------------------------------------------------------------------


def message_to_items(message: Message) -> list[TResponseInputItem]:
    """The items of one row: the stored item, or a foreign row's conversion (maybe none)."""
    item = message.metadata.get(AGENTS_KEY)
    if isinstance(item, dict):
        return [cast(TResponseInputItem, item)]
    if message.metadata.get(OPAQUE_MARK):
        return []
    out: list[dict[str, Any]] = []
    if isinstance(message, UserMessage):
        out.append({"role": "user", "content": message.text})
    elif isinstance(message, SystemMessage):
        out.append({"role": "system", "content": message.text})
    elif isinstance(message, ToolResult):
        out.append({"type": "function_call_output", "call_id": message.id, "output": message.text})
    else:
        if message.text is not None and (message.text or not message.tool_requests):
            out.append({"role": "assistant", "content": message.text})
        out.extend(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }
            for call in message.tool_requests
        )
    return [cast(TResponseInputItem, entry) for entry in out]
