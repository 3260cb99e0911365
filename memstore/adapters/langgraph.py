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

from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from memstore.errors import InvalidInputError
from memstore.extras import missing_extra

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
    )
except ImportError as error:
    raise missing_extra(__name__, "langchain", error) from error

from memstore.adapters._history import Store, StoreAccess
from memstore.adapters._lc_ledger import MIRROR_APPS, MirrorLedger, amirror, mirror
from memstore.core.inputs import normalize_app_id, normalize_user_id

MESSAGES_CHANNEL = "messages"

__all__ = ["MemstoreMirrorSaver"]

ThreadKeys = Callable[[RunnableConfig], tuple[str | int, str | None]]
"""``config -> (app id, user id)`` for a checkpoint's config."""


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

    def _mirror(
        self, config: RunnableConfig, checkpoint: Checkpoint, new_versions: ChannelVersions
    ) -> None:
        messages = self._messages(config, checkpoint, new_versions)
        if messages is None:
            return
        app_id, user_id = self._app(config)
        mirror(self._access, self._ledger, app_id, user_id, messages)

    async def _amirror(
        self, config: RunnableConfig, checkpoint: Checkpoint, new_versions: ChannelVersions
    ) -> None:
        messages = self._messages(config, checkpoint, new_versions)
        if messages is None:
            return
        app_id, user_id = self._app(config)
        await amirror(self._access, self._ledger, app_id, user_id, messages)

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

    # -- sync ------------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """The inner saver's ``put``, then the new messages into memstore."""
        saved = self.inner.put(config, checkpoint, metadata, new_versions)
        self._mirror(config, checkpoint, new_versions)
        return saved

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints (inner saver) and purge its app in memstore (named
        by ``thread_app``; when it cannot be named, nothing is deleted)."""
        app_id = self._forget(thread_id)
        self.inner.delete_thread(thread_id)
        self._access.purge(app_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.inner.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.inner.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.inner.prune(thread_ids, strategy=strategy)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> MemstoreMirrorSaver:
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = MemstoreMirrorSaver(
            inner, self.store, keys=self.keys, channel=self.channel, thread_app=self.thread_app
        )
        clone._ledger = self._ledger  # one memory of what is stored
        return clone

    # -- async -----------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """The inner saver's ``aput``, then the new messages into memstore."""
        saved = await self.inner.aput(config, checkpoint, metadata, new_versions)
        await self._amirror(config, checkpoint, new_versions)
        return saved

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` as a coroutine."""
        app_id = self._forget(thread_id)
        await self.inner.adelete_thread(thread_id)
        await self._access.apurge(app_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.inner.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.inner.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.inner.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)
