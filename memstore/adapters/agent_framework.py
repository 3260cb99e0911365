"""Microsoft Agent Framework history on memstore: ``pip install 'memstore[agent-framework]'``.

The one-line switch (instead of ``InMemoryHistoryProvider()`` or ``FileHistoryProvider(path)``)::

    agent = Agent(client, tools=[...], context_providers=[MemstoreHistoryProvider(store)])
    session = agent.create_session()
    await agent.run("What's the weather?", session=session)

**The app id is the session id** (``AgentSession.session_id``; a ``None`` session id is the app
``default``), so ``memstore show <session id>`` and ``memstore purge`` work on a session as on
any other app. Two providers on one session share its app unless their session ids differ.

``get_messages`` serves memstore's edge-checked window (``store.load_window``, straight from
SQL): the newest ``max_messages`` messages and at most ``max_tokens`` tokens, never starting
inside a tool exchange (a tool call is sent with its results, or not at all); with neither
bound, ``load_window``'s defaults (50 messages, the ``window_max_tokens`` setting).
``save_messages`` appends the messages in one transaction.

Each framework ``Message`` becomes canonical rows, so the window, ``memstore check``, the
display history, purge by user and export see the conversation like any other:

* ``user`` -> :class:`~memstore.messages.UserMessage`, ``system`` ->
  :class:`~memstore.messages.SystemMessage` (the text of their text contents; other contents
  show as ``[image]`` and the like);
* ``assistant`` -> one :class:`~memstore.messages.AiMessage`: its text contents joined as the
  text, each ``function_call`` content a :class:`~memstore.messages.ToolRequest` (the
  arguments as sent, or canonical JSON when the framework holds a dict), each
  ``text_reasoning`` content a :class:`~memstore.messages.Reasoning` part (``provider``
  ``"agent_framework"``, ``kind`` ``"text_reasoning"``, its ``text``, ``protected_data`` as the
  signature, its ``id``; placed before the call it came right before), so a window keeps the
  reasoning with its calls. Hosted calls (run by the service) are no tool requests. A reply
  with neither text nor calls is an opaque row;
* ``tool`` with only ``function_result`` contents -> one
  :class:`~memstore.messages.ToolResult` row per result (its text: the result's text);
* anything else -> an opaque row (an empty system message that other adapters skip).

Each row carries the framework's own serialization (``Message.to_dict()``) in
``metadata["agent_framework_message"]`` (a tool message's results one per row in
``metadata["agent_framework_content"]``, the result text kept once, in the row's text), so
``get_messages`` returns messages whose ``to_dict()`` equals the saved ones'. Rows written by
other means (``store.append``, other adapters, the edge check's synthetic results) are read as
framework messages of their role.

Differences from the framework's providers: ``get_messages`` returns a window, not the whole
history; ``save_messages`` stores every message it is given (the framework's providers leave
out the messages of a batch that repeat the end of the stored history, a replayed
transcript); messages come back as new objects equal by ``to_dict()`` (the in-memory provider
returns the saved objects, ``raw_representation`` included); a call whose result was never
stored gets a synthetic error result in the window (except the calls of the newest reply,
which a run may still be waiting on).

**Event loops and threads** are those of :mod:`memstore.adapters._history`: a
:class:`~memstore.MemoryStore` is used from a worker thread, an
:class:`~memstore.aio.AsyncMemoryStore` natively on its home loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from memstore.extras import needs_extra

with needs_extra(__name__, "agent-framework"):
    from agent_framework import Content, HistoryProvider
    from agent_framework import Message as FrameworkMessage

from memstore import messages as canonical
from memstore.adapters._batch import OPAQUE_MARK, distinct_requests, opaque
from memstore.adapters._history import Store, StoreAccess
from memstore.adapters._loops import is_async_store, on_home_loop
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id, normalize_user_id
from memstore.core.plans import positive
from memstore.core.window import is_synthetic
from memstore.errors import InvalidMessageError
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage

MESSAGE_KEY = "agent_framework_message"
"""The ``metadata`` key holding the framework message (``Message.to_dict()``)."""

CONTENT_KEY = "agent_framework_content"
"""The ``metadata`` key holding one ``function_result`` content of a tool message's row."""

