"""``MemstoreMiddleware``: memstore as the memory of a LangChain 1.x ``create_agent`` agent.

Imported through :mod:`memstore.adapters.langchain` (``MemstoreMiddleware``, ``RunKeys``,
``thread_keys``); this module needs ``langchain >= 1.0`` and ``langgraph``.

How a run goes (``rewrite_state=True``, the default):

1. ``before_agent``: the messages of the state that are not stored yet (the run's input, and
   anything a crashed earlier run left in a checkpoint) are stored; then the state's messages
   are replaced by the app's edge-checked window, which ends with that input.
2. ``before_model``: tool results of the last step are stored, in the order of their calls.
3. ``after_model``: the model's AI message is stored.
4. ``after_agent``: whatever is left (``return_direct`` results, jumps to the end) is stored.

What has been stored is kept in the graph state (the private key ``memstore_stored``: the ids
of the state's messages that are stored, or are synthetic), never on the middleware, which
concurrent runs share. A write that committed but whose step crashed before the graph recorded
it is caught by the id check of :func:`~memstore.adapters._lc_pending.write_pending`.

That check reads the app's newest rows, and is needed only once per graph invocation (one
``invoke``/``stream`` call, a fresh run or a resume): a hook that wrote and then died ends the
invocation, so within one invocation every hook sees the writes of the hooks before it. The
first write of an invocation checks and sets the private key ``memstore_checked``, an
``UntrackedValue`` (never checkpointed, so every invocation starts without it); the later writes
of the invocation skip the read. Messages pending then were all produced by this invocation
after a check, so no earlier attempt can have stored them.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, cast

from memstore.extras import needs_extra

with needs_extra("memstore.adapters.langchain.MemstoreMiddleware", "langchain"):
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
    )
    from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.channels.untracked_value import UntrackedValue
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.runtime import Runtime
    from typing_extensions import NotRequired

from memstore.adapters._history import Store, StoreAccess, is_async_store
from memstore.adapters._lc_pending import awrite_pending, pending, window_messages, write_pending
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id, normalize_user_id
from memstore.core.plans import positive
from memstore.errors import ConfigurationError, InvalidAppIdError
from memstore.store import MemoryStore

STORED_KEY = "memstore_stored"
"""The private state key listing the ids of the state's messages that need no storing."""
CHECKED_KEY = "memstore_checked"
"""The private, never checkpointed state key set once a write of this graph invocation has
checked the app's newest rows for messages an earlier attempt stored."""

__all__ = [
    "CHECKED_KEY",
    "STORED_KEY",
    "MemstoreMiddleware",
    "MemstoreState",
    "RunKeys",
    "thread_keys",
]


class MemstoreState(AgentState[Any]):
    """The agent state plus the middleware's private bookkeeping."""

    memstore_stored: NotRequired[Annotated[list[str], PrivateStateAttr]]
    memstore_checked: NotRequired[Annotated[bool, UntrackedValue, PrivateStateAttr]]


@dataclass(frozen=True, slots=True)
class RunKeys:
    """Where a run's messages go: the app id, and the user id stored on each row."""

    app_id: str | int
    user_id: str | None = None


KeyFunction = Callable[[RunnableConfig, Any], RunKeys]
"""``(config, runtime context) -> RunKeys``: how the middleware finds a run's keys."""


def _user_id(config: RunnableConfig, context: Any) -> str | None:
    if isinstance(context, Mapping):
        found = context.get("user_id")
    else:
        found = getattr(context, "user_id", None)
    if found is None:
        found = config.get("configurable", {}).get("user_id")
    return None if found is None else str(found)


def thread_keys(config: RunnableConfig, context: Any) -> RunKeys:
    """The default keys: app id = ``configurable.thread_id``; user id = the context's
    ``user_id`` (a key or an attribute), else ``configurable.user_id``, else none.

    Raises :class:`~memstore.errors.InvalidAppIdError` when the run has no thread id.
    """
    thread_id = config.get("configurable", {}).get("thread_id")
    if thread_id is None:
        raise InvalidAppIdError(
            "MemstoreMiddleware stores a run under its thread id, and this run has none: pass "
            "config={'configurable': {'thread_id': ...}} to invoke/stream, or a keys= function"
        )
    return RunKeys(app_id=thread_id, user_id=_user_id(config, context))


