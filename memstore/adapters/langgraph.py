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

The saver has exactly the optional methods of the saver it wraps: ``MemstoreMirrorSaver(inner,
store)`` becomes an instance of a subclass made once per class of ``inner``, in which every
:class:`BaseCheckpointSaver` method that ``inner``'s class does not override is
:class:`BaseCheckpointSaver`'s own (so a capability check such as LangGraph's conformance kit,
which compares methods with the base class's, gives the wrapped saver's answer). When the inner
saver has them, ``copy_thread``, ``delete_for_runs`` and ``prune`` (and their ``a*`` twins) keep
the mirrored apps consistent with what the inner saver keeps:

* ``copy_thread``: the target thread's app is rebuilt (purged, then mirrored) from the copied
  thread's latest root checkpoint, so it holds the source's messages;
* ``delete_for_runs``: a thread whose root checkpoints the runs wrote is purged when none is
  left, and rebuilt from its remaining latest root checkpoint when the deleted ones held
  messages that checkpoint no longer has;
* ``prune``: a thread left without a root checkpoint has its app purged (``keep_latest`` keeps
  the latest state, hence the app).

A rebuilt app holds the messages of that one state: messages a ``RemoveMessage`` trimmed from
the state earlier are not in it any more. Apps are named by ``thread_app`` as for
``delete_thread``; the user id of a rebuilt app is taken from the checkpoint's metadata (where
LangGraph copies the ``configurable`` values).

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
import threading
from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import Any, NamedTuple

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
        CheckpointTuple,
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


_INNER_METHODS = (
    "put",
    "aput",
    "put_writes",
    "aput_writes",
    "get_tuple",
    "aget_tuple",
    "list",
    "alist",
    "delete_thread",
    "adelete_thread",
    "delete_for_runs",
    "adelete_for_runs",
    "copy_thread",
    "acopy_thread",
    "prune",
    "aprune",
    "get_delta_channel_history",
    "aget_delta_channel_history",
    "get_next_version",
)
"""The :class:`BaseCheckpointSaver` methods the mirror saver has only when the inner saver's
class overrides them."""

_CLASSES: dict[tuple[type, type], type] = {}
_CLASSES_LOCK = threading.Lock()


def _overrides(saver_type: type, name: str) -> bool:
    return getattr(saver_type, name, None) is not getattr(BaseCheckpointSaver, name, None)


def _specialized(cls: type[MemstoreMirrorSaver], inner_type: type) -> type[MemstoreMirrorSaver]:
    """``cls`` with :class:`BaseCheckpointSaver`'s own method for each of
    :data:`_INNER_METHODS` that ``inner_type`` does not override (and ``cls`` does not
    redefine either), made once per pair."""
    cls = cls.__dict__.get("_mirror_base", cls)
    with _CLASSES_LOCK:
        made = _CLASSES.get((cls, inner_type))
        if made is None:
            namespace: dict[str, Any] = {
                name: getattr(BaseCheckpointSaver, name)
                for name in _INNER_METHODS
                if hasattr(BaseCheckpointSaver, name)
                and not _overrides(inner_type, name)
                and getattr(cls, name) is MemstoreMirrorSaver.__dict__[name]
            }
            namespace.update(
                __module__=cls.__module__,
                __qualname__=cls.__qualname__,
                __doc__=cls.__doc__,
                _mirror_base=cls,
            )
            made = _CLASSES[(cls, inner_type)] = type(cls.__name__, (cls,), namespace)
    return made


class _Ops(NamedTuple):
    """The calls of one flavour (sync or async) the thread-maintenance steps make."""

    get_tuple: Callable[[RunnableConfig], Any]
    run_checkpoints: Callable[[str], Any]
    purge: Callable[[str], Any]
    mirror: Callable[..., Any]


