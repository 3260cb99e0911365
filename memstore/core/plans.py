"""What a store operation will do, decided before any I/O; sync and async stores share it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memstore.core.crypto import RowCipher
from memstore.core.display import DisplayDraft
from memstore.core.inputs import MAX_ROW_ID, bounded_int, check_messages
from memstore.core.metadata import DEFAULT_MAX_METADATA_BYTES, MetadataError, metadata_size
from memstore.core.rows import display_row, original_row, seal_display, seal_original
from memstore.core.summary import SUMMARY_MARK, carries_summary_mark
from memstore.core.window import Window, WindowEntry, entry_for
from memstore.errors import (
    InvalidInputError,
    InvalidMessageError,
    MessageTooLargeError,
    UnknownToolCallError,
)
from memstore.messages import AiMessage, Message, ToolResult
from memstore.reports import PurgeReport, ReloadReport

MAX_HISTORY_PAGE = 1000
ID_COLLISION_RETRIES = 3
"""Attempts of one append when another process issued the same snowflake id."""


def unanswered_in_batch(messages: Iterable[Message]) -> set[str]:
    """Result ids of a batch that no earlier request of the same batch carries."""
    requested: set[str] = set()
    unresolved: set[str] = set()
    for message in messages:
        if isinstance(message, AiMessage):
            requested.update(call.id for call in message.tool_requests)
        elif isinstance(message, ToolResult) and message.id not in requested:
            unresolved.add(message.id)
    return unresolved


IdIssuer = Callable[[int, int], list[int]]
"""``issue(count, above)``: ``count`` increasing snowflake ids, all greater than ``above``."""


@dataclass(frozen=True, slots=True)
class WritePlan:
    """The rows of one append, and what the cache gets once they are committed.

    The rows carry no ids yet: those are issued inside the write transaction, above the
    app's newest stored id (see :func:`rows_with_ids`).
    """

    original_rows: list[dict[str, Any]]
    display_rows: list[dict[str, Any]]
    unresolved_call_ids: set[str]
    """Result ids whose request must already be stored for the app, below the batch's ids
    (checked in the transaction)."""
    cache_entries: list[WindowEntry]

    @property
    def id_count(self) -> int:
        """How many ids the write needs: one per row of either history."""
        return len(self.original_rows) + len(self.display_rows)


def plan_write(
    app_id: str,
    user_id: str | None,
    batch: Sequence[Message],
    drafts: Sequence[DisplayDraft],
    *,
    now: datetime,
    max_text_bytes: int,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    summary: bool = False,
    entry_bodies: bool = False,
) -> WritePlan:
    """Check ``batch`` against the limits and lay out its rows (ids come later). Only a
    compaction's plan (``summary=True``) may hold a message with the reserved
    ``memstore_summary`` metadata key. With ``entry_bodies`` the cache entries carry their
    rows' payload JSON (for a cache that encodes entries: the message is encoded once)."""
    check_messages(batch, max_text_bytes)
    check_metadata(batch, max_metadata_bytes)
    if not summary:
        for position, message in enumerate(batch):
            if carries_summary_mark(message):
                raise InvalidMessageError(
                    f"message {position} ({message.type}): the metadata key "
                    f"{SUMMARY_MARK!r} is reserved for summaries memstore writes"
                )
    originals = [original_row(0, app_id, user_id, message, now) for message in batch]
    return WritePlan(
        original_rows=originals,
        display_rows=[display_row(0, app_id, user_id, draft, now) for draft in drafts],
        unresolved_call_ids=unanswered_in_batch(batch),
        cache_entries=[
            entry_for(message, 0, row["payload"] if entry_bodies else None)
            for message, row in zip(batch, originals, strict=True)
        ],
    )


