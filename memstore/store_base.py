"""What :class:`~memstore.MemoryStore` and :class:`~memstore.aio.AsyncMemoryStore` share apart
from their I/O: settings, tool formatters, stale-window tracking, counters, window budgets and
laying out a write."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from sqlalchemy.engine import make_url

from memstore.cache.base import CachedWindow
from memstore.config import Settings
from memstore.core.compaction import CompactionPlan, over_threshold
from memstore.core.crypto import RowCipher
from memstore.core.display import DisplayDraft, ToolFormatter
from memstore.core.inputs import MAX_WINDOW_MESSAGES, bounded_int
from memstore.core.leases import HeldLease
from memstore.core.loader import Rows, WindowSteps, window_steps
from memstore.core.plans import WritePlan, plan_write, positive
from memstore.core.row_memo import RowMemo
from memstore.core.rows import FetchedRows
from memstore.core.staleness import PollSchedule
from memstore.core.summary import SummaryRole, stored_summary, summary_role
from memstore.core.tokens import (
    MAX_TOKENS_LIMIT,
    Oversize,
    TokenCounter,
    approximate_tokens,
    checked_counter,
    fit_oversize,
    oversize_policy,
)
from memstore.core.window import Window, WindowEntry, answer_open_group, entry_for, token_window
from memstore.errors import (
    CommitOutcomeUnknownError,
    InvalidInputError,
    MemstoreError,
    StorageError,
    SummarizerError,
)
from memstore.ids import SnowflakeGenerator, _wall_clock_ms, shared_generator
from memstore.messages import Message
from memstore.metrics import Metrics, otel_listener
from memstore.reports import CompactionReport

AppendAction = Literal["local", "guarded", "invalidate", "plain", "none"]

Summarizer = Callable[[list[Message]], Any]
"""``summarize(messages) -> str`` (an async store also accepts one returning an awaitable)."""

SUMMARY_DISPLAY_ROLE = "summary"
"""The display-history role of a summary row (written only when asked)."""

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


def retry_probe(app_id: str, doubt: CommitOutcomeUnknownError, count: int) -> int | None:
    """The id whose presence in the app's original history tells whether the write ``doubt``
    reports was committed (``None``: the write had no message, only a display row, which is
    written again). Raises :class:`~memstore.errors.InvalidInputError` when ``doubt`` is not
    the outcome of this same append (another app, another number of messages)."""
    if not isinstance(doubt, CommitOutcomeUnknownError):
        raise InvalidInputError("retry_of: expected the CommitOutcomeUnknownError of an append")
    if doubt.app_id is not None and doubt.app_id != app_id:
        raise InvalidInputError("retry_of: the error is the outcome of a write to another app")
    if doubt.ids and len(doubt.ids) != count:
        raise InvalidInputError(
            f"retry_of: the write in doubt had {len(doubt.ids)} messages, this append {count};"
            " retry with the same messages"
        )
    return doubt.ids[0] if doubt.ids else None


def still_unknown(doubt: CommitOutcomeUnknownError) -> CommitOutcomeUnknownError:
    """A fresh error for ``doubt`` when checking its outcome failed too (raise it from the
    check's error): the outcome is still unknown, and a later retry may pass either."""
    return CommitOutcomeUnknownError(
        "writing history failed: the commit's outcome is still unknown (checking it failed)",
        kind=doubt.kind,
        code=doubt.code,
        driver_error=doubt.driver_error,
        app_id=doubt.app_id,
        ids=doubt.ids,
    )


class StoreBase:
    """The I/O-free half of a store."""

    def __init__(
        self,
        settings: Settings | None,
        id_generator: SnowflakeGenerator | None = None,
        id_clock: Callable[[], int] | None = None,
        token_counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.cipher = RowCipher(self.settings.encryption_keys)
        """Seals and opens stored texts with ``settings.encryption_keys`` (the identity, and
        a refusal of sealed values, when none are set)."""
        self.row_memo = RowMemo(self.settings.decoded_rows_cache_mb * 1024 * 1024)
        """Decoded rows this store's window reads reuse (``decoded_rows_cache_mb``)."""
        self._summarizer: Summarizer | None = summarizer
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
        self._lease_lock = threading.RLock()  # reentrant: a claim's steps take it again
        self._formatters: dict[str, ToolFormatter] = {}
        self._closed = False
        self._metrics = Metrics()
        self.row_memo.listener = self._count_rows
        self._otel_enabled = False
        if self.settings.otel_metrics:
            self.enable_otel()
        self._stale_polls = PollSchedule(self.settings.stale_window_max_seconds)
        self._stale_tracking = False
        self._guarded = False  # the cache checks appends against SQL generations (Redis)
        """True when the cache reports skipped updates and the bound is on: writers stamp
        apps whose window missed a change, readers drop stamped windows before serving."""
        self._encodes_entries = False
        """Whether the cache stores entries as JSON (Redis): window entries then carry their
        rows' payloads, so each message is encoded once (set by the stores). An in-process
        cache keeps the messages themselves (the payloads too would double it)."""

    def set_summarizer(self, summarize: Summarizer | None) -> None:
        """Register the summarizer automatic compaction uses (``compact_at_tokens``):
        ``summarize(messages) -> str`` (an async store also takes an ``async def``);
        ``None`` turns automatic compaction off."""
        if summarize is not None and not callable(summarize):
            raise InvalidInputError("summarize must be callable")
        self._summarizer = summarize

    @property
    def _summaries(self) -> SummaryRole:
        """How windows give the model the app's summary (the ``summary_role`` setting)."""
        return summary_role(self.settings.summary_role)

    @staticmethod
    def _keep_bounds(
        keep_last_tokens: int | None, keep_last_messages: int | None
    ) -> tuple[int | None, int | None]:
        """Validate a compaction's keep bounds (``0``: keep only the newest unit)."""
        tokens = (
            None
            if keep_last_tokens is None
            else bounded_int(
                keep_last_tokens, "keep_last_tokens", minimum=0, maximum=MAX_TOKENS_LIMIT
            )
        )
        messages = (
            None
            if keep_last_messages is None
            else bounded_int(
                keep_last_messages, "keep_last_messages", minimum=0, maximum=MAX_WINDOW_MESSAGES
            )
        )
        return tokens, messages

    def _compaction_window(self) -> WindowSteps:
        """The window a compaction works on: the rebuild's size (``reload_max``), opened by
        the previous summary as a system message, with row ids."""
        return window_steps(self.settings.reload_max, start_at_user=False, summaries="system")

    @staticmethod
    def _summary_text(value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise SummarizerError(
                f"summarize must return a non-empty str, got {type(value).__name__}; "
                "nothing was written"
            )
        return value

    @staticmethod
    def _summarizer_failed(error: Exception) -> SummarizerError:
        return SummarizerError(f"summarize raised {type(error).__name__}; nothing was written")

    def _summary_plan(
        self, app_id: str, text: str, plan: CompactionPlan, display: bool
    ) -> WritePlan:
        """The rows of a summary: one original row, and a display row only when asked."""
        message = stored_summary(text, plan.info)
        drafts = [DisplayDraft(SUMMARY_DISPLAY_ROLE, text)] if display else []
        return plan_write(
            app_id,
            None,
            [message],
            drafts,
            now=datetime.now(timezone.utc),
            max_text_bytes=self.settings.max_text_bytes,
            max_metadata_bytes=self.settings.max_metadata_bytes,
            summary=True,
        )

    def _compaction_report(
        self,
        app_id: str,
        plan: CompactionPlan | None,
        summary_id: int | None = None,
        text: str | None = None,
    ) -> CompactionReport:
        if plan is None:
            return CompactionReport(
                app_id=app_id,
                compacted=False,
                summary_id=None,
                first_id=None,
                last_id=None,
                messages_covered=0,
                previous_summary_id=None,
                kept_messages=0,
                kept_tokens=0,
            )
        tokens = None if text is None else self._count(stored_summary(text, plan.info))
        logger.info(
            "memstore compaction app_id=%r summary_id=%s first_id=%d last_id=%d "
            "messages_covered=%d",
            app_id,
            summary_id,
            plan.info.first_id,
            plan.info.last_id,
            plan.info.messages,
        )
        return CompactionReport(
            app_id=app_id,
            compacted=True,
            summary_id=summary_id,
            first_id=plan.info.first_id,
            last_id=plan.info.last_id,
            messages_covered=plan.info.messages,
            previous_summary_id=plan.previous_id,
            kept_messages=plan.kept_messages,
            kept_tokens=plan.kept_tokens,
            summary_tokens=tokens,
        )

    def _auto_compaction_due(self, messages: Sequence[Message]) -> bool:
        """After an append: automatic compaction is on and the window is over its threshold."""
        threshold = self.settings.compact_at_tokens
        if threshold is None or self._summarizer is None:
            return False
        return over_threshold(messages, self._count, threshold)

    @staticmethod
    def _auto_compaction_failed(app_id: str, error: Exception) -> None:
        logger.warning(
            "memstore: automatic compaction of app %r failed (%s); the append is stored and "
            "the window keeps its bounds",
            app_id,
            type(error).__name__ if not isinstance(error, MemstoreError) else error,
        )

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

    def _count_rows(self, reused: int, decoded: int) -> None:
        """Count a window read's rows taken from the decoded-row memo and decoded anew."""
        if reused:
            self._metrics.incr("rows_reused", reused)
        if decoded:
            self._metrics.incr("rows_decoded", decoded)

    def metrics(self) -> dict[str, int]:
        """A plain snapshot of this store's counters (see :data:`memstore.metrics.COUNTERS`):
        counts since the store was created, as a new dict of ``name -> int``."""
        return self._metrics.snapshot()

    def enable_otel(
        self, meter: Any = None, attributes: Mapping[str, str | int | bool] | None = None
    ) -> None:
        """Export this store's counters to OpenTelemetry from now on: every increment is added
        to the ``Counter`` ``memstore.<counter>`` of ``meter`` (default: the global meter
        provider's ``memstore`` meter), with ``attributes`` (default: none). Stores exporting
        to one meter add to the same instruments. A second call does nothing.

        Needs the ``otel`` extra (``opentelemetry-api``); raises
        :class:`~memstore.errors.MissingExtraError` without it. The ``otel_metrics`` setting
        calls this when the store is created.
        """
        if self._otel_enabled:
            return
        self._metrics.add_listener(otel_listener(meter, attributes))
        self._otel_enabled = True

    # -- counting (no I/O; sync and async call the same helpers) ------------------------------

    def _append_action(self, stepped: bool, has_entries: bool, local: bool) -> AppendAction:
        """How a committed write reaches the window cache. An in-process window checked
        against SQL (``local``) and a generation-guarded cache (Redis: ``_guarded``) take every
        write that has a generation step, display-only ones included (a current window stays
        current); a guarded cache drops the window of a write without one. Other caches
        append the entries, if any."""
        if stepped and local:
            return "local"
        if self._guarded:
            if stepped:
                return "guarded"
            return "invalidate" if has_entries else "none"
        return "plain" if has_entries else "none"

    def _served(self, cached: CachedWindow, generation: int | None) -> list[Message] | None:
        """The cached window a read may serve (its open tool group answered), counted as a
        hit; ``None`` (counted as a miss) when the read must rebuild from SQL."""
        if cached.messages is None or cached.generation != generation:
            self._metrics.incr("cache_misses")
            return None
        self._metrics.incr("cache_hits")
        answered = answer_open_group(cached.messages)
        if len(answered) != len(cached.messages):
            self._metrics.incr("interrupted_answers", len(answered) - len(cached.messages))
        return answered

    def _built(self, window: Window) -> Window:
        """Count what the loader did to a window it built from SQL."""
        stats = window.stats
        if stats.widened_groups:
            self._metrics.incr("widened_groups", stats.widened_groups)
        if stats.interrupted_answered:
            self._metrics.incr("interrupted_answers", stats.interrupted_answered)
        return window

    def _rebuilt(self, cached: bool) -> None:
        """Count a window rebuilt from SQL that the cache took."""
        if cached:
            self._metrics.incr("cache_rebuilds")

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
            entry_bodies=self._encodes_entries,  # an in-process cache keeps messages only
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
        return [entry._replace(tokens=self._count(entry.message)) for entry in entries]

    def _entries(
        self, messages: Sequence[Message], reads: Iterable[Rows] = ()
    ) -> list[WindowEntry]:
        """Cache entries of a rebuilt window (with token counts under a budget); for a cache
        that encodes entries, a message read by one of the loader's ``reads`` carries its
        row's payload as its JSON."""
        bodies: dict[int, str] = {}
        for rows in reads if self._encodes_entries else ():
            if isinstance(rows, FetchedRows):
                bodies.update(rows.bodies())
        if self.settings.window_max_tokens is None:
            return [entry_for(m, 0, bodies.get(id(m))) for m in messages]
        return [entry_for(m, self._count(m), bodies.get(id(m))) for m in messages]

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
