"""The Redis window cache's decisions, shared by the sync and async shells (no I/O).

The shells (:class:`memstore.cache.redis_window.RedisWindowCache` and
:class:`memstore.cache.aio.AsyncRedisWindowCache`, whose operations are written once as
sans-I/O steps in :class:`memstore.cache.redis_shell.RedisShell`) only run what this module
plans:

* **what to send** — every operation is one Lua script over the app's keys
  (:func:`read_call`, :func:`append_call`, :func:`store_call`, :func:`invalidate_call`,
  :func:`purge_call`), so a Redis Cluster routes it by the app's one hash slot;
* **how to read the reply** — :func:`read_outcome`;
* **what a failure means** — :class:`CacheState`: failures are kept per *route* (the server an
  app's keys live on: one route for a single server or a Sentinel master, one per cluster
  master), so an outage of one shard rests only that shard's apps. A write that could not
  update Redis marks its app *dirty* (:meth:`CacheState.mark_dirty`, the one place that event
  happens); a dirty app's window is dropped on the next successful contact with its route
  before anything else is sent there;
* **when to retry** — a failed route rests ``retry_after_seconds`` and is then tried again,
  after the shell refreshes its view of the servers (a cluster's slot map) when the plan asks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from memstore.core import cache_keys as keys
from memstore.core.cache_entries import (
    CachedWindow,
    WindowMemo,
    WindowPolicy,
    decode_entries,
    encode_entry,
)
from memstore.core.crypto import PLAIN, RowCipher
from memstore.core.window import WindowEntry
from memstore.errors import MemstoreError
from memstore.metrics import Metrics

logger = logging.getLogger("memstore")

UNAVAILABLE = "\x00unavailable"
"""The version of a read that failed; a rebuild guarded by it is never stored."""

Script = Literal["read", "append", "store", "invalidate", "purge"]
DIRTYING: frozenset[Script] = frozenset({"append", "invalidate", "purge"})
"""Operations that follow a committed write: when they cannot reach Redis the app is dirty."""
MAX_REPLAY = 64
"""Dirty apps dropped before one call, at most (the rest follow on later calls)."""


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One script run: which script, over which keys, with which arguments."""

    script: Script
    app_id: str
    keys: list[str]
    args: list[Any]

    @property
    def dirties(self) -> bool:
        return self.script in DIRTYING


def new_stamp() -> str:
    """A fresh window stamp (random: two windows never share one)."""
    return os.urandom(9).hex()


def read_call(app_id: str, policy: WindowPolicy, known_stamp: str = "") -> ScriptCall:
    """The READ run; ``known_stamp``: the stamp of the window this process holds decoded."""
    return ScriptCall(
        "read", app_id, list(keys.app_keys(app_id)), [known_stamp, policy.ttl_seconds]
    )


def append_call(
    app_id: str,
    policy: WindowPolicy,
    entries: Sequence[WindowEntry],
    before: int | None = None,
    after: int | None = None,
    stamp: str = "",
) -> ScriptCall:
    """The APPEND run of a write that moved the app's SQL generation from ``before`` to
    ``after``; without them (a writer that does not know its step) the INVALIDATE run instead:
    a window that cannot be checked is dropped, never extended. ``stamp``: the window's new
    stamp (default: a fresh one)."""
    if before is None or after is None:
        return invalidate_call(app_id, policy)
    args: list[Any] = [
        policy.ttl_seconds,
        policy.max_messages,
        "1" if policy.start_at_user else "0",
        policy.max_tokens or 0,
        before,
        after,
        stamp or new_stamp(),
        *(encode_entry(entry, app_id, policy.cipher) for entry in entries),
    ]
    return ScriptCall("append", app_id, list(keys.app_keys(app_id)), args)


