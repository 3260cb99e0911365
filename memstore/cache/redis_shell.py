"""What the sync and async Redis window caches share: every operation, decided once.

:class:`RedisShell` writes each operation of a Redis window cache (and the failure handling
around each script run: rest timers, dirty apps, a cluster's refreshed slot map) once, as a
sans-I/O step generator over :mod:`memstore.core.cache_plan`. A step is a
:class:`~memstore.core.cache_plan.ScriptCall` to run or :attr:`Action.REFRESH`.
:class:`~memstore.cache.redis_window.RedisWindowCache` drives the steps with
:func:`memstore.core.steps.drive` and :class:`~memstore.cache.aio.AsyncRedisWindowCache` with
:func:`~memstore.core.steps.adrive`; each shell adds only its client and its ``_do``.

The clients of both come from :func:`build_client` (one server, a Redis Cluster or a
Sentinel-managed master, see :mod:`memstore.core.redis_url`), given the redis-py package of
its flavour (``redis`` or ``redis.asyncio``).
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Callable, Coroutine, Generator, Sequence
from types import ModuleType
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from memstore.cache import keys, scripts
from memstore.cache.base import CachedWindow, WindowMemo, WindowPolicy
from memstore.core import cache_plan
from memstore.core.cache_plan import CacheState, ScriptCall
from memstore.core.redis_url import RedisTarget, parse_redis_url
from memstore.core.steps import adrive, drive
from memstore.core.window import WindowEntry
from memstore.errors import ConfigurationError
from memstore.metrics import Metrics

CACHE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, OSError)
"""What the Redis clients raise (the caches treat any exception of their client as one)."""
SCRIPTS: dict[cache_plan.Script, str] = {
    "read": scripts.READ,
    "append": scripts.APPEND,
    "store": scripts.STORE,
    "invalidate": scripts.INVALIDATE,
    "purge": scripts.PURGE,
}


class Action(enum.Enum):
    """A step that is not a script run."""

    REFRESH = "refresh"
    """Refresh the client's view of the servers (a cluster's slot map; nothing elsewhere)."""


Step = ScriptCall | Action
R = TypeVar("R")
P = ParamSpec("P")
Steps = Generator[Step, Any, R]
ShellT = TypeVar("ShellT", bound="RedisShell")
F = TypeVar("F", bound=Callable[..., Any])


def client_options(timeout_seconds: float) -> dict[str, Any]:
    """Fail fast: short timeouts, no retries (the cache is optional)."""
    return {
        "socket_timeout": timeout_seconds,
        "socket_connect_timeout": timeout_seconds,
        "retry": Retry(NoBackoff(), 0),
    }


def _credentials(target: RedisTarget) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if target.username:
        found["username"] = target.username
    if target.password is not None:
        found["password"] = target.password
    return found


def build_client(
    target: RedisTarget, options: dict[str, Any], flavour: ModuleType
) -> tuple[Any, list[Any]]:
    """A client for ``target`` from the redis-py package ``flavour`` (``redis`` or
    ``redis.asyncio``: both name their classes alike), and the helper clients to close with it
    (a Sentinel's connections to the sentinels). A synchronous cluster client contacts the
    nodes here (call it inside a cache-error guard); the others connect on first use."""
    if target.kind == "cluster":
        cluster = flavour.cluster.RedisCluster(
            startup_nodes=[flavour.cluster.ClusterNode(host, port) for host, port in target.nodes],
            ssl=target.tls,
            require_full_coverage=False,
            **_credentials(target),
            **options,
        )
        return cluster, []
    if target.kind == "sentinel":
        assert target.master_name is not None
        connection: dict[str, Any] = {**_credentials(target), **options}
        if target.tls:
            connection["ssl"] = True
        sentinel = flavour.sentinel.Sentinel(
            list(target.nodes),
            sentinel_kwargs={**options, "ssl": target.tls} if target.tls else dict(options),
            **connection,
        )
        return sentinel.master_for(target.master_name, db=target.db), list(sentinel.sentinels)
    return flavour.Redis.from_url(target.url, **options), []


def refuse_cluster_node(target: RedisTarget, timeout_seconds: float) -> None:
    """Raise :class:`ConfigurationError` when a plain URL reaches a Redis Cluster node (every
    call would meet ``MOVED``). An unreachable server passes: the cache is optional."""
    if target.kind != "plain":
        return
    try:
        with redis.Redis.from_url(target.url, **client_options(timeout_seconds)) as probe:
            info = probe.info("cluster")
    except CACHE_ERRORS:
        return
    if isinstance(info, dict) and str(info.get("cluster_enabled", 0)) == "1":
        raise ConfigurationError(
            "MEMSTORE_REDIS_URL names a Redis Cluster node with a plain redis:// URL; use "
            "redis+cluster://host:port[,host:port...] (rediss+cluster:// with TLS)"
        )


def _named(method: F, steps: Callable[..., Any], name: str | None) -> F:
    """``method`` with the docs and signature of ``steps``, under ``name`` (default: that of
    ``steps`` without ``_`` and ``_steps``: ``_read_steps`` gives ``read``)."""
    functools.update_wrapper(method, steps)
    name = name or steps.__name__.removeprefix("_").removesuffix("_steps")
    method.__name__ = name
    method.__qualname__ = steps.__qualname__.replace(steps.__name__, name)
    return method


def driven(
    steps: Callable[Concatenate[ShellT, P], Steps[R]], name: str | None = None
) -> Callable[Concatenate[ShellT, P], R]:
    """The method that drives ``steps`` synchronously, through the shell's ``_do``."""

    def method(self: ShellT, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return drive(steps(self, *args, **kwargs), self._do)

    return _named(method, steps, name)


def adriven(
    steps: Callable[Concatenate[ShellT, P], Steps[R]], name: str | None = None
) -> Callable[Concatenate[ShellT, P], Coroutine[Any, Any, R]]:
    """The coroutine method that drives ``steps``, awaiting the shell's ``_do``."""

    async def method(self: ShellT, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await adrive(steps(self, *args, **kwargs), self._do)

    return _named(method, steps, name)


class RedisShell:
    """Windows in Redis, one list per app, changed only through the Lua scripts: the part of
    both Redis caches that is not I/O. A subclass sets ``_client`` and ``_cluster_class``,
    implements ``_do(step)`` and :meth:`_reaching`, and exposes the ``_*_steps`` methods
    through :func:`driven` or :func:`adriven`."""

    guards_generations = True
    """Stores pass each write's generation step to :meth:`append` and the generation a
    rebuild read after its rows to :meth:`store` (see :mod:`memstore.cache.scripts`)."""

    _cluster_class: ClassVar[type[Any]]
    _client: Any

    def __init__(
        self,
        policy: WindowPolicy,
        *,
        owns_client: bool,
        retry_after_seconds: float,
        metrics: Metrics | None,
        also_close: Sequence[Any],
    ) -> None:
        self._policy = policy
        self._owns_client = owns_client
        self._also_close = list(also_close)
        self.state = CacheState(retry_after_seconds, metrics)
        """Rest timers and dirty apps (``state.add_dirty_listener`` hooks the dirty event)."""
        self.memo = WindowMemo()
        """The windows this process decoded last (a read of an unchanged window serves them)."""

    @classmethod
    def from_url(
        cls: type[ShellT],
        url: str,
        policy: WindowPolicy,
        timeout_seconds: float,
        *,
        metrics: Metrics | None = None,
    ) -> ShellT:
        """Connect to ``url`` (any form of :mod:`memstore.core.redis_url`); the cache closes
        the client it made. A plain URL that reaches a cluster node raises
        :class:`ConfigurationError` (checked with a short blocking probe)."""
        try:
            target = parse_redis_url(url)
        except ValueError as error:
            raise ConfigurationError(f"invalid redis_url: {error}") from error
        refuse_cluster_node(target, timeout_seconds)
        return cls(policy=policy, metrics=metrics, **cls._reaching(target, timeout_seconds))

    @classmethod
    def _reaching(cls, target: RedisTarget, timeout_seconds: float) -> dict[str, Any]:
        """The constructor's arguments that give the cache a client of its own for
        ``target`` (``client``, ``owns_client``, ...), for :meth:`from_url`."""
        raise NotImplementedError

    def _do(self, step: Step) -> Any:
        """Do one step (a subclass's I/O; the async shell returns an awaitable)."""
        raise NotImplementedError

    @property
    def is_cluster(self) -> bool:
        return isinstance(self._client, self._cluster_class)

    def _route_of(self, app_id: str) -> str:
        client = self._client
        if not isinstance(client, self._cluster_class):
            return ""
        try:
            node = client.get_node_from_key(keys.window_key(app_id))
        except Exception:  # no slot map yet
            return "?"
        return "?" if node is None else str(node.name)

    def _owned(self) -> list[Any]:
        """The clients :meth:`close` closes (none unless the cache owns its client)."""
        if not self._owns_client:
            return []
        return [*([] if self._client is None else [self._client]), *self._also_close]

    def set_skip_listener(self, listener: Callable[[str], None] | None) -> None:
        """Call ``listener(app_id)`` whenever an update of the app's window (append,
        invalidate, purge) is skipped because Redis failed or its route rests (the stores
        stamp the app stale in SQL: see ``stale_window_max_seconds``)."""
        self.state.set_dirty_listener(listener)

    def _call_steps(self, call: ScriptCall) -> Steps[Any]:
        """Run ``call`` on its route: its reply, or ``None`` when the route rests or the run
        failed (the failure rests the route and dirties a write's app: see
        :class:`~memstore.core.cache_plan.CacheState`). Dirty apps of the route are dropped
        first, after a refresh of the servers' view when a failure asked for one."""
        route = self._route_of(call.app_id)
        go = self.state.begin(call, route, time.monotonic(), self._route_of)
        if go is None:
            return None
        try:
            if go.refresh:
                yield Action.REFRESH
                self.state.refreshed(route)
            for stale, mark in go.replay:
                yield cache_plan.invalidate_call(stale, self._policy)
                self.state.cleaned(stale, mark)
            reply = yield call
        except Exception as error:
            # (CACHE_ERRORS and whatever else the client raises: the write is durable in SQL)
            self.state.failed(call, route, error, time.monotonic(), cluster=self.is_cluster)
            return None
        self.state.succeeded(route)
        return reply

    def _read_steps(self, app_id: str) -> Steps[CachedWindow]:
        """The cached window, or a miss; the version is taken in the same step."""
        memo = self.memo
        call = cache_plan.read_call(app_id, self._policy, memo.stamp(app_id))
        reply = yield from self._call_steps(call)
        return cache_plan.read_outcome(reply, app_id, self._policy.cipher, memo)

    def _store_steps(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        synthetic_call_ids: Sequence[str],
        expected_version: str,
        generation: int | None = None,
    ) -> Steps[bool]:
        """Replace the window unless a write happened since ``expected_version`` was read;
        ``generation``: the app's SQL generation read after the window's rows."""
        call = cache_plan.store_call(
            app_id, self._policy, expected_version, entries, synthetic_call_ids, generation
        )
        if call is None:
            return False
        return cache_plan.store_outcome((yield from self._call_steps(call)))

    def _append_steps(
        self,
        app_id: str,
        entries: Sequence[WindowEntry],
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> Steps[None]:
        """Append when the window is at generation ``before`` (then it is at ``after``); drop
        it otherwise, and when the step is not given."""
        yield from self._call_steps(
            cache_plan.append_call(app_id, self._policy, entries, before, after)
        )

    def _invalidate_steps(self, app_id: str) -> Steps[None]:
        """Drop the window so the next read rebuilds it."""
        self.memo.forget(app_id)
        yield from self._call_steps(cache_plan.invalidate_call(app_id, self._policy))

    def _purge_steps(self, app_id: str) -> Steps[int]:
        """Delete every key of the app; return how many existed."""
        self.memo.forget(app_id)
        return cache_plan.purge_outcome(
            (yield from self._call_steps(cache_plan.purge_call(app_id)))
        )
