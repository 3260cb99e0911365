"""Which event loop an ``AsyncMemoryStore`` is used on natively, and its synchronous twin for
every other loop and for blocking calls (see :mod:`memstore.adapters._history`).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from typing import TYPE_CHECKING, TypeGuard

from memstore.cache.aio import AsyncInProcessWindowCache
from memstore.errors import ConfigurationError
from memstore.sql.engine import is_memory_sqlite, sync_url
from memstore.store import MemoryStore

if TYPE_CHECKING:
    from memstore.aio import AsyncMemoryStore

__all__ = ["claim_home_loop", "is_async_store", "sync_twin"]


def is_async_store(store: object) -> TypeGuard[AsyncMemoryStore]:
    """Whether ``store`` is an :class:`~memstore.aio.AsyncMemoryStore`, without importing
    :mod:`memstore.aio` (which needs the ``async`` extra): no instance can exist before it is
    imported."""
    aio = sys.modules.get("memstore.aio")
    return aio is not None and isinstance(store, aio.AsyncMemoryStore)


_REGISTRY_LOCK = threading.Lock()
_HOME_LOOPS: weakref.WeakKeyDictionary[
    AsyncMemoryStore, weakref.ReferenceType[asyncio.AbstractEventLoop]
] = weakref.WeakKeyDictionary()
_TWINS: weakref.WeakKeyDictionary[AsyncMemoryStore, MemoryStore] = weakref.WeakKeyDictionary()


def claim_home_loop(store: AsyncMemoryStore) -> None:
    """Make the running loop ``store``'s home loop unless it already has one (or none runs)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    with _REGISTRY_LOCK:
        _HOME_LOOPS.setdefault(store, weakref.ref(loop))


def on_home_loop(store: AsyncMemoryStore) -> bool:
    """True when the running loop is ``store``'s home loop (claimed here when it has none).

    A home loop that was closed or collected is never replaced: the store's pooled
    connections belong to it, so every later call goes through the twin.
    """
    loop = asyncio.get_running_loop()
    with _REGISTRY_LOCK:
        home = _HOME_LOOPS.get(store)
        if home is None:
            _HOME_LOOPS[store] = weakref.ref(loop)
            return True
        return home() is loop


def sync_twin(store: AsyncMemoryStore) -> MemoryStore:
    """The synchronous store on ``store``'s database and window cache (built once per store).
    It closes when ``store`` closes; a ``store`` collected without being closed abandons it
    (its connections closed from a daemon thread, its lease left to expire: no SQL on the
    collecting thread).

    Raises :class:`~memstore.errors.ConfigurationError` when no twin can share the data: an
    in-memory SQLite database (private to its connection), or a custom async cache that is
    neither in-process nor reachable through ``settings.redis_url``.
    """
    with _REGISTRY_LOCK:
        twin = _TWINS.get(store)
        if twin is not None:
            return twin
        url = store.engine.url
        if is_memory_sqlite(url):
            raise ConfigurationError(
                "this AsyncMemoryStore uses an in-memory SQLite database, which only its own "
                "event loop can reach; use a file database, or pass a MemoryStore"
            )
        settings = store.settings.model_copy(
            update={"database_url": sync_url(url).render_as_string(hide_password=False)}
        )
        if isinstance(store.cache, AsyncInProcessWindowCache):
            # The async in-process cache wraps a thread-safe sync one: share it, so both
            # stores see one window per app.
            twin = MemoryStore(settings, cache=store.cache._cache)
        elif store.settings.redis_url:
            twin = MemoryStore(settings)
        else:
            raise ConfigurationError(
                "this AsyncMemoryStore's window cache was passed in and settings.redis_url is "
                "unset, so a blocking or other-loop call could not keep that cache current; "
                "build the store from Settings(redis_url=...), or use it on one event loop"
            )
        twin._formatters = store._formatters  # one registry: display rows agree
        _TWINS[store] = twin
        store._on_close(twin.close)
        # a store nobody closes: no SQL from the collecting thread (maybe an event loop's); the
        # twin's lease expires by itself
        weakref.finalize(store, twin._abandon)
        return twin
