"""Run the sync contract suite against :class:`AsyncMemoryStore`.

A test-only facade: each call runs the coroutine to completion on the test's own event loop,
so every contract test exercises the async store, its async engine and its async cache
unchanged. (Library code never bridges like this.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from memstore.aio import AsyncChatMemory, AsyncMemoryStore, AsyncTurnCollector
from memstore.cache.aio import AsyncWindowCache
from memstore.cache.base import CachedWindow
from memstore.core.display import ToolFormatter
from memstore.messages import Message, ToolRequest
from memstore.reports import (
    CompactionReport,
    DisplayEntry,
    HealthReport,
    ImportReport,
    PruneReport,
    PurgeReport,
    ReloadReport,
)

T = TypeVar("T")


class _Runner:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def __call__(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)


class SyncCache:
    def __init__(self, cache: AsyncWindowCache, run: _Runner) -> None:
        self._cache, self._run = cache, run

    def read(self, app_id: str) -> CachedWindow:
        return self._run(self._cache.read(app_id))

    def store(
        self,
        app_id: str,
        entries: Any,
        synthetic: Any,
        version: str,
        generation: int | None = None,
    ) -> bool:
        return self._run(self._cache.store(app_id, entries, synthetic, version, generation))

    def append(
        self, app_id: str, entries: Any, *, before: int | None = None, after: int | None = None
    ) -> None:
        self._run(self._cache.append(app_id, entries, before=before, after=after))

    def invalidate(self, app_id: str) -> None:
        self._run(self._cache.invalidate(app_id))

    def purge(self, app_id: str) -> int:
        return self._run(self._cache.purge(app_id))

    def close(self) -> None:
        self._run(self._cache.close())


class SyncMemory:
    def __init__(self, memory: AsyncChatMemory, run: _Runner) -> None:
        self._memory, self._run = memory, run
        self.app_id = memory.app_id

    def messages(self, max_tokens: int | None = None, *, oversize: str = "keep") -> list[Message]:
        return self._run(self._memory.messages(max_tokens, oversize=oversize))

    def add(self, message: Any, user_id: str | None = None) -> int:
        return self._run(self._memory.add(message, user_id=user_id))

    def add_all(self, messages: Iterable[Any], user_id: str | None = None) -> list[int]:
        return self._run(self._memory.add_all(messages, user_id=user_id))

    def invalidate(self) -> None:
        self._run(self._memory.invalidate())

    def compact(
        self,
        summarize: Any,
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        return self._run(
            self._memory.compact(summarize, keep_last_tokens, keep_last_messages, display=display)
        )


class SyncCollector:
    def __init__(self, collector: AsyncTurnCollector, run: _Runner) -> None:
        self._collector, self._run = collector, run

    def on_text(self, delta: str) -> None:
        self._collector.on_text(delta)

    def on_tool_call_delta(
        self,
        index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
    ) -> None:
        self._collector.on_tool_call_delta(index, id=id, name=name, arguments=arguments)

    def tool_calls(self) -> list[ToolRequest]:
        return self._collector.tool_calls()

    def on_tool_executed(
        self, id: str, result: str, is_error: bool = False, *, truncate: bool = False
    ) -> None:
        self._run(self._collector.on_tool_executed(id, result, is_error, truncate=truncate))

    def feed(self, chunk: object) -> None:
        self._run(self._collector.feed(chunk))

    @property
    def turn_messages(self) -> list[Message]:
        return self._collector.turn_messages

    @property
    def flushes(self) -> int:
        return self._collector.flushes

    def __enter__(self) -> SyncCollector:
        self._run(self._collector.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self._collector.__aexit__(exc_type, exc, tb))


class SyncFacade:
    """Looks like ``MemoryStore`` to the contract tests; runs ``AsyncMemoryStore`` inside."""

    def __init__(
        self, store: AsyncMemoryStore, loop: asyncio.AbstractEventLoop, sync_engine: Engine
    ) -> None:
        self._store = store
        self._run = _Runner(loop)
        self.settings = store.settings
        self.engine = sync_engine
        """For raw SQL checks: a sync engine on the same database."""
        self.event_engine = store.engine.sync_engine
        """Where statement events of the async store fire."""
        self.cache = SyncCache(store.cache, self._run)
        self.cipher = store.cipher
        self.row_memo = store.row_memo

    def raw_window(self, app_id: str) -> list[bytes] | None:
        """The app's Redis window entries as stored (``None`` for an in-process cache)."""
        from memstore.cache import keys
        from memstore.cache.aio import AsyncRedisWindowCache

        cache = self._store.cache
        if not isinstance(cache, AsyncRedisWindowCache):
            return None
        return list(self._run(cache.client.lrange(keys.window_key(app_id), 0, -1)))

    def metrics(self) -> dict[str, int]:
        return self._store.metrics()

    def append(self, app_id: Any, messages: Iterable[Any], user_id: str | None = None) -> list[int]:
        return self._run(self._store.append(app_id, messages, user_id=user_id))

    def load_window(
        self,
        app_id: Any,
        max_messages: int | None = None,
        max_tokens: int | None = None,
        *,
        start_at_user: bool | None = None,
        oversize: str = "keep",
        summaries: bool = True,
    ) -> list[Message]:
        return self._run(
            self._store.load_window(
                app_id,
                max_messages,
                max_tokens,
                start_at_user=start_at_user,
                oversize=oversize,
                summaries=summaries,
            )
        )

    def compact(
        self,
        app_id: Any,
        summarize: Any,
        keep_last_tokens: int | None = None,
        keep_last_messages: int | None = None,
        *,
        display: bool = False,
    ) -> CompactionReport:
        return self._run(
            self._store.compact(
                app_id, summarize, keep_last_tokens, keep_last_messages, display=display
            )
        )

    def set_summarizer(self, summarize: Any) -> None:
        self._store.set_summarizer(summarize)

    def memory(self, app_id: Any) -> SyncMemory:
        return SyncMemory(self._store.memory(app_id), self._run)

    def reload(self, app_id: Any, max_messages: int | None = None) -> ReloadReport:
        return self._run(self._store.reload(app_id, max_messages))

    def history(
        self, app_id: Any, limit: int = 20, before_id: int | None = None
    ) -> list[DisplayEntry]:
        return self._run(self._store.history(app_id, limit, before_id))

    def purge(self, app_id: Any) -> PurgeReport:
        return self._run(self._store.purge(app_id))

    def prune(
        self,
        older_than: timedelta | None = None,
        keep_last: int | None = None,
        app_ids: Iterable[Any] | None = None,
        *,
        dry_run: bool = False,
    ) -> list[PruneReport]:
        return self._run(self._store.prune(older_than, keep_last, app_ids, dry_run=dry_run))

    def export(self, app_ids: Iterable[Any] | None = None, user_id: str | None = None) -> Any:
        async def collect() -> list[dict[str, Any]]:
            return [record async for record in self._store.export(app_ids, user_id)]

        return iter(self._run(collect()))

    def import_records(self, records: Iterable[Any]) -> ImportReport:
        return self._run(self._store.import_records(records))

    def register_formatter(self, tool_name: str, formatter: ToolFormatter) -> None:
        self._store.register_formatter(tool_name, formatter)

    def collector(self, app_id: Any, user_id: str | None = None) -> SyncCollector:
        return SyncCollector(self._store.collector(app_id, user_id), self._run)

    def health(self, timeout: float = 5.0) -> HealthReport:
        return self._run(self._store.health(timeout))

    def enable_otel(self, meter: Any = None, attributes: Any = None) -> None:
        self._store.enable_otel(meter, attributes)

    @property
    def worker_id(self) -> int | None:
        return self._store.worker_id

    def close(self) -> None:
        self._run(self._store.close())
