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
from ``session_settings.limit``; ``limit=0`` gives ``[]`` and a negative limit every item, as
the SDK's SQLite sessions do), ``pop_item()`` removes and returns the newest item (``None``
when empty), ``clear_session()`` removes everything.

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

**Reasoning items** (issue 31). Reasoning models refuse a ``function_call`` item sent without
the ``reasoning`` item that came right before it. A ``function_call`` row therefore also
carries, as :class:`~memstore.messages.Reasoning` parts of its ``AiMessage`` (byte for byte:
``id``, summary, ``encrypted_content``, every other key), the ``reasoning`` items directly
before it in the session, with only reasoning items in between: in the same batch, or at the
end of the session when the batch starts with them (``add_items`` then reads the newest rows
first). A ``function_call`` item's own ``id`` (``fc_...``) goes to
``metadata["openai_item_ids"]``. So memstore's window (``store.memory(app).messages()``,
``load_window``) keeps each call with its reasoning through the edge check, and
:func:`memstore.formats.to_responses` renders the reasoning right before the call, with the
call's item id.

The reasoning item keeps its own opaque row as well; the reasoning is stored twice (both
copies in the payload, encrypted at rest and purged together). The alternative, one row for
the reasoning and its call, was left aside: a call added in a later batch than its reasoning
would have to rewrite a stored row, and every item being one row keeps ``get_items`` (the
items exactly as given, in order), ``pop_item`` (the call first, then its reasoning, each its
own row) and ``limit`` as they are. The copy is never rendered twice: the opaque row is an
empty system message in a window and only the call row's parts become ``reasoning`` items.
Reasoning that stands before an assistant message, or before another reasoning run's call, is
not copied (the call after a message goes without its item id, which the API accepts); a
reasoning item without a string ``id``, or whose ``summary`` or ``encrypted_content`` is not
the API's shape, is not copied either, nor is the rest of its run (its call goes without
reasoning and without item id, rather than with part of it). The read of the newest rows and
the write are two steps: a batch written by another handle in between could place the copy
one batch off (the SDK writes one session from one run at a time).

``keep_reasoning_with_calls=True`` makes ``get_items(limit)`` return more than ``limit`` items
when the latest ``limit`` start at a ``function_call`` whose model output run (the
``reasoning``, assistant message, ``function_call`` and other ``*_call`` items right before
it) holds reasoning: the items from the first of those reasoning items on, so the SDK never
sends a call without its reasoning. The last item is always the newest one, so a reasoning
item is last only while its call does not exist yet. The default is the SDK's plain count.

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

from memstore.extras import needs_extra

with needs_extra(__name__, "openai-agents"):
    from agents.items import TResponseInputItem
    from agents.memory import SessionABC, SessionSettings

import memstore.messages as msg
from memstore.adapters._batch import OPAQUE_MARK, opaque
from memstore.adapters._history import Store, StoreAccess
from memstore.core.inputs import (
    MAX_ROW_ID,
    MAX_WINDOW_MESSAGES,
    bounded_int,
    normalize_app_id,
    normalize_user_id,
)
from memstore.core.reasoning import RESPONSES_ITEM_IDS_KEY, responses_item_part
from memstore.core.summary import is_summary, summary_info, window_summary
from memstore.core.window import StoredMessage
from memstore.errors import InvalidInputError, InvalidMessageError
from memstore.messages import Message

AGENTS_KEY = "openai_agents_item"
"""The ``metadata`` key holding the item exactly as it was added."""

__all__ = ["AGENTS_KEY", "MemstoreSession", "item_to_message", "message_to_items"]

_PAGE_EXTRA = 16
"""Rows read beyond ``limit`` per page of ``get_items(limit)``."""

_TAIL_PAGE = 8
"""Newest rows read per page while looking for the reasoning items a batch's first
``function_call`` follows."""


