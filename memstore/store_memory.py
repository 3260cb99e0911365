"""One app's memory window, the handle ``store.memory(app_id)`` returns: :class:`ChatMemory`
for :class:`~memstore.MemoryStore`, :class:`AsyncChatMemory` for
:class:`~memstore.aio.AsyncMemoryStore` (each importable from its store's module too). The
store reads the window; the token budget of the read is applied here, once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from memstore.core.tokens import Oversize
from memstore.messages import Message
from memstore.reports import CompactionReport
from memstore.store_base import Summarizer
from memstore.store_lifecycle import StoreLifecycle

if TYPE_CHECKING:  # named as strings in the bases below
    from memstore.aio import AsyncMemoryStore  # noqa: F401
    from memstore.store import MemoryStore  # noqa: F401

StoreT = TypeVar("StoreT", bound=StoreLifecycle)


class MemoryHandle(Generic[StoreT]):
    """What both handles share: the app and its store, and the budgeted part of a read."""

    def __init__(self, store: StoreT, app_id: str) -> None:
        self._store = store
        self.app_id = app_id

    def _budgeted(
        self, messages: list[Message], budget: int | None, policy: Oversize
    ) -> list[Message]:
        """The newest whole units of ``messages`` within ``budget`` tokens (all without one)."""
        if budget is None:
            return messages
        budgeted = self._store._budget_cached(self.app_id, messages, budget, policy)
        return messages if budgeted is None else budgeted.messages


class ChatMemory(MemoryHandle["MemoryStore"]):
    """One app's memory window: what the model gets each call."""

    def messages(self, max_tokens: int | None = None, *, oversize: str = "keep") -> list[Message]:
        """The cached window; on a miss it is rebuilt from SQL (``reload_max`` messages).

        With ``max_tokens`` (default: the ``window_max_tokens`` setting), only the newest
        whole units of the cached window that fit the budget, by the rules of
        :meth:`MemoryStore.load_window` (``oversize`` as there). An in-process window is
        served only while the app's generation in SQL is the one it was built at (one
        primary-key lookup), so another process's write is never missed. With Redis, the
        windows of apps stamped stale by a writer that could not reach Redis are dropped first
        (looked up at most every half of ``stale_window_max_seconds``).
        """
        budget, policy = self._store._token_budget(max_tokens, oversize)
        messages = self._store._cached_window(self.app_id)
        return self._budgeted(messages, budget, policy)

    def add(self, message: Message | dict[str, Any], user_id: str | None = None) -> int:
        """Write ``message`` durably, then append it to the cached window; return its id."""
        return self._store.append(self.app_id, [message], user_id=user_id)[0]

    def add_all(
        self, messages: Iterable[Message | dict[str, Any]], user_id: str | None = None
    ) -> list[int]:
        """Write several messages in one transaction (see :meth:`MemoryStore.append`)."""
        return self._store.append(self.app_id, messages, user_id=user_id)

    def compact(
        self,
        summarize: Callable[[list[Message]], Any],
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        """Replace the older part of the window with a summary written by ``summarize``.

        The window (``reload_max`` messages, opened by the previous summary) is cut at a unit
        boundary: the newest whole units within ``keep_last_tokens`` tokens and
        ``keep_last_messages`` messages stay (both bounds hold when both are given; the
        newest unit always stays). ``summarize(messages) -> str`` gets the rest, the previous
        summary first, so summaries chain; it runs outside any transaction. Its text is
        stored as a ``summary`` row of the original history recording the id range it
        covers; from then on windows are ``[summary] + the newest units after that range``.
        Nothing is deleted or changed: ``history``, ``export`` and ``memstore show
        --original`` still see every message. ``display=True`` also writes the summary to
        the display history (role ``"summary"``).

        Messages appended while ``summarize`` runs are neither lost nor covered. Raises
        :class:`~memstore.errors.SummarizerError` when ``summarize`` raises or returns no
        text, and :class:`~memstore.errors.CompactionConflictError` when another compaction
        stored a summary meanwhile; either way nothing is written. Returns a
        :class:`~memstore.reports.CompactionReport` (``compacted=False`` when nothing was
        older than the kept part: ``summarize`` was not called).
        """
        return self._store.compact(
            self.app_id, summarize, keep_last_tokens, keep_last_messages, display=display
        )

    def invalidate(self) -> None:
        """Drop the cached window; the next read rebuilds it from SQL."""
        self._store._cache_update(lambda: self._store.cache.invalidate(self.app_id))


class AsyncChatMemory(MemoryHandle["AsyncMemoryStore"]):
    """One app's memory window (see :class:`memstore.ChatMemory`)."""

    async def messages(
        self, max_tokens: int | None = None, *, oversize: str = "keep"
    ) -> list[Message]:
        """See :meth:`memstore.ChatMemory.messages`."""
        budget, policy = self._store._token_budget(max_tokens, oversize)
        messages = await self._store._cached_window(self.app_id)
        return self._budgeted(messages, budget, policy)

    async def add(self, message: Message | dict[str, Any], user_id: str | None = None) -> int:
        """Write ``message`` durably, then append it to the cached window; return its id."""
        return (await self._store.append(self.app_id, [message], user_id=user_id))[0]

    async def add_all(
        self, messages: Iterable[Message | dict[str, Any]], user_id: str | None = None
    ) -> list[int]:
        """Write several messages in one transaction."""
        return await self._store.append(self.app_id, messages, user_id=user_id)

    async def compact(
        self,
        summarize: Summarizer,
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        """See :meth:`memstore.ChatMemory.compact`; ``summarize`` may be an ``async def``."""
        return await self._store.compact(
            self.app_id, summarize, keep_last_tokens, keep_last_messages, display=display
        )

    async def invalidate(self) -> None:
        """Drop the cached window; the next read rebuilds it from SQL."""
        await self._store._cache_update(lambda: self._store.cache.invalidate(self.app_id))
