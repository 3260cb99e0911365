"""What :class:`~memstore.MemoryStore` and :class:`~memstore.aio.AsyncMemoryStore` share apart
from their I/O: settings, the id generator, tool formatters, laying out a write and the
policy for snowflake id collisions."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy.engine import make_url

from memstore.config import Settings
from memstore.core.display import DisplayDraft, ToolFormatter
from memstore.core.inputs import MAX_WINDOW_MESSAGES
from memstore.core.leases import HeldLease, id_floor
from memstore.core.plans import ID_COLLISION_RETRIES, WritePlan, plan_write, positive
from memstore.core.staleness import PollSchedule
from memstore.core.tokens import (
    MAX_TOKENS_LIMIT,
    Oversize,
    TokenCounter,
    approximate_tokens,
    checked_counter,
    fit_oversize,
    oversize_policy,
)
from memstore.core.window import Window, WindowEntry, entry_for, token_window
from memstore.errors import IdCollisionError, StorageError, WorkerLeaseLostError
from memstore.ids import SnowflakeGenerator, _wall_clock_ms, shared_generator
from memstore.messages import Message
from memstore.metrics import Metrics

logger = logging.getLogger("memstore")

StoreT = TypeVar("StoreT", bound="StoreBase")

DEFAULT_WINDOW_MESSAGES = 50
"""``load_window``'s message bound when neither ``max_messages`` nor ``max_tokens`` is given."""

_SKIPPED: ContextVar[list[str] | None] = ContextVar("memstore_skipped_windows", default=None)
"""The apps whose window update was skipped during the current :func:`collecting_skips`
(per thread and per asyncio task: the cache calls the listener in the caller's context)."""


def note_skipped(app_id: str) -> None:
    """The caches' skip listener: remember ``app_id`` for the enclosing collector, if any."""
    skipped = _SKIPPED.get()
    if skipped is not None:
        skipped.append(app_id)


@contextlib.contextmanager
def collecting_skips() -> Iterator[list[str]]:
    """Collect the apps whose window update was skipped by the cache calls made inside."""
    skipped: list[str] = []
    token = _SKIPPED.set(skipped)
    try:
        yield skipped
    finally:
        _SKIPPED.reset(token)