class MemstoreSession(SessionABC):
    """The Agents SDK's ``Session`` on a memstore store.

    Args:
        session_id: the app id the items are stored under (1-128 characters).
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`.
        session_settings: the SDK's ``SessionSettings`` (or its dict form); its ``limit`` is
            the default of :meth:`get_items`.
        user_id: stored on every row written (for ``memstore purge --user-id``).
        keep_reasoning_with_calls: let :meth:`get_items` with a limit return the
            ``reasoning`` items (and the model output items between them) a ``function_call``
            at the start of its answer came after, beyond ``limit`` (see the module docs);
            off by default, the SDK's plain latest ``limit`` items.

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
        keep_reasoning_with_calls: bool = False,
    ) -> None:
        self.session_id = normalize_app_id(session_id, what="session_id")
        self.user_id = normalize_user_id(user_id)
        self.session_settings = _settings(session_settings)
        if not isinstance(keep_reasoning_with_calls, bool):
            raise InvalidInputError("keep_reasoning_with_calls must be a bool")
        self.keep_reasoning_with_calls = keep_reasoning_with_calls
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
                ``session_settings.limit``, and when that is ``None`` too every item; ``0``
                no item, a negative limit every item (as the SDK's sessions: SQLite's
                ``LIMIT -1``). With
                ``keep_reasoning_with_calls``, a ``function_call`` first item brings the
                reasoning before it (more than ``limit`` items).

        Returns:
            The items as they were added (rows from elsewhere converted).
        """
        wanted = self._default_limit() if limit is None else limit
        if wanted is not None:
            # any int up to the window bound; zero means "no items" and a negative limit
            # every item, as in the SDK's sessions (SQLite's ``LIMIT -1``)
            bounded_int(wanted, "limit", minimum=-MAX_ROW_ID, maximum=MAX_WINDOW_MESSAGES)
            if wanted < 0:
                wanted = None
        if wanted == 0:
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
        if want <= 0:
            return lead[-wanted:]
        items: list[TResponseInputItem] = []
        before: int | None = None
        while True:
            if rows is None:
                rows = await self._access.anewest_rows(self.session_id, page, before)
            items = _items([r for r in rows if r.id > floor]) + items
            start, settled = max(0, len(items) - want), True
            if self.keep_reasoning_with_calls:
                start, settled = _reasoning_start(items, start)
            if len(rows) < page or (rows and rows[0].id <= floor):
                break  # no older items
            if len(items) >= want and settled:
                break
            before = rows[0].id
            rows = None
        return lead + items[start:]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order, in one transaction.

        A ``function_call`` item's row carries the ``reasoning`` items right before it as
        reasoning parts (see the module docs); when the batch starts with reasoning items
        and a call, or a call, the session's newest rows are read first for reasoning items
        at its end.

        Args:
            items: Responses input items (dicts); each must be JSON.
        """
        batch = [item_to_message(item) for item in items]
        if not batch:
            return
        earlier: list[dict[str, Any]] = []
        if _starts_with_call(batch):
            earlier = await self._trailing_reasoning()
        await self._access.aappend(self.session_id, _tie_reasoning(batch, earlier), self.user_id)

    async def _trailing_reasoning(self) -> list[dict[str, Any]]:
        """The ``reasoning`` items at the end of the session (after its last other item),
        chronological."""
        found: list[dict[str, Any]] = []
        before: int | None = None
        while True:
            rows = await self._access.anewest_rows(self.session_id, _TAIL_PAGE, before)
            for row in reversed(rows):
                items = message_to_items(row.message)
                if not items:
                    continue  # another adapter's row: no item of this session
                item = items[-1]
                if len(items) > 1 or _kind(item) != "reasoning":
                    return found
                found.insert(0, cast(dict[str, Any], item))
            if len(rows) < _TAIL_PAGE:
                return found
            before = rows[0].id

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


def _kind(item: object) -> object:
    return item.get("type") if isinstance(item, Mapping) else None


def _is_model_output(item: object) -> bool:
    """An item a model response produces (what a ``reasoning`` item may precede)."""
    kind = _kind(item)
    if kind in (None, "message"):
        return isinstance(item, Mapping) and item.get("role") == "assistant"
    return kind == "reasoning" or (isinstance(kind, str) and kind.endswith("_call"))


def _reasoning_start(items: list[TResponseInputItem], start: int) -> tuple[int, bool]:
    """Where ``get_items(limit)`` starts with ``keep_reasoning_with_calls``, and whether that
    is settled by ``items`` (``False``: older items could move it back).

    When ``items[start]`` is a ``function_call``, the model output run it belongs to (the
    output items right before it) is searched for reasoning: the start moves back to the
    first reasoning item of the run."""
    if start >= len(items) or _kind(items[start]) != "function_call":
        return start, True
    first = start
    while first > 0 and _is_model_output(items[first - 1]):
        first -= 1
    reasoning = [k for k in range(first, start) if _kind(items[k]) == "reasoning"]
    return (reasoning[0] if reasoning else start), first > 0


def _shrink(message: Message) -> Message | Literal[False] | None:
    """What a pop leaves of the newest row: ``None`` deletes it, a message replaces it, and
    ``False`` skips it (another adapter's opaque row: not an item of this session)."""
    items = message_to_items(message)
    if not items:
        return False
    if len(items) == 1 or not isinstance(message, msg.AiMessage):
        return None
    if len(message.tool_requests) == 1 and message.text is not None:
        return msg.AiMessage(text=message.text, metadata=message.metadata)
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
    """The canonical row of one item (the item itself in ``metadata``).

    A ``function_call`` item's ``id`` goes to ``metadata["openai_item_ids"]``; the reasoning
    before it is added by :func:`_tie_reasoning`, which sees the items around it."""
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
            item_id = data.get("id")
            if isinstance(item_id, str) and item_id:
                metadata[RESPONSES_ITEM_IDS_KEY] = {call_id: item_id}
            request = msg.ToolRequest(id=call_id, name=name, arguments=arguments)
            return msg.AiMessage(text=None, tool_requests=[request], metadata=metadata)
    elif kind == "function_call_output" and isinstance(call_id, str) and call_id:
        output = data.get("output")
        text = output if isinstance(output, str) else _content_text(output)
        # tool_name "" is filled in from the call (in the batch or stored) before writing.
        return msg.ToolResult(id=call_id, tool_name="", text=text, metadata=metadata)
    elif kind in (None, "message"):
        role = data.get("role")
        text = _content_text(data.get("content"))
        if role == "user":
            return msg.UserMessage(text=text, metadata=metadata)
        if role == "assistant":
            return msg.AiMessage(text=text, metadata=metadata)
        if role in ("system", "developer"):
            return msg.SystemMessage(text=text, metadata=metadata)
    return opaque(metadata)


def _is_call_row(message: Message) -> bool:
    """A row :func:`item_to_message` made of a ``function_call`` item."""
    item = message.metadata.get(AGENTS_KEY)
    return (
        isinstance(message, msg.AiMessage)
        and bool(message.tool_requests)
        and isinstance(item, Mapping)
        and item.get("type") == "function_call"
    )


def _is_reasoning_row(message: Message) -> bool:
    item = message.metadata.get(AGENTS_KEY)
    return isinstance(item, Mapping) and item.get("type") == "reasoning"


def _starts_with_call(batch: list[Message]) -> bool:
    """Whether the batch's first item other than reasoning is a ``function_call``: reasoning
    items stored before the batch then belong to that call."""
    for message in batch:
        if not _is_reasoning_row(message):
            return _is_call_row(message)
    return False


def _tie_reasoning(
    batch: list[Message], earlier: list[dict[str, Any]] | None = None
) -> list[Message]:
    """``batch`` with each ``function_call`` row carrying the ``reasoning`` items right before
    it as reasoning parts (only reasoning items in between; ``earlier``: the reasoning items
    stored at the end of the session, before the batch). A run with an item that does not
    convert gives no parts at all."""
    pending: list[Mapping[str, Any]] = list(earlier or ())
    out: list[Message] = []
    for message in batch:
        if _is_reasoning_row(message):
            pending.append(message.metadata[AGENTS_KEY])
        elif isinstance(message, msg.AiMessage) and _is_call_row(message):
            parts = [responses_item_part(item) for item in pending]
            if parts and all(part is not None for part in parts):
                message = msg.AiMessage(
                    text=message.text,
                    tool_requests=message.tool_requests,
                    reasoning=parts,
                    metadata=message.metadata,
                )
            pending = []
        else:
            pending = []
        out.append(message)
    return out


# -- canonical -> items ----------------------------------------------------------------------------


def message_to_items(message: Message) -> list[TResponseInputItem]:
    """The items of one row: the stored item, or a foreign row's conversion (maybe none)."""
    item = message.metadata.get(AGENTS_KEY)
    if isinstance(item, dict):
        return [cast(TResponseInputItem, item)]
    if message.metadata.get(OPAQUE_MARK):
        return []
    out: list[dict[str, Any]] = []
    if isinstance(message, msg.UserMessage):
        out.append({"role": "user", "content": message.text})
    elif isinstance(message, msg.SystemMessage):
        out.append({"role": "system", "content": message.text})
    elif isinstance(message, msg.ToolResult):
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