REASONING_PROVIDER = "agent_framework"
REASONING_KIND = "text_reasoning"

DEFAULT_SESSION = "default"
"""The app of a ``None`` session id."""

__all__ = [
    "CONTENT_KEY",
    "MESSAGE_KEY",
    "MemstoreHistoryProvider",
    "messages_to_rows",
    "rows_to_messages",
]

_ELIDED = "elided"
"""Key of a row's content entry: the fields of the content that equal the row's text."""


class MemstoreHistoryProvider(HistoryProvider):
    """The Agent Framework's ``HistoryProvider`` on a memstore store.

    Args:
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`.
        source_id: the provider's source id (default ``"memstore"``).
        max_messages: the window size of :meth:`get_messages` (messages).
        max_tokens: the token budget of :meth:`get_messages` (by the store's token counter).
        user_id: stored on every row written (for ``memstore purge --user-id``).
        flags: the framework's ``HistoryProvider`` flags, as keywords: ``load_messages``,
            ``store_inputs``, ``store_outputs``, ``store_context_messages``,
            ``store_context_from`` (its defaults when left out).

    Example::

        agent = Agent(client, context_providers=[MemstoreHistoryProvider(store, max_messages=40)])
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "memstore"

    def __init__(
        self,
        store: Store,
        source_id: str | None = None,
        *,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        user_id: str | None = None,
        **flags: Any,
    ) -> None:
        super().__init__(source_id or self.DEFAULT_SOURCE_ID, **flags)
        self._access = StoreAccess(store)
        if max_messages is not None:
            positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES)
        if max_tokens is not None:
            positive(max_tokens, "max_tokens", 2**62)
        self.max_messages = max_messages
        self.max_tokens = max_tokens
        self.user_id = normalize_user_id(user_id)

    @staticmethod
    def app_id(session_id: str | None) -> str:
        """The memstore app of a session: the session id itself (``"default"`` for ``None``)."""
        return normalize_app_id(session_id or DEFAULT_SESSION, what="session_id")

    @property
    def store(self) -> Store:
        """The store the history is kept in."""
        return self._access.store

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[FrameworkMessage]:
        """The session's edge-checked window, oldest first (``state`` is not used)."""
        app_id = self.app_id(session_id)
        store = self._access.store
        if is_async_store(store) and on_home_loop(store):
            window = await store.load_window(app_id, self.max_messages, self.max_tokens)
        else:
            load = self._access.sync_store().load_window
            window = await asyncio.to_thread(load, app_id, self.max_messages, self.max_tokens)
        return rows_to_messages(_pending_calls_open(window))

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[FrameworkMessage],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Append ``messages`` to the session's app in one transaction (``state`` is not
        used)."""
        app_id = self.app_id(session_id)
        rows = messages_to_rows(messages)
        if rows:
            await self._access.aappend(app_id, rows, self.user_id)


def _pending_calls_open(window: list[Message]) -> list[Message]:
    """The window without the synthetic results of the newest reply's calls: a run may still
    be waiting on them (an approval, a later batch), as the framework's providers show."""
    last = max((i for i, row in enumerate(window) if isinstance(row, AiMessage)), default=-1)
    tail = window[last + 1 :]
    if last < 0 or not all(isinstance(row, ToolResult) for row in tail):
        return window
    return window[: last + 1] + [row for row in tail if not is_synthetic(row)]


# -- framework -> canonical ------------------------------------------------------------------------


def _json(value: Any, what: str) -> dict[str, Any]:
    try:
        copy: dict[str, Any] = json.loads(json.dumps(value, allow_nan=False, ensure_ascii=False))
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(f"a framework {what} is not JSON: {error}") from error
    return copy