def store_call(
    app_id: str,
    policy: WindowPolicy,
    expected_version: str,
    entries: Sequence[WindowEntry],
    synthetic_call_ids: Sequence[str],
    generation: int | None = None,
    stamp: str = "",
) -> ScriptCall | None:
    """The STORE run, or ``None`` when there is nothing to store (or the read had failed).
    ``generation``: the app's SQL generation read *after* the window's rows (``None``: unknown,
    so every later append drops the window); ``stamp``: the window's stamp (default: fresh)."""
    if expected_version == UNAVAILABLE or not entries:
        return None
    args: list[Any] = [
        expected_version,
        policy.ttl_seconds,
        "" if generation is None else generation,
        stamp or new_stamp(),
        len(synthetic_call_ids),
        *synthetic_call_ids,
        *(encode_entry(entry, app_id, policy.cipher) for entry in entries),
    ]
    return ScriptCall("store", app_id, list(keys.app_keys(app_id)), args)


def invalidate_call(app_id: str, policy: WindowPolicy) -> ScriptCall:
    return ScriptCall("invalidate", app_id, list(keys.app_keys(app_id)), [policy.ttl_seconds])


def purge_call(app_id: str) -> ScriptCall:
    return ScriptCall("purge", app_id, list(keys.app_keys(app_id)), [])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_outcome(
    reply: Any, app_id: str = "", cipher: RowCipher = PLAIN, memo: WindowMemo | None = None
) -> CachedWindow:
    """A read's outcome from the READ reply ``[version]``, ``[version, stamp]`` or ``[version,
    stamp, entries]`` (bytes: memstore's clients never decode responses); ``cipher`` opens
    sealed entries of ``app_id``. ``memo`` (the one whose stamp :func:`read_call` sent)
    serves an unchanged window and learns every window decoded or missed.

    An entry that does not decode (written by another memstore version, or damaged, or sealed
    under a key not configured) makes the read a miss guarded by the real version: the
    rebuild replaces the whole window.
    """
    if reply is None:
        return CachedWindow(None, UNAVAILABLE)
    version = _text(reply[0])
    if len(reply) < 2:
        if memo is not None:
            memo.forget(app_id)
        return CachedWindow(None, version)
    stamp = _text(reply[1])
    if len(reply) == 2:
        held = None if memo is None else memo.get(app_id, stamp)
        # (READ answers so only for the stamp sent: a memo that lost it meanwhile, on
        # another thread, makes this read a miss guarded by the real version)
        return CachedWindow(held, version, stamp=stamp)
    try:
        messages = decode_entries(reply[2], app_id, cipher)
    except (ValidationError, MemstoreError, ValueError) as error:
        # the error's class only: a validation error quotes the entry, i.e. chat text
        logger.warning(
            "memstore: a cached window does not decode (%s); rebuilding it", type(error).__name__
        )
        if memo is not None:
            memo.forget(app_id)
        return CachedWindow(None, version)
    if memo is not None:
        memo.put(app_id, stamp, messages)
    return CachedWindow(messages, version, stamp=stamp)


def store_outcome(reply: Any) -> bool:
    return reply is not None and int(reply) == 1


def purge_outcome(reply: Any) -> int:
    return 0 if reply is None else int(reply)


CLUSTER_REPLIES = ("MOVED", "ASK", "CLUSTERDOWN", "CROSSSLOT", "TRYAGAIN")


def failure_hint(error: BaseException, *, cluster: bool) -> str:
    """Extra advice for the warning: a plain client that meets cluster redirections."""
    if not cluster and str(error).startswith(CLUSTER_REPLIES):
        return "; the server is a Redis Cluster node: use a redis+cluster:// URL"
    return ""


@dataclass(slots=True)
class _Route:
    resting_until: float = 0.0
    refresh: bool = False


@dataclass(frozen=True, slots=True)
class Go:
    """Run the call: first drop the windows of ``replay`` (dirty apps on this route, each with
    the serial of its newest mark: pass both to :meth:`CacheState.cleaned`), after refreshing
    the shell's view of the servers when ``refresh`` is set."""

    route: str
    replay: list[tuple[str, int]] = field(default_factory=list)
    refresh: bool = False


DirtyListener = Callable[[str], None]