class StoreBase:
    """The I/O-free half of a store."""

    def __init__(
        self,
        settings: Settings | None,
        id_generator: SnowflakeGenerator | None = None,
        id_clock: Callable[[], int] | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.token_counter: TokenCounter = token_counter or approximate_tokens
        """Counts a message's tokens for token budgets (default: :func:`approximate_tokens`)."""
        self._count = checked_counter(self.token_counter)
        fixed = self.settings.worker_id
        self._leasing = id_generator is None and not isinstance(fixed, int)
        """True when the worker id is leased (``worker_id="auto"``) rather than fixed."""
        self._id_clock = id_clock or _wall_clock_ms
        self._ids: SnowflakeGenerator | None = None
        if id_generator is not None:
            self._ids = id_generator
        elif isinstance(fixed, int):
            self._ids = shared_generator(fixed, self.settings.clock_backwards_max_wait_ms)
        self._fixed_worker_id = None if self._ids is None else self._ids.worker_id
        self._lease: HeldLease | None = None
        self._lease_pid = 0
        """The process that claimed ``_lease``: a forked child must not use its parent's."""
        self._lease_lock = threading.Lock()
        self._formatters: dict[str, ToolFormatter] = {}
        self._closed = False
        self._metrics = Metrics()
        self._stale_polls = PollSchedule(self.settings.stale_window_max_seconds)
        self._stale_tracking = False
        """True when the cache reports skipped updates and the bound is on: writers stamp
        apps whose window missed a change, readers drop stamped windows before serving."""

    def _track_skips(self, cache: object) -> None:
        """Have ``cache`` report skipped window updates (Redis caches do; an in-process cache
        checks the app's generation on every read instead)."""
        setter = getattr(cache, "set_skip_listener", None)
        if self._stale_polls.enabled and setter is not None:
            setter(note_skipped)
            self._stale_tracking = True

    def _stale_check_due(self) -> bool:
        """True when a window read must first look for stale-window stamps."""
        return self._stale_tracking and self._stale_polls.due(time.monotonic())

    @staticmethod
    def _stamp_failed(apps: Sequence[str], error: StorageError) -> None:
        logger.warning(
            "memstore: stamping %d stale window(s) in SQL failed (%s); other instances may "
            "serve them until their TTL",
            len(apps),
            error.kind,
        )

    @staticmethod
    def _stale_poll_failed(what: str, error: StorageError) -> None:
        logger.warning(
            "memstore: %s stale-window stamps failed (%s); serving cached windows unchecked "
            "until the next poll",
            what,
            error.kind,
        )

    def metrics(self) -> dict[str, int]:
        """A plain snapshot of this store's counters (see :data:`memstore.metrics.COUNTERS`)."""
        return self._metrics.snapshot()

    @property
    def worker_id(self) -> int | None:
        """The snowflake worker id this store issues ids with: the fixed one, or the one it
        leased (``None`` while a leasing store holds none yet: it leases on its first write,
        or after ``migrate()``)."""
        if not self._leasing:
            return self._fixed_worker_id
        lease = self._lease
        return None if lease is None else lease.worker_id

    def _take_lease(self, worker_id: int, epoch: int, last_ms: int, sent_at: float) -> None:
        """Start issuing ids on a lease just claimed (call with ``_lease_lock`` held)."""
        self._ids = SnowflakeGenerator(
            worker_id,
            max_backwards_wait_ms=self.settings.clock_backwards_max_wait_ms,
            clock=self._id_clock,
            start_after=id_floor(worker_id, last_ms),
        )
        self._lease = HeldLease(worker_id, epoch, sent_at, self.settings.worker_lease_seconds)
        self._lease_pid = os.getpid()

    def _own_lease(self) -> HeldLease | None:
        """The lease this process claimed; a lease inherited across ``fork`` is forgotten (the
        parent still holds it and renews it)."""
        lease = self._lease
        if lease is not None and self._lease_pid != os.getpid():
            self._lease = lease = None
        return lease

    def _usable_generator(self) -> SnowflakeGenerator | None:
        """The generator when ids may be issued right now without touching the database."""
        if not self._leasing:
            return self._ids
        lease = self._own_lease()
        if lease is not None and lease.usable(time.monotonic()):
            return self._ids
        return None

    def _last_issued_ms(self) -> int:
        return 0 if self._ids is None else self._ids.last_ms

    def _renewed_before_issuing(
        self, lease: HeldLease, kept: bool, sent_at: float
    ) -> SnowflakeGenerator | None:
        """Apply a renewal made before issuing ids: the generator when ``lease`` was kept,
        else ``None`` (another process holds the id now: lease another one)."""
        if not kept:
            self._lease = None
            return None
        self._lease = lease.renewed(sent_at)
        assert self._ids is not None
        return self._ids

    @staticmethod
    def _lease_lost(lease: HeldLease, error: StorageError) -> WorkerLeaseLostError:
        """The error when a lease that may have lapsed could not be renewed."""
        return WorkerLeaseLostError(
            f"worker id {lease.worker_id}: the lease may have lapsed and could not "
            f"be renewed ({error.kind or 'database error'}); no id was issued"
        )

    def _apply_background_renewal(self, lease: HeldLease, kept: bool, sent_at: float) -> None:
        """Apply a heartbeat's renewal of ``lease``, unless the store holds another lease by
        now; a lease another process claimed meanwhile is forgotten."""
        with self._lease_lock:
            current = self._lease
            if current is not None and (current.worker_id, current.epoch) == (
                lease.worker_id,
                lease.epoch,
            ):
                self._lease = current.renewed(sent_at) if kept else None

    @classmethod
    def from_env(cls: type[StoreT], **overrides: Any) -> StoreT:
        """A store configured from the ``MEMSTORE_*`` environment variables."""
        return cls(Settings.from_env(**overrides))

    def register_formatter(self, tool_name: str, formatter: ToolFormatter) -> None:
        """Use ``formatter(request, result_or_None) -> str`` for ``tool_name``'s display line."""
        self._formatters[tool_name] = formatter

    @property
    def formatters(self) -> Mapping[str, ToolFormatter]:
        return self._formatters

    def _plan(
        self,
        app_id: str,
        user_id: str | None,
        batch: Sequence[Message],
        drafts: Sequence[DisplayDraft],
    ) -> WritePlan:
        """Check ``batch`` and lay out its rows; the ids come from :meth:`_issue_ids`."""
        return plan_write(
            app_id,
            user_id,
            batch,
            drafts,
            now=datetime.now(timezone.utc),
            max_text_bytes=self.settings.max_text_bytes,
            max_metadata_bytes=self.settings.max_metadata_bytes,
        )

    def _bounds(
        self, max_messages: int | None, max_tokens: int | None, oversize: str
    ) -> tuple[int | None, int | None, Oversize]:
        """Validate a window's bounds. With neither, the default message bound and the
        ``window_max_tokens`` setting; otherwise exactly the bounds given (an explicit
        ``max_messages`` alone stays a pure message bound, e.g. for exports)."""
        policy = oversize_policy(oversize)
        tokens = (
            None if max_tokens is None else positive(max_tokens, "max_tokens", MAX_TOKENS_LIMIT)
        )
        if max_messages is not None:
            return positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES), tokens, policy
        if tokens is None:
            return DEFAULT_WINDOW_MESSAGES, self.settings.window_max_tokens, policy
        return None, tokens, policy

    def _token_budget(self, max_tokens: int | None, oversize: str) -> tuple[int | None, Oversize]:
        """The budget of a cached window read: ``max_tokens`` or the setting."""
        policy = oversize_policy(oversize)
        if max_tokens is None:
            return self.settings.window_max_tokens, policy
        return positive(max_tokens, "max_tokens", MAX_TOKENS_LIMIT), policy

    def _fitted(
        self, app_id: str, window: Window, max_tokens: int | None, oversize: Oversize
    ) -> Window:
        """Apply the oversize policy to a token-bounded window and say when it applied."""
        if max_tokens is None or not window.stats.oversize:
            return window
        window = fit_oversize(window, max_tokens, self._count, oversize)
        logger.warning(
            "memstore: the newest unit of app %r's window alone exceeds the token budget "
            "(%s > %d tokens); the window is that unit alone%s",
            app_id,
            window.stats.tokens,
            max_tokens,
            f", {window.stats.truncated_results} result(s) truncated"
            if window.stats.truncated_results
            else "",
        )
        return window

    def _budget_cached(
        self, app_id: str, messages: list[Message], max_tokens: int | None, oversize: Oversize
    ) -> Window | None:
        """The token-bounded part of a cached window (``None`` without a budget)."""
        if max_tokens is None:
            return None
        window = token_window(
            messages,
            max_tokens,
            self._count,
            start_at_user=self.settings.window_start_at_user,
        )
        return self._fitted(app_id, window, max_tokens, oversize)

    def _rebuilt_part(self, window: Window) -> Window | None:
        """Under ``window_max_tokens``, the part of a rebuilt window the cache keeps (its
        newest whole units that fit); ``None`` without a budget."""
        budget = self.settings.window_max_tokens
        if budget is None or not window.messages:
            return None
        return token_window(
            window.messages, budget, self._count, start_at_user=self.settings.window_start_at_user
        )

    def _counted(self, entries: Sequence[WindowEntry]) -> list[WindowEntry]:
        """``entries`` with their token counts when windows have a token budget (the cache's
        append trim needs them); counted before any write, so a failing counter writes
        nothing."""
        if self.settings.window_max_tokens is None:
            return list(entries)
        return [replace(entry, tokens=self._count(entry.message)) for entry in entries]

    def _entries(self, messages: Sequence[Message]) -> list[WindowEntry]:
        """Cache entries of a rebuilt window (with token counts under a budget)."""
        if self.settings.window_max_tokens is None:
            return [entry_for(m) for m in messages]
        return [entry_for(m, self._count(m)) for m in messages]

    @staticmethod
    def _private_database(url: str, owns_engine: bool) -> bool:
        """True for an in-memory SQLite database the store created: no other process or store
        can write to it, so an in-process window needs no generation check."""
        parsed = make_url(url)
        return (
            owns_engine
            and parsed.get_backend_name() == "sqlite"
            and parsed.database in (None, "", ":memory:")
        )

    def _issue_ids(self, count: int, above: int) -> list[int]:
        """``count`` fresh ids above ``above`` (the app's newest id, read in the write's
        transaction)."""
        generator = self._usable_generator()
        if generator is None:
            raise WorkerLeaseLostError(
                "no usable worker-id lease: the lease may have lapsed; no id was issued"
            )
        return generator.next_ids(count, above=above)

    def _id_collided(self, attempt: int, error: IdCollisionError) -> None:
        """Called when attempt ``attempt`` of a write hit a taken id: retry, or give up."""
        if attempt >= ID_COLLISION_RETRIES:
            raise error
        logger.warning(
            "memstore: snowflake id collision (another process uses worker id %s?); "
            "retrying with fresh ids",
            self.worker_id,
        )
