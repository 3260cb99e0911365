"""LangChain on memstore: ``pip install 'memstore[langchain]'``.

For LangChain 1.x agents use :class:`MemstoreMiddleware` (``langchain.agents.create_agent``;
needs ``langchain >= 1.0``, imported lazily from :mod:`memstore.adapters._lc_middleware`)::

    agent = create_agent(model, tools, middleware=[MemstoreMiddleware(store, max_messages=50)])
    agent.invoke({"messages": [{"role": "user", "content": "hi"}]},
                 {"configurable": {"thread_id": "app-42"}})

**Legacy:** :class:`MemstoreChatMessageHistory` implements langchain-core's
``BaseChatMessageHistory``, deprecated since langchain-core 1.6.4 (removal in 2.0). It stays
for ``RunnableWithMessageHistory`` users on langchain-core 1.x:

```pycon
>>> from langchain_core.messages import AIMessage, HumanMessage
>>> from memstore import MemoryStore, Settings
>>> from memstore.adapters.langchain import MemstoreChatMessageHistory
>>> store = MemoryStore(Settings(database_url="sqlite:///:memory:"))
>>> store.migrate()
>>> history = MemstoreChatMessageHistory(store, "session-1")
>>> history.add_messages([HumanMessage("hi"), AIMessage("hello")])
>>> [m.type for m in history.messages]
['human', 'ai']

```

The one-line switch for ``RunnableWithMessageHistory``::

    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: MemstoreChatMessageHistory(store, session_id),
        input_messages_key="question",
        history_messages_key="history",
    )

Each LangChain message is one row of the original history (``session_id`` is the app id):
``HumanMessage`` -> ``UserMessage``, ``AIMessage`` -> ``AiMessage`` (its ``tool_calls`` ->
``ToolRequest``\\ s, arguments being the raw JSON string from ``additional_kwargs["tool_calls"]``
when it still matches the parsed ``args``, else ``json.dumps(args)``), ``ToolMessage`` ->
``ToolResult`` (``status == "error"`` -> ``is_error``), ``SystemMessage`` -> ``SystemMessage``,
``ChatMessage`` by its role. The whole message (langchain's ``message_to_dict``) rides along in
``metadata["langchain_message"]``, so reading back returns an equal message: ``tool_calls``,
``invalid_tool_calls``, ``tool_call_id``, ``status``, ``artifact``, ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, ``name``, ``id``, content blocks and chunk classes
round-trip unchanged. Messages the canonical model has no type for (``FunctionMessage``, a
``ChatMessage`` with another role, a ``ToolMessage`` answering a call the session never stored)
are kept as opaque rows (an empty ``SystemMessage``; see :mod:`memstore.adapters._history`).
Everything in a message must be JSON (an artifact that is not raises
:class:`~memstore.errors.InvalidMessageError`). Rows written without this adapter (by
``store.append``, the collector, a LangChain4j service) are read as the matching LangChain
message, their ``metadata`` in ``response_metadata["memstore"]``.

An ``AIMessage``'s reasoning that its provider takes back becomes the row's
:class:`~memstore.messages.Reasoning` parts, in place (a part after the reply's text or a call
goes right before the next call), so a window rebuilt from SQL sends it with its calls
(``docs/integrations/langchain.md``, "Reasoning"): langchain-anthropic ``thinking`` (with its
signature) and ``redacted_thinking`` blocks, langchain-openai Responses ``reasoning`` items
(in ``content``, or ``additional_kwargs["reasoning"]`` with ``output_version="v0"``), LangChain
1.x ``reasoning`` blocks of a reply whose ``response_metadata["model_provider"]`` is
``"anthropic"`` or ``"openai"``, and ``additional_kwargs["reasoning_content"]``. Anything else
(no signature, another provider, a malformed block) stays in the metadata copy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from memstore.extras import needs_extra

with needs_extra(__name__, "langchain"):
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage

from memstore.adapters._history import Store, StoreAccess
from memstore.adapters._lc_convert import (
    FOREIGN_KEY,
    LANGCHAIN_KEY,
    from_canonical,
    from_rows,
    record_to_canonical,
    to_canonical,
    window_rows,
)
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id, normalize_user_id
from memstore.core.plans import positive
from memstore.errors import InvalidInputError

__all__ = [
    "FOREIGN_KEY",
    "LANGCHAIN_KEY",
    "MemstoreChatMessageHistory",
    "MemstoreMiddleware",
    "RunKeys",
    "from_canonical",
    "record_to_canonical",
    "thread_keys",
    "to_canonical",
]

if TYPE_CHECKING:
    from memstore.adapters._lc_middleware import MemstoreMiddleware, RunKeys, thread_keys

_AGENT_EXPORTS = ("MemstoreMiddleware", "RunKeys", "thread_keys")


def __getattr__(name: str) -> object:
    # The middleware needs langchain >= 1.0 and langgraph; the legacy history only
    # langchain-core, so it stays importable without them.
    if name in _AGENT_EXPORTS:
        from memstore.adapters import _lc_middleware

        return getattr(_lc_middleware, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class MemstoreChatMessageHistory(BaseChatMessageHistory):
    """langchain-core's ``BaseChatMessageHistory`` on a memstore store (legacy).

    Legacy: the base class is deprecated in langchain-core 1.6.4 and goes in 2.0; new agents
    use :class:`MemstoreMiddleware`.

    Args:
        store: a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`.
            The ``a*`` methods use an async store natively (on its home event loop) and a sync
            store in a worker thread; the blocking methods on an async store use its sync twin
            (see :mod:`memstore.adapters._history`).
        session_id: the app id the messages are stored under (1-128 characters, or an int).
        window: ``False`` (default): :attr:`messages` is the full history, every row in order.
            ``True``: it is the edge-checked window (``store.memory(session_id).messages()``),
            which never starts inside a tool exchange and answers unfinished tool calls.
        max_messages: with ``window=True``, load a window of this size straight from SQL
            (``store.load_window``) instead of the cached window.
        user_id: stored on every row written (for ``memstore purge --user-id``).

    ``clear()`` purges the session (both tables and the cached window), like
    ``store.purge(session_id)``.
    """

    def __init__(
        self,
        store: Store,
        session_id: str | int,
        *,
        window: bool = False,
        max_messages: int | None = None,
        user_id: str | None = None,
    ) -> None:
        super().__init__()
        self.session_id = normalize_app_id(session_id, what="session_id")
        self.user_id = normalize_user_id(user_id)
        if max_messages is not None:
            if not window:
                raise InvalidInputError("max_messages sizes the window; pass window=True too")
            positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES)
        self.window = window
        self.max_messages = max_messages
        self._access = StoreAccess(store)

    @property
    def store(self) -> Store:
        return self._access.store

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The full history, chronological (or the window, see ``window``)."""
        if self.window:
            return window_rows(self._access.window(self.session_id, self.max_messages))
        return from_rows(row.message for row in self._access.all_rows(self.session_id))

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages` as a coroutine."""
        if self.window:
            return window_rows(await self._access.awindow(self.session_id, self.max_messages))
        rows = await self._access.aall_rows(self.session_id)
        return from_rows(row.message for row in rows)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` in order, in one transaction."""
        batch = [to_canonical(message) for message in messages]
        if batch:
            self._access.append(self.session_id, batch, self.user_id)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages` as a coroutine."""
        batch = [to_canonical(message) for message in messages]
        if batch:
            await self._access.aappend(self.session_id, batch, self.user_id)

    def clear(self) -> None:
        """Hard-delete the session's rows in both tables and its cached window."""
        self._access.purge(self.session_id)

    async def aclear(self) -> None:
        """:meth:`clear` as a coroutine."""
        await self._access.apurge(self.session_id)


# -- LangChain -> canonical ------------------------------------------------------------------------