class CacheState:
    """Failure bookkeeping of one Redis cache: per-route rest timers and dirty apps
    (thread-safe; times come from the shell, so the decisions are testable without a clock)."""

    def __init__(self, retry_after_seconds: float, metrics: Metrics | None = None) -> None:
        self._retry_after = retry_after_seconds
        self._metrics = metrics
        self._lock = threading.Lock()
        self._routes: dict[str, _Route] = {}
        # app -> serial of its newest mark (insertion-ordered). Serials only grow, so a drop
        # planned before a later mark never clears it; a count could come back to the value
        # the plan saw (cleared by another thread's drop, then marked as often again).
        self._dirty: dict[str, int] = {}
        self._serial = 0
        self._listeners: list[DirtyListener] = []

    def add_dirty_listener(self, listener: DirtyListener) -> None:
        """Call ``listener(app_id)`` for every skipped update of an app's window (see
        :meth:`mark_dirty`): synchronously, in the caller's thread or task, before the cache
        method returns (the stores stamp the app as stale in SQL from there)."""
        with self._lock:
            self._listeners.append(listener)

    def set_dirty_listener(self, listener: DirtyListener | None) -> None:
        """Replace every listener with ``listener`` (``None``: none)."""
        with self._lock:
            self._listeners = [] if listener is None else [listener]

    def mark_dirty(self, app_id: str) -> None:
        """The app's committed write did not reach its cached window: that window must not be
        served, and is dropped on the next successful contact with its route. Listeners hear
        every mark, not only the first of a dirty spell: each skipped update must be stamped,
        since another instance may have applied (and cleared) an earlier stamp meanwhile."""
        with self._lock:
            self._serial += 1
            self._dirty[app_id] = self._serial
            listeners = tuple(self._listeners)
        for listener in listeners:
            try:
                listener(app_id)
            except Exception:  # a listener's failure never reaches the caller
                logger.warning("memstore: a dirty-app listener failed", exc_info=True)

    def is_dirty(self, app_id: str) -> bool:
        with self._lock:
            return app_id in self._dirty

    def dirty_apps(self) -> list[str]:
        with self._lock:
            return list(self._dirty)

    def cleaned(self, app_id: str, mark: int) -> None:
        """The app's window was dropped after its mark ``mark`` (the serial :attr:`Go.replay`
        gave); a mark since then (a write that failed meanwhile, on another thread, even one
        after another thread's drop had cleared the app) keeps it dirty."""
        with self._lock:
            if self._dirty.get(app_id) == mark:
                del self._dirty[app_id]

    def begin(
        self, call: ScriptCall, route: str, now: float, route_of: Callable[[str], str]
    ) -> Go | None:
        """``None``: the route rests, skip Redis (a skipped write marks its app dirty, a
        skipped read is a fallback to SQL). Otherwise what to do before the call."""
        with self._lock:
            state = self._routes.get(route)
            resting = state is not None and now < state.resting_until
            refresh = state is not None and state.refresh and not resting
            dirty = list(self._dirty.items()) if not resting else []
        if resting:
            if call.dirties:
                self.mark_dirty(call.app_id)
            if call.script == "read":
                self._count("cache_fallbacks")
            return None
        own = [(app, mark) for app, mark in dirty if app == call.app_id]  # first, always
        others = [(app, m) for app, m in dirty if app != call.app_id and route_of(app) == route]
        return Go(route, (own + others)[:MAX_REPLAY], refresh)

    def succeeded(self, route: str) -> None:
        with self._lock:
            self._routes.pop(route, None)

    def refreshed(self, route: str) -> None:
        with self._lock:
            state = self._routes.get(route)
            if state is not None:
                state.refresh = False

    def failed(
        self, call: ScriptCall, route: str, error: BaseException, now: float, *, cluster: bool
    ) -> None:
        """Rest the route, mark a write's app dirty, count and log (never the message text:
        the error's class and Redis's reply only)."""
        with self._lock:
            state = self._routes.setdefault(route, _Route())
            state.resting_until = now + self._retry_after
            state.refresh = True
        if call.dirties:
            self.mark_dirty(call.app_id)
        self._count("cache_errors")
        if call.script == "read":
            self._count("cache_fallbacks")
        logger.warning(
            "memstore: Redis %s failed for app %r on %s (%s: %s%s); serving from SQL",
            call.script,
            call.app_id,
            route or "the server",
            type(error).__name__,
            error,
            failure_hint(error, cluster=cluster),
        )

    def _count(self, name: str) -> None:
        if self._metrics is not None:
            self._metrics.incr(name)