def _content_text(contents: Sequence[Mapping[str, Any]]) -> str:
    """Display text of contents: the text contents joined, others as ``[type]``."""
    parts: list[str] = []
    for content in contents:
        kind = content.get("type")
        if kind == "text":
            parts.append(str(content.get("text") or ""))
        elif kind != "text_reasoning":
            parts.append(f"[{kind}]")
    return "".join(parts)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps({} if value is None else value, ensure_ascii=False, sort_keys=True)


def _reply(data: dict[str, Any]) -> Message:
    """The row of an ``assistant`` message."""
    texts: list[str] = []
    calls: list[ToolRequest] = []
    reasoning: list[canonical.Reasoning] = []
    pending: list[dict[str, Any]] = []  # reasoning after the reply's output: before a call
    for content in data.get("contents") or []:
        kind = content.get("type")
        call_id, name = content.get("call_id"), content.get("name")
        if kind == "text" and isinstance(content.get("text"), str):
            texts.append(content["text"])
        elif kind == "text_reasoning":
            if texts or calls:
                pending.append(content)
            else:
                reasoning.append(_reasoning(content, None))
        elif (
            kind == "function_call"
            and not content.get("hosted")
            and isinstance(call_id, str)
            and call_id
            and isinstance(name, str)
            and name
        ):
            reasoning.extend(_reasoning(part, call_id) for part in pending)
            pending = []
            arguments = _arguments(content.get("arguments"))
            calls.append(ToolRequest(id=call_id, name=name, arguments=arguments))
    reasoning.extend(_reasoning(part, None) for part in pending)
    metadata = {MESSAGE_KEY: data}
    if not texts and not calls:
        return opaque(metadata)
    return AiMessage(
        text="".join(texts) if texts else None,
        tool_requests=distinct_requests(calls),
        reasoning=reasoning,
        metadata=metadata,
    )


def _reasoning(content: Mapping[str, Any], before_call: str | None) -> canonical.Reasoning:
    def text(key: str) -> str | None:
        value = content.get(key)
        return value if isinstance(value, str) else None

    return canonical.Reasoning(
        provider=REASONING_PROVIDER,
        kind=REASONING_KIND,
        text=text("text"),
        signature=text("protected_data"),
        id=text("id"),
        before_call=before_call,
    )


def _result_text(content: Mapping[str, Any]) -> str:
    result = content.get("result")
    if isinstance(result, str):
        return result
    items = content.get("items")
    if isinstance(items, list) and items:
        return _content_text(items)
    return "" if result is None else json.dumps(result, ensure_ascii=False, default=str)


def _elide(content: dict[str, Any], text: str, keep_result: bool) -> dict[str, Any]:
    """The row's entry for a result content: the content without the fields that repeat the
    row's text (``result`` unless ``keep_result``, a text item's ``text``), their places
    listed under ``elided``."""
    copy = dict(content)
    places: list[str | int] = []
    if not keep_result and copy.get("result") == text:
        del copy["result"]
        places.append("result")
    items = copy.get("items")
    if isinstance(items, list):
        copy["items"] = [dict(item) if isinstance(item, dict) else item for item in items]
        for index, item in enumerate(copy["items"]):
            if isinstance(item, dict) and item.get("type") == "text" and item.get("text") == text:
                del item["text"]
                places.append(index)
    return {"content": copy, _ELIDED: places}