def _root(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def _ids(messages: Sequence[BaseMessage] | None) -> set[str]:
    return {m.id for m in messages or () if m.id is not None}


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
        self.__class__ = _specialized(type(self), type(inner))
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
        return self._state_messages(checkpoint)

    def _state_messages(self, checkpoint: Checkpoint) -> list[BaseMessage] | None:
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
        app_id = self._app_of(thread_id)
        self._ledger.forget(app_id)
        return app_id

    def _app_of(self, thread_id: str) -> str:
        return normalize_app_id(self._thread_app(thread_id), what="thread_id")

    # -- keeping apps consistent with the inner saver's threads ----------------------------------

    def _sync_ops(self) -> _Ops:
        def run_checkpoints(run_id: str) -> list[CheckpointTuple]:
            return list(self.inner.list(None, filter={"run_id": run_id}))

        return _Ops(self.inner.get_tuple, run_checkpoints, self._access.purge, mirror)

    def _async_ops(self) -> _Ops:
        async def run_checkpoints(run_id: str) -> list[CheckpointTuple]:
            return [t async for t in self.inner.alist(None, filter={"run_id": run_id})]

        return _Ops(self.inner.aget_tuple, run_checkpoints, self._access.apurge, amirror)

    def _user_of(self, latest: CheckpointTuple, thread_id: str) -> str | None:
        """The user id ``keys`` gives for the checkpoint's metadata (LangGraph copies the
        scalar ``configurable`` values there); ``None`` when it gives none."""
        configurable: dict[str, Any] = {
            k: v for k, v in latest.metadata.items() if isinstance(v, str | int | float | bool)
        }
        configurable["thread_id"] = thread_id
        try:
            return normalize_user_id(self.keys({"configurable": configurable})[1])
        except Exception:  # the keys function needs more than the metadata holds
            return None

    def _rebuild_steps(
        self, ops: _Ops, thread_id: str, app_id: str, latest: CheckpointTuple | None
    ) -> Steps[None]:
        """Purge the app, then mirror the messages of ``latest`` (the thread's latest root
        checkpoint, if any) into it."""
        self._ledger.forget(app_id)
        yield partial(ops.purge, app_id)
        messages = None if latest is None else self._state_messages(latest.checkpoint)
        if messages and latest is not None:
            user_id = self._user_of(latest, thread_id)
            yield partial(ops.mirror, self._access, self._ledger, app_id, user_id, messages)

    def _copy_steps(
        self, ops: _Ops, copy: Callable[[str, str], Any], source: str, target: str
    ) -> Steps[None]:
        app_id = self._app_of(target)
        yield partial(copy, source, target)
        latest = yield partial(ops.get_tuple, _root(target))
        yield from self._rebuild_steps(ops, target, app_id, latest)

    def _runs_steps(
        self, ops: _Ops, delete: Callable[[Sequence[str]], Any], run_ids: Sequence[str]
    ) -> Steps[None]:
        dropped: dict[str, set[str]] = {}  # thread id -> ids in its deleted root checkpoints
        for run_id in run_ids:
            found: list[CheckpointTuple] = yield partial(ops.run_checkpoints, run_id)
            for item in found:
                configurable = item.config.get("configurable", {})
                if not configurable.get("checkpoint_ns", ""):
                    ids = _ids(self._state_messages(item.checkpoint))
                    dropped.setdefault(configurable["thread_id"], set()).update(ids)
        apps = {thread_id: self._app_of(thread_id) for thread_id in dropped}
        yield partial(delete, run_ids)
        for thread_id, ids in dropped.items():
            latest = yield partial(ops.get_tuple, _root(thread_id))
            kept = None if latest is None else _ids(self._state_messages(latest.checkpoint))
            if kept is None or ids - kept:
                yield from self._rebuild_steps(ops, thread_id, apps[thread_id], latest)

    def _prune_steps(
        self, ops: _Ops, prune: Callable[..., Any], thread_ids: Sequence[str], strategy: str
    ) -> Steps[None]:
        apps = {thread_id: self._app_of(thread_id) for thread_id in thread_ids}
        yield partial(prune, thread_ids, strategy=strategy)
        for thread_id, app_id in apps.items():
            latest = yield partial(ops.get_tuple, _root(thread_id))
            if latest is None:
                yield from self._rebuild_steps(ops, thread_id, app_id, None)

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

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """The inner saver's ``copy_thread``, then the target's app rebuilt from the target's
        latest root checkpoint (the source's messages)."""
        steps = self._copy_steps(
            self._sync_ops(), self.inner.copy_thread, source_thread_id, target_thread_id
        )
        drive(steps, call)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` as a coroutine."""
        steps = self._copy_steps(
            self._async_ops(), self.inner.acopy_thread, source_thread_id, target_thread_id
        )
        await adrive(steps, acall)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """The inner saver's ``delete_for_runs``; then each thread the runs wrote root
        checkpoints of has its app purged (none left) or rebuilt from its remaining latest
        root checkpoint (when the deleted ones held messages it no longer has)."""
        steps = self._runs_steps(self._sync_ops(), self.inner.delete_for_runs, run_ids)
        drive(steps, call)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` as a coroutine."""
        steps = self._runs_steps(self._async_ops(), self.inner.adelete_for_runs, run_ids)
        await adrive(steps, acall)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """The inner saver's ``prune``; then the app of each thread left without a root
        checkpoint is purged."""
        steps = self._prune_steps(self._sync_ops(), self.inner.prune, thread_ids, strategy)
        drive(steps, call)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` as a coroutine."""
        steps = self._prune_steps(self._async_ops(), self.inner.aprune, thread_ids, strategy)
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