def rows_with_ids(
    plan: WritePlan, ids: Sequence[int], cipher: RowCipher
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plan's original and display rows with ``ids`` (one per row, originals first),
    their texts sealed by ``cipher`` (bound to the ids, so sealing waits for them)."""
    count = len(plan.original_rows)
    originals = [{**row, "id": i} for row, i in zip(plan.original_rows, ids[:count], strict=True)]
    displays = [{**row, "id": i} for row, i in zip(plan.display_rows, ids[count:], strict=True)]
    if cipher.enabled:
        originals = [seal_original(cipher, row) for row in originals]
    displays = [seal_display(cipher, row) for row in displays]  # escapes envelope-like text
    return originals, displays


def check_metadata(messages: Iterable[Message], max_metadata_bytes: int) -> None:
    """Raise before writing when a message's metadata is over its limit (compact JSON, UTF-8
    bytes) or, having bypassed construction checks, is not JSON data.

    A message's limit is ``max_metadata_bytes`` plus room to repeat its own texts once
    (:func:`own_text_allowance`): a framework adapter keeps the framework's message, texts
    included, in ``metadata``, so a tool result the store takes is never refused for its copy.
    """
    for position, message in enumerate(messages):
        if not message.metadata:
            continue
        try:
            size = metadata_size(message.metadata)
        except MetadataError as error:
            raise InvalidMessageError(f"message {position} ({message.type}): {error}") from None
        if size <= max_metadata_bytes:
            continue
        limit = max_metadata_bytes + own_text_allowance(message)
        if size > limit:
            raise MessageTooLargeError(
                f"message {position} ({message.type}) metadata is {size} bytes; "
                f"the limit is {max_metadata_bytes} bytes (MEMSTORE_MAX_METADATA_BYTES), "
                f"{limit} with the message's own texts once",
                size=size,
                limit=max_metadata_bytes,
            )


def own_text_allowance(message: Message) -> int:
    """Bytes of the message's texts as JSON strings (text, tool arguments, reasoning): what a
    copy of the message in its metadata needs beyond the metadata limit."""
    texts: list[str] = []
    if isinstance(message, AiMessage):
        if message.text is not None:
            texts.append(message.text)
        texts.extend(call.arguments for call in message.tool_requests)
        for part in message.reasoning:
            texts.extend(value for value in (part.text, part.signature) if value is not None)
    else:
        texts.append(message.text)
    return sum(
        len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) for text in texts
    )


def unknown_call_error(app_id: str, missing: set[str]) -> UnknownToolCallError:
    return UnknownToolCallError(
        f"tool result(s) for call id(s) {sorted(missing)} answer no tool request of app "
        f"{app_id!r}; write the AiMessage with the request first"
    )


def positive(value: int, name: str, maximum: int = MAX_ROW_ID) -> int:
    """``value`` when it is an int from 1 to ``maximum``, else ``InvalidInputError``."""
    return bounded_int(value, name, minimum=1, maximum=maximum)


def history_page(limit: int, before_id: int | None) -> int:
    """Validate the arguments of a display-history page; return the page size."""
    page = positive(limit, "limit")
    if page > MAX_HISTORY_PAGE:
        raise InvalidInputError(f"limit must be at most {MAX_HISTORY_PAGE}, got {limit}")
    if before_id is not None:
        positive(before_id, "before_id")
    return page


def reload_report(
    app_id: str, window: Window, cached: bool, budgeted: Window | None = None
) -> ReloadReport:
    """The report of a rebuild; ``budgeted`` is the token-bounded part of the rebuilt window
    that reads serve when a token budget is set."""
    return ReloadReport(
        app_id=app_id,
        messages=len(window.messages),
        widened_groups=window.stats.widened_groups,
        interrupted_answered=window.stats.interrupted_answered,
        orphans_skipped=window.stats.orphans_skipped,
        cached=cached,
        tokens=None if budgeted is None else budgeted.stats.tokens,
        budget_messages=None if budgeted is None else len(budgeted.messages),
        oversize=False if budgeted is None else budgeted.stats.oversize,
    )


def purge_report(app_id: str, counts: tuple[int, int, int], cache_keys: int) -> PurgeReport:
    """The report of one purge, also written as one INFO line on the ``memstore`` logger."""
    originals, displays, executions = counts
    logging.getLogger("memstore").info(
        "memstore purge app_id=%r original_rows=%d display_rows=%d tool_executions=%d "
        "cache_keys=%d",
        app_id,
        originals,
        displays,
        executions,
        cache_keys,
    )
    return PurgeReport(
        app_id=app_id,
        original_rows=originals,
        display_rows=displays,
        tool_executions=executions,
        cache_keys=cache_keys,
    )