def _restore(entry: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The content :func:`_elide` stored (``text``: its row's; a kept ``result`` wins, as an
    opaque row has none)."""
    content = dict(entry["content"])
    if isinstance(content.get("result"), str):
        text = content["result"]
    items = content.get("items")
    if isinstance(items, list):
        content["items"] = [dict(item) if isinstance(item, dict) else item for item in items]
    for place in entry.get(_ELIDED, ()):
        if place == "result":
            content["result"] = text
        else:
            content["items"][place]["text"] = text
    return content


def _results(data: dict[str, Any], called: set[str]) -> list[Message]:
    """The rows of a ``tool`` message of ``function_result`` contents: one per result, the
    first with the message (its contents left to the rows). Each keeps its text once: in the
    row's text when it answers a call of ``called`` (the batch's), else in its ``result``, as
    its row becomes opaque (textless) when no stored call matches."""
    head = {**data, "contents": []}
    rows: list[Message] = []
    for content in data["contents"]:
        text = _result_text(content)
        entry = _elide(content, text, keep_result=content["call_id"] not in called)
        metadata: dict[str, Any] = {CONTENT_KEY: entry}
        if not rows:
            metadata[MESSAGE_KEY] = head
        rows.append(
            ToolResult(
                id=content["call_id"],
                tool_name="",
                text=text,
                is_error=content.get("exception") is not None,
                metadata=metadata,
            )
        )
    return rows


def messages_to_rows(messages: Sequence[FrameworkMessage]) -> list[Message]:
    """The canonical rows of framework messages, in order (each message in ``metadata``)."""
    rows: list[Message] = []
    called: set[str] = set()
    for message in messages:
        rows.extend(_message_rows(_json(message.to_dict(), "message"), called))
        if isinstance(rows[-1], AiMessage):
            called.update(call.id for call in rows[-1].tool_requests)
    return rows


def _message_rows(data: dict[str, Any], called: set[str]) -> list[Message]:
    """The rows of one framework message."""
    contents = data.get("contents") or []
    role = data.get("role")
    if role == "user":
        return [UserMessage(text=_content_text(contents), metadata={MESSAGE_KEY: data})]
    if role == "system":
        return [canonical.SystemMessage(text=_content_text(contents), metadata={MESSAGE_KEY: data})]
    if role == "assistant":
        return [_reply(data)]
    if (
        role == "tool"
        and contents
        and all(
            content.get("type") == "function_result"
            and isinstance(content.get("call_id"), str)
            and content["call_id"]
            for content in contents
        )
    ):
        return _results(data, called)
    return [opaque({MESSAGE_KEY: data})]


# -- canonical -> framework ------------------------------------------------------------------------


def _foreign(message: Message) -> FrameworkMessage | None:
    """The framework message of a row another writer stored (``None``: an opaque row)."""
    if message.metadata.get(OPAQUE_MARK):
        return None
    if isinstance(message, UserMessage):
        return FrameworkMessage("user", [message.text])
    if isinstance(message, canonical.SystemMessage):
        return FrameworkMessage("system", [message.text])
    if isinstance(message, ToolResult):
        return FrameworkMessage(
            "tool", [Content.from_function_result(call_id=message.id, result=message.text)]
        )
    contents: list[Content] = [
        Content.from_text_reasoning(text=part.text, protected_data=part.signature)
        for part in message.reasoning
        if part.provider == REASONING_PROVIDER
    ]
    if message.text:
        contents.append(Content.from_text(message.text))
    contents.extend(
        Content.from_function_call(call_id=call.id, name=call.name, arguments=call.arguments)
        for call in message.tool_requests
    )
    return FrameworkMessage("assistant", contents)


def rows_to_messages(rows: Sequence[Message]) -> list[FrameworkMessage]:
    """The framework messages of rows, in order: each message as it was saved (a tool
    message's results gathered from its rows), other writers' rows converted."""
    out: list[FrameworkMessage] = []
    open_message: dict[str, Any] | None = None
    for row in rows:
        data = row.metadata.get(MESSAGE_KEY)
        entry = row.metadata.get(CONTENT_KEY)
        if open_message is not None and not (entry is not None and data is None):
            out.append(FrameworkMessage.from_dict(open_message))
            open_message = None
        if isinstance(entry, Mapping):
            if isinstance(data, Mapping):
                open_message = {**data, "contents": []}
            if open_message is not None:
                open_message["contents"].append(_restore(entry, row.text or ""))
                continue
            converted = _foreign(row.model_copy(update={"metadata": {}}))
        elif isinstance(data, Mapping):
            converted = FrameworkMessage.from_dict(dict(data))
        else:
            converted = _foreign(row)
        if converted is not None:
            out.append(converted)
    if open_message is not None:
        out.append(FrameworkMessage.from_dict(open_message))
    return out
