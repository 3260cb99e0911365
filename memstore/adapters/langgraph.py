"""A LangGraph checkpointer that mirrors a graph's ``messages`` into memstore.

``pip install 'memstore[langchain]'``. For custom ``StateGraph`` apps that keep their own
checkpointer::

    saver = MemstoreMirrorSaver(InMemorySaver(), store)        # or PostgresSaver(...)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "app-42"}})

Every method (sync and async) is the inner saver's; checkpoints are never served from
memstore. After the inner saver stored a root checkpoint (``checkpoint_ns == ""``) whose
``messages`` channel changed, the messages memstore has not seen are stored under the
thread id (the app id), in state order, with each step's tool results in the order of their
AI message's calls (see :func:`~memstore.adapters._lc_pending.pending`). The thread's
``configurable.user_id``, when set, is stored on the rows. ``delete_thread`` also purges the
app in memstore (both histories and its cached window).

Which messages are stored is decided from the app's rows, which carry each message's
LangChain id (see :mod:`memstore.adapters._lc_ledger`): the first time a process mirrors a
thread it reads the ids of the app's whole history once, and every write then checks, in its
own transaction, the rows other writers committed since. So a restarted process, or another
replica of the same graph, never stores a message twice, even one a trimmed state kept from
far back (``RemoveMessage`` keeping the first message). A ``messages`` channel whose
checkpoint value is not a list of messages (a LangGraph ``DeltaChannel``) is not mirrored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

from memstore.errors import InvalidInputError
from memstore.extras import needs_extra

with needs_extra(__name__, "langchain"):
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
    )

from memstore.adapters._history import Store, StoreAccess
from memstore.adapters._lc_ledger import MIRROR_APPS, MirrorLedger, amirror, mirror
from memstore.core.inputs import normalize_app_id, normalize_user_id
from memstore.core.steps import adrive, drive
from memstore.store_reads import Steps
from memstore.store_writes import acall, call

MESSAGES_CHANNEL = "messages"

__all__ = ["MemstoreMirrorSaver"]

ThreadKeys = Callable[[RunnableConfig], tuple[str | int, str | None]]
"""``config -> (app id, user id)`` for a checkpoint's config."""


def _forwarded(name: str) -> Any:
    """A method that hands the call to the inner saver's method ``name`` (a coroutine
    function for an ``a*`` name, an async generator for ``alist``), with the signature and
    docstring of :class:`BaseCheckpointSaver`'s (when this LangGraph release has one)."""
    if name == "alist":

        async def forward_items(self: MemstoreMirrorSaver, *args: Any, **kwargs: Any) -> Any:
            async for item in self.inner.alist(*args, **kwargs):
                yield item

        forward: Callable[..., Any] = forward_items
    elif name.startswith("a"):

        async def forward_awaited(self: MemstoreMirrorSaver, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self.inner, name)(*args, **kwargs)

        forward = forward_awaited
    else:

        def forward_call(self: MemstoreMirrorSaver, *args: Any, **kwargs: Any) -> Any:
            return getattr(self.inner, name)(*args, **kwargs)

        forward = forward_call
    base = getattr(BaseCheckpointSaver, name, None)
    if base is not None:
        forward = functools.wraps(base)(forward)
    forward.__name__ = name
    forward.__qualname__ = f"MemstoreMirrorSaver.{name}"
    return forward


def config_keys(config: RunnableConfig) -> tuple[str | int, str | None]:
    """The default keys: ``configurable.thread_id`` and ``configurable.user_id``."""
    configurable = config.get("configurable", {})
    user_id = configurable.get("user_id")
    return configurable["thread_id"], None if user_id is None else str(user_id)