def _wrong_store(given: str, serves: str, wanted: str, calls: str) -> ConfigurationError:
    def article(name: str) -> str:
        return f"an {name}" if name.startswith("A") else f"a {name}"

    return ConfigurationError(
        f"MemstoreMiddleware was given {article(given)}, which serves {serves}; "
        f"{calls} needs {article(wanted)} (pass MemstoreMiddleware({wanted}(...)))"
    )


class MemstoreMiddleware(AgentMiddleware[MemstoreState, Any]):
    """Memstore as the memory of a ``langchain.agents.create_agent`` agent.

    Args:
        store: a :class:`~memstore.MemoryStore` for ``invoke``/``stream``, or an
            :class:`~memstore.aio.AsyncMemoryStore` for ``ainvoke``/``astream`` (the other
            kind of call raises :class:`~memstore.errors.ConfigurationError`; so does an
            ``AsyncMemoryStore`` on Python 3.10, where LangGraph gives async middleware no
            config).
        max_messages: the window size, loaded straight from SQL (``store.load_window``);
            ``None`` (default) uses the store's cached window (``store.memory(app).messages()``,
            sized by the store's settings).
        rewrite_state: ``True`` (default): at the start of each run the state's messages become
            the window followed by the new input. ``False``: the state is left alone and only
            the model's input is the window (for apps whose checkpointer keeps the state).
        keys: ``(config, context) -> RunKeys``; default :func:`thread_keys`.

    Put it first in ``middleware=[...]``: its ``after_model`` then runs after the others'
    (``HumanInTheLoopMiddleware`` decisions are applied before the AI message is stored).
    """

    state_schema = MemstoreState

    def __init__(
        self,
        store: Store,
        *,
        max_messages: int | None = None,
        rewrite_state: bool = True,
        keys: KeyFunction | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(store, MemoryStore) and not is_async_store(store):
            raise ConfigurationError(
                f"store must be a MemoryStore or an AsyncMemoryStore, got {type(store).__name__}"
            )
        if is_async_store(store) and sys.version_info < (3, 11):
            raise ConfigurationError(
                "MemstoreMiddleware with an AsyncMemoryStore needs Python 3.11 or later: before "
                "3.11, LangGraph cannot give a middleware its run's config (the thread id) in "
                "async code (langgraph.config.get_config); use a MemoryStore and invoke/stream"
            )
        if max_messages is not None:
            positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES)
        self.store = store
        self.max_messages = max_messages
        self.rewrite_state = rewrite_state
        self.keys = keys or thread_keys
        self.tools = []
        self._access = StoreAccess(store)

    # -- keys and store kinds --------------------------------------------------------------------

    def _run_keys(self, runtime: Runtime[Any] | None) -> tuple[str, str | None]:
        found = self.keys(get_config(), None if runtime is None else runtime.context)
        app_id = normalize_app_id(found.app_id, what="thread_id")
        return app_id, normalize_user_id(found.user_id)

    def _sync_access(self) -> StoreAccess:
        if is_async_store(self.store):
            raise _wrong_store(
                "AsyncMemoryStore", "ainvoke/astream", "MemoryStore", "invoke/stream"
            )
        return self._access

    def _async_access(self) -> StoreAccess:
        if isinstance(self.store, MemoryStore):
            raise _wrong_store(
                "MemoryStore", "invoke/stream", "AsyncMemoryStore", "ainvoke/astream"
            )
        return self._access

    # -- state updates (pure) --------------------------------------------------------------------

    @staticmethod
    def _batch(state: MemstoreState) -> list[BaseMessage]:
        return pending(state["messages"], set(state.get("memstore_stored") or ()))

    @staticmethod
    def _recheck(state: MemstoreState) -> bool:
        """Whether a write must look for messages an earlier attempt stored (see the module
        docstring): yes, unless a write of this invocation already did."""
        return not state.get(CHECKED_KEY, False)

    @staticmethod
    def _all_stored(state: MemstoreState) -> dict[str, Any]:
        return {
            STORED_KEY: [m.id for m in state["messages"] if m.id is not None],
            CHECKED_KEY: True,
        }

    @staticmethod
    def _rewritten(window: list[BaseMessage]) -> dict[str, Any]:
        return {
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *window],
            STORED_KEY: [m.id for m in window],
            CHECKED_KEY: True,
        }

    # -- sync hooks ------------------------------------------------------------------------------

    def _store_pending(self, state: MemstoreState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        access = self._sync_access()
        batch = self._batch(state)
        if not batch:
            return None
        app_id, user_id = self._run_keys(runtime)
        write_pending(access, app_id, user_id, batch, recheck=self._recheck(state))
        return self._all_stored(state)

    def before_agent(self, state: MemstoreState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store the run's input, then make the window the state's messages."""
        access = self._sync_access()
        app_id, user_id = self._run_keys(runtime)
        write_pending(access, app_id, user_id, self._batch(state), recheck=self._recheck(state))
        if not self.rewrite_state:
            return self._all_stored(state)
        window = window_messages(access.window(app_id, self.max_messages))
        return self._rewritten(window)

    def before_model(self, state: MemstoreState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store the tool results of the last step before the model sees them."""
        return self._store_pending(state, runtime)

    def after_model(self, state: MemstoreState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store the model's AI message."""
        return self._store_pending(state, runtime)

    def after_agent(self, state: MemstoreState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store what ended the run (``return_direct`` results, messages before a jump)."""
        return self._store_pending(state, runtime)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage:
        """Window-only mode: send the window instead of the state's messages."""
        if self.rewrite_state:
            return handler(request)
        access = self._sync_access()
        app_id, _ = self._run_keys(request.runtime)
        window = window_messages(access.window(app_id, self.max_messages))
        return handler(request.override(messages=cast("list[AnyMessage]", window)))

    # -- async hooks -----------------------------------------------------------------------------

    async def _astore_pending(
        self, state: MemstoreState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        access = self._async_access()
        batch = self._batch(state)
        if not batch:
            return None
        app_id, user_id = self._run_keys(runtime)
        await awrite_pending(access, app_id, user_id, batch, recheck=self._recheck(state))
        return self._all_stored(state)

    async def abefore_agent(
        self, state: MemstoreState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """:meth:`before_agent` on an ``AsyncMemoryStore``."""
        access = self._async_access()
        app_id, user_id = self._run_keys(runtime)
        batch = self._batch(state)
        await awrite_pending(access, app_id, user_id, batch, recheck=self._recheck(state))
        if not self.rewrite_state:
            return self._all_stored(state)
        window = window_messages(await access.awindow(app_id, self.max_messages))
        return self._rewritten(window)

    async def abefore_model(
        self, state: MemstoreState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """:meth:`before_model` on an ``AsyncMemoryStore``."""
        return await self._astore_pending(state, runtime)

    async def aafter_model(
        self, state: MemstoreState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """:meth:`after_model` on an ``AsyncMemoryStore``."""
        return await self._astore_pending(state, runtime)

    async def aafter_agent(
        self, state: MemstoreState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """:meth:`after_agent` on an ``AsyncMemoryStore``."""
        return await self._astore_pending(state, runtime)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        """:meth:`wrap_model_call` on an ``AsyncMemoryStore``."""
        if self.rewrite_state:
            return await handler(request)
        access = self._async_access()
        app_id, _ = self._run_keys(request.runtime)
        window = window_messages(await access.awindow(app_id, self.max_messages))
        return await handler(request.override(messages=cast("list[AnyMessage]", window)))
