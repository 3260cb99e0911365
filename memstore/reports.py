"""What store operations report back: plain, frozen pydantic models."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True)


class ReloadReport(_Report):
    """The outcome of rebuilding one app's window from SQL."""

    app_id: str
    messages: int
    """Messages in the rebuilt window (synthetic interrupted results included)."""
    widened_groups: int
    """Tool groups that made the window reach back past the limit."""
    interrupted_answered: int
    """Requests without a stored result, answered with a synthetic interrupted result."""
    orphans_skipped: int
    """Results without a request, left out."""
    cached: bool
    """False when the cache was unavailable or a concurrent write made the rebuild stale."""
    tokens: int | None = None
    """With the ``window_max_tokens`` setting: tokens of the part of the window reads serve
    (the newest whole units that fit the budget); ``None`` without a budget."""
    budget_messages: int | None = None
    """With ``window_max_tokens``: messages in that part; ``None`` without a budget."""
    oversize: bool = False
    """The newest unit (tool group or message) alone exceeds ``window_max_tokens``, so reads
    serve that unit alone."""


class CompactionReport(_Report):
    """The outcome of one compaction (``memory(app).compact``)."""

    app_id: str
    compacted: bool
    """False when nothing in the window was older than the part kept (no summary written,
    the summarizer not called)."""
    summary_id: int | None
    """The id of the summary row in the original history."""
    first_id: int | None
    """First id of the range the summary covers (the chain's: a previous summary's first)."""
    last_id: int | None
    """Last id of the covered range: windows hold only rows after it."""
    messages_covered: int
    """Messages given to the summarizer besides the previous summary."""
    previous_summary_id: int | None
    """The summary the new one chains from (it was given to the summarizer first)."""
    kept_messages: int
    """Messages of the window left after the summary."""
    kept_tokens: int
    """Their tokens by the store's counter."""
    summary_tokens: int | None = None
    """Tokens of the new summary by the store's counter."""

    @property
    def covered(self) -> tuple[int, int] | None:
        """``(first_id, last_id)``: the id range the summary covers."""
        if self.first_id is None or self.last_id is None:
            return None
        return (self.first_id, self.last_id)


class PurgeReport(_Report):
    """Rows and cache keys one purge removed."""

    app_id: str
    original_rows: int
    display_rows: int
    tool_executions: int = 0
    """Loop-guard records of the app's side-effecting tool calls."""
    cache_keys: int
    """Cache keys removed that held the app's messages (its window, and its set of calls
    answered as interrupted); version counters are not counted."""


class DisplayEntry(_Report):
    """One row of the display history: what a person saw."""

    id: int
    app_id: str
    user_id: str | None
    role: str
    """``"user"`` or ``"ai"``."""
    text: str
    status: str
    """``"ok"``, or ``"failed"`` for a reply that broke off."""
    created_at: datetime


class PruneReport(_Report):
    """What one prune removed from one app (or would remove, with ``dry_run``)."""

    app_id: str
    original_rows: int
    """Messages of the original history removed (the prefix, tool groups kept whole)."""
    display_rows: int
    tool_executions: int
    """Loop-guard records last updated before the age cutoff (age rules only)."""
    first_kept_id: int | None
    """The oldest original-history row left; ``None`` when none is left or none was pruned."""
    window_dropped: bool
    """True when the app's cached window was dropped (it may have held pruned messages)."""
    dry_run: bool = False


class ImportCounts(_Report):
    """Rows one import inserted and skipped (already stored: same id) per table."""

    original_inserted: int = 0
    original_skipped: int = 0
    display_inserted: int = 0
    display_skipped: int = 0
    tool_executions_inserted: int = 0
    tool_executions_skipped: int = 0


class ImportReport(_Report):
    """The outcome of ``import_records``: counts per app and in total."""

    records: int
    """Records read after the header."""
    apps: dict[str, ImportCounts]
    total: ImportCounts


class HealthCheck(_Report):
    """The outcome of one health check."""

    status: Literal["ok", "failed", "skipped"]
    """``"skipped"``: the check does not apply (a fixed worker id, or the database it needs
    failed first); a skipped check never makes the store unhealthy."""
    detail: str | None = None
    """A short reason: a failure's kind or class, revisions, a worker id. Never a URL, a
    password or message text."""

    @property
    def ok(self) -> bool:
        """True unless the check failed."""
        return self.status != "failed"


class HealthReport(_Report):
    """What :meth:`MemoryStore.health` found: one check per dependency and the verdict."""

    ok: bool
    """True when no check failed: the store can serve reads and writes as configured."""
    database: HealthCheck
    """A connection answers ``SELECT 1``."""
    migrations: HealthCheck
    """The schema is at the head revision this memstore ships."""
    cache: HealthCheck
    """Redis answers ``PING`` (an in-process cache always passes)."""
    lease: HealthCheck
    """The worker-id lease is held and renewed in time, or (none held yet) a worker id is
    free to claim; skipped for a fixed worker id."""
    seconds: float
    """How long the checks took."""

    @property
    def degraded(self) -> bool:
        """True when only the cache failed: the store still serves everything from SQL."""
        return not self.ok and all(
            check.ok for check in (self.database, self.migrations, self.lease)
        )


class RekeyTableCounts(_Report):
    """What a rekey did to one table's encrypted column."""

    rekeyed: int = 0
    """Values sealed again under the current key (with ``dry_run``: values that would be)."""
    conflicts: int = 0
    """Values a concurrent writer changed or deleted first (left to it; rerun to be sure)."""


class RekeyReport(_Report):
    """The outcome of ``memstore rekey`` (:func:`memstore.sql.rekey.rekey`)."""

    key_id: str
    """The key every value is now sealed under (the first of ``encryption_keys``)."""
    tables: dict[str, RekeyTableCounts]
    """Per table (``chat_history_original``, ``chat_history``, ``tool_executions``)."""
    dry_run: bool = False