class MemstoreMirrorSaver(BaseCheckpointSaver[Any]):
    """Any LangGraph checkpointer, with the ``messages`` channel mirrored into memstore.

    Args:
        inner: the saver that keeps and serves the checkpoints (``InMemorySaver``,
            ``PostgresSaver``, ``SqliteSaver``...).
        store: a :class:`~memstore.MemoryStore` or :class:`~memstore.aio.AsyncMemoryStore`;
            sync methods write through the sync path, ``a*`` methods through the async one
            (see :class:`~memstore.adapters._history.StoreAccess`).
        keys: ``config -> (app id, user id)``; default: the thread id and
            ``configurable.user_id``.
        channel: the state key holding the messages (default ``"messages"``).
        thread_app: ``thread id -> app id``, for :meth:`delete_thread` (which gets only the
            thread id); default: ``keys`` applied to a config holding only that thread id.
            Pass it when ``keys`` needs more of the config (a tenant, say):
            :meth:`delete_thread` then raises :class:`~memstore.errors.InvalidInputError`
            rather than purge an app it cannot name.
        max_apps: threads whose stored message ids the saver keeps in memory (least recently
            mirrored ones beyond it are read again from their rows when next mirrored).
    """

    def __init__(
        self,
        inner: BaseCheckpointSaver[Any],
        store: Store,
        *,
        keys: ThreadKeys | None = None,
        channel: str = MESSAGES_CHANNEL,
        thread_app: Callable[[str], str | int] | None = None,
        max_apps: int = MIRROR_APPS,
    ) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.keys = keys or config_keys
        self.channel = channel
        self.thread_app = thread_app
        self._access = StoreAccess(store)
        self._ledger = MirrorLedger(max_apps)

    @property
    def store(self) -> Store:
        return self._access.store

    @property
    def config_specs(self) -> list[Any]:
        return list(self.inner.config_specs)

    # -- mirroring -------------------------------------------------------------------------------

    def _messages(
        self, config: RunnableConfig, checkpoint: Checkpoint, new_versions: ChannelVersions
    ) -> list[BaseMessage] | None:
        if config.get("configurable", {}).get("checkpoint_ns", ""):
            return None  # a subgraph's checkpoint: its messages are not the thread's
        if self.channel not in new_versions:
            return None
        value = checkpoint["channel_values"].get(self.channel)
        if not isinstance(value, list) or not all(isinstance(m, BaseMessage) for m in value):
            return None
        return value

    def _app(self, config: RunnableConfig) -> tuple[str, str | None]:
        app_id, user_id = self.keys(config)
        return normalize_app_id(app_id, what="thread_id"), normalize_user_id(user_id)

    def _put_steps(
        self,
        put: Callable[..., Any],
        mirror_messages: Callable[..., Any],
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Steps[RunnableConfig]:
        """The inner saver's ``put`` (or ``aput``), then the new messages into memstore
        (``mirror_messages``: :func:`mirror` or :func:`amirror`)."""
        saved: RunnableConfig = yield partial(put, config, checkpoint, metadata, new_versions)
        messages = self._messages(config, checkpoint, new_versions)
        if messages is not None:
            app_id, user_id = self._app(config)
            yield partial(mirror_messages, self._access, self._ledger, app_id, user_id, messages)
        return saved

    def _delete_steps(
        self, delete: Callable[[str], Any], purge: Callable[[str], Any], thread_id: str
    ) -> Steps[None]:
        """Delete the thread in the inner saver, then purge its app (see :meth:`_forget`)."""
        app_id = self._forget(thread_id)
        yield partial(delete, thread_id)
        yield partial(purge, app_id)

    def _forget(self, thread_id: str) -> str:
        """The app of ``thread_id`` (see ``thread_app``), forgotten by the mirror."""
        app_id = normalize_app_id(self._thread_app(thread_id), what="thread_id")
        self._ledger.forget(app_id)
        return app_id

    def _thread_app(self, thread_id: str) -> str | int:
        if self.thread_app is not None:
            return self.thread_app(thread_id)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        try:
            return self.keys(config)[0]
        except Exception as error:  # the keys function needs more than the thread id
            raise InvalidInputError(
                f"the keys function cannot name the app of thread {thread_id!r} from its id "
                f"alone ({type(error).__name__}); pass thread_app= to MemstoreMirrorSaver"
            ) from None

    # -- the inner saver's methods, sync and async ----------------------------------------------

    get_tuple = _forwarded("get_tuple")
    aget_tuple = _forwarded("aget_tuple")
    list = _forwarded("list")
    alist = _forwarded("alist")
    put_writes = _forwarded("put_writes")
    aput_writes = _forwarded("aput_writes")
    delete_for_runs = _forwarded("delete_for_runs")
    adelete_for_runs = _forwarded("adelete_for_runs")
    copy_thread = _forwarded("copy_thread")
    acopy_thread = _forwarded("acopy_thread")
    prune = _forwarded("prune")
    aprune = _forwarded("aprune")
    get_delta_channel_history = _forwarded("get_delta_channel_history")
    aget_delta_channel_history = _forwarded("aget_delta_channel_history")
    get_next_version = _forwarded("get_next_version")

    # -- mirrored --------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """The inner saver's ``put``, then the new messages into memstore."""
        steps = self._put_steps(self.inner.put, mirror, config, checkpoint, metadata, new_versions)
        return drive(steps, call)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """The inner saver's ``aput``, then the new messages into memstore."""
        steps = self._put_steps(
            self.inner.aput, amirror, config, checkpoint, metadata, new_versions
        )
        return await adrive(steps, acall)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints (inner saver) and purge its app in memstore (named
        by ``thread_app``; when it cannot be named, nothing is deleted)."""
        drive(self._delete_steps(self.inner.delete_thread, self._access.purge, thread_id), call)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` as a coroutine."""
        steps = self._delete_steps(self.inner.adelete_thread, self._access.apurge, thread_id)
        await adrive(steps, acall)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> MemstoreMirrorSaver:
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = MemstoreMirrorSaver(
            inner, self.store, keys=self.keys, channel=self.channel, thread_app=self.thread_app
        )
        clone._ledger = self._ledger  # one memory of what is stored
        return clone
