"""``MemoryStore``: the durable history in SQL plus each app's memory window in a cache.

>>> from memstore import MemoryStore, Settings, UserMessage, AiMessage
>>> store = MemoryStore(Settings(database_url="sqlite:///:memory:"))
>>> store.migrate()
>>> ids = store.append("app-1", [UserMessage(text="hi"), AiMessage(text="hello")])
>>> [m.type for m in store.memory("app-1").messages()]
['user', 'ai']
>>> store.close()

SQL is the source of truth and is written first; the cache is a projection rebuilt from it
with the edge check whenever it is missing (expired, flushed, restarted) or uncertain.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine

from memstore.cache.base import WindowCache, WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.config import Settings
from memstore.core.display import DisplayDraft, display_drafts
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id, normalize_user_id
from memstore.core.loader import run_steps, window_steps
from memstore.core.plans import (
    history_page,
    positive,
    purge_report,
    reload_report,
)
from memstore.core.window import Window, answer_open_group, entry_for
from memstore.errors import IdCollisionError
from memstore.ids import SnowflakeGenerator
from memstore.messages import Message, parse_message
from memstore.reports import DisplayEntry, PurgeReport, ReloadReport
from memstore.sql.engine import make_engine
from memstore.sql.repository import SqlHistory
from memstore.store_base import StoreBase

if TYPE_CHECKING:
    from memstore.collector import TurnCollector

logger = logging.getLogger("memstore")


class MemoryStore(StoreBase):
    """Chat memory for one database and one cache. Thread-safe; share one per process.

    Args:
        settings: configuration; ``Settings()`` (SQLite file, in-process cache) when omitted.
        engine: a SQLAlchemy engine to use instead of one built from ``settings.database_url``
            (the store then leaves disposing it to you).
        cache: a window cache to use instead of one built from ``settings.redis_url``.
        id_generator: the snowflake id generator to use instead of the process-wide one for
            ``settings.worker_id`` (for tests, e.g. a clock that is behind).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        cache: WindowCache | None = None,
        id_generator: SnowflakeGenerator | None = None,
    ) -> None:
        super().__init__(settings, id_generator)
        self._owns_engine = engine is None
        self.engine = engine if engine is not None else make_engine(self.settings.database_url)
        self._sql = SqlHistory(self.engine)
        self._owns_cache = cache is None
        self.cache: WindowCache = cache if cache is not None else self._default_cache()
        # An in-process window cannot see other processes' writes: check it against the
        # app's SQL generation on every read, unless nobody else can write.
        self._local: InProcessWindowCache | None = (
            self.cache
            if isinstance(self.cache, InProcessWindowCache)
            and not self._private_database(str(self.engine.url), self._owns_engine)
            else None
        )

    def _default_cache(self) -> WindowCache:
        policy = WindowPolicy.from_settings(self.settings)
        if self.settings.redis_url:
            return RedisWindowCache.from_url(
                self.settings.redis_url, policy, self.settings.redis_timeout_seconds
            )
        return InProcessWindowCache(policy)

    # -- schema ------------------------------------------------------------------------------

    def migrate(self, revision: str = "head") -> None:
        """Upgrade the database schema (``alembic upgrade head`` with memstore's migrations)."""
        from memstore.sql import migrate as migrations  # Alembic loads only when needed

        migrations.upgrade(self.engine, revision)

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        app_id: str | int,
        messages: Iterable[Message | dict[str, Any]],
        user_id: str | None = None,
    ) -> list[int]:
        """Write ``messages`` to both histories in one transaction, then to the cached window.

        Returns the snowflake ids of the original-history rows, one per message, in order.
        Raises a :class:`~memstore.errors.InvalidInputError` subclass for bad input (nothing
        written) and :class:`~memstore.errors.StorageError` when the database fails (nothing
        written; the cache is untouched).
        """
        app = normalize_app_id(app_id)
        user = normalize_user_id(user_id)
        batch = [parse_message(message) for message in messages]
        return self._write(app, user, batch, display_drafts(batch, self._formatters))

    def _write(
        self, app_id: str, user_id: str | None, batch: list[Message], drafts: list[DisplayDraft]
    ) -> list[int]:
        """Both histories in one transaction (one multi-row INSERT per table), then the cache."""
        if not batch and not drafts:
            return []
        plan = self._plan(app_id, user_id, batch, drafts)
        attempt = 0
        while True:
            attempt += 1
            try:
                ids, step = self._sql.insert(app_id, plan, self._issue_ids)
                break
            except IdCollisionError as error:
                self._id_collided(attempt, error)
        if self._local is not None and step is not None:
            # display-only writes raise the generation too: keep a current window current
            self._local.append(app_id, plan.cache_entries, before=step.before, after=step.after)
        elif plan.cache_entries:
            self.cache.append(app_id, plan.cache_entries)
        return ids

    def collector(self, app_id: str | int, user_id: str | None = None) -> TurnCollector:
        """A :class:`~memstore.collector.TurnCollector` for one streamed agent turn of the app.

        Use it as a context manager; see the README section "Stream collector".
        """
        from memstore.collector import TurnCollector

        return TurnCollector(self, normalize_app_id(app_id), normalize_user_id(user_id))

    # -- reads -------------------------------------------------------------------------------

    def _window(self, app_id: str, max_messages: int, start_at_user: bool) -> Window:
        return run_steps(
            window_steps(max_messages, start_at_user=start_at_user),
            lambda request: self._sql.fetch(app_id, request),
        )

    def load_window(
        self, app_id: str | int, max_messages: int = 50, *, start_at_user: bool | None = None
    ) -> list[Message]:
        """The newest messages of the original history, edge-checked, straight from SQL.

        At most ``max_messages``, except that a tool group at the edge is kept whole. With
        ``start_at_user`` (default: the ``window_start_at_user`` setting) the window starts at
        a user message.
        """
        app = normalize_app_id(app_id)
        first_user = self.settings.window_start_at_user if start_at_user is None else start_at_user
        return self._window(
            app, positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES), first_user
        ).messages

    def memory(self, app_id: str | int) -> ChatMemory:
        """The memory window of one app (cached, rebuilt from SQL on a miss)."""
        return ChatMemory(self, normalize_app_id(app_id))

    def reload(self, app_id: str | int, max_messages: int | None = None) -> ReloadReport:
        """Rebuild the app's cached window from SQL now, and report what the edge check did."""
        app = normalize_app_id(app_id)
        limit = (
            self.settings.reload_max
            if max_messages is None
            else positive(max_messages, "max_messages", MAX_WINDOW_MESSAGES)
        )
        self.cache.invalidate(app)
        version = self.cache.read(app).version
        return self._rebuild(app, limit, version, self._generation(app))[1]

    def _generation(self, app_id: str) -> int | None:
        """The app's SQL generation when the cache needs it (read before any window row)."""
        return None if self._local is None else self._sql.generation(app_id)

    def _rebuild(
        self, app_id: str, limit: int, version: str, generation: int | None
    ) -> tuple[list[Message], ReloadReport]:
        window = self._window(app_id, limit, self.settings.window_start_at_user)
        entries = [entry_for(m) for m in window.messages]
        if self._local is not None:
            cached = self._local.store(
                app_id, entries, window.synthetic_call_ids, version, generation
            )
        else:
            cached = self.cache.store(app_id, entries, window.synthetic_call_ids, version)
        report = reload_report(app_id, window, cached)
        return window.messages, report

    def history(
        self, app_id: str | int, limit: int = 20, before_id: int | None = None
    ) -> list[DisplayEntry]:
        """One page of the display history, newest first; pass the last id as ``before_id``."""
        app = normalize_app_id(app_id)
        return self._sql.history(app, history_page(limit, before_id), before_id)

    # -- operator actions ----------------------------------------------------------------------

    def purge(self, app_id: str | int) -> PurgeReport:
        """Hard-delete the app's rows (both histories and its loop-guard records) and its cache
        keys, in one transaction and one cache call. Exact match only."""
        app = normalize_app_id(app_id)
        counts = self._sql.purge(app)
        return purge_report(app, counts, self.cache.purge(app))

    def close(self) -> None:
        """Release the connections this store created (an engine or cache passed in stays open)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_cache:
            self.cache.close()
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ChatMemory:
    """One app's memory window: what the model gets each call."""

    def __init__(self, store: MemoryStore, app_id: str) -> None:
        self._store = store
        self.app_id = app_id

    def messages(self) -> list[Message]:
        """The cached window; on a miss it is rebuilt from SQL (``reload_max`` messages).

        An in-process window is served only while the app's generation in SQL is the one it
        was built at (one primary-key lookup), so another process's write is never missed.
        """
        generation = self._store._generation(self.app_id)
        cached = self._store.cache.read(self.app_id)
        if cached.messages is not None and cached.generation == generation:
            return answer_open_group(cached.messages)
        messages, _ = self._store._rebuild(
            self.app_id, self._store.settings.reload_max, cached.version, generation
        )
        return messages

    def add(self, message: Message | dict[str, Any], user_id: str | None = None) -> int:
        """Write ``message`` durably, then append it to the cached window; return its id."""
        return self._store.append(self.app_id, [message], user_id=user_id)[0]

    def add_all(
        self, messages: Iterable[Message | dict[str, Any]], user_id: str | None = None
    ) -> list[int]:
        """Write several messages in one transaction (see :meth:`MemoryStore.append`)."""
        return self._store.append(self.app_id, messages, user_id=user_id)

    def invalidate(self) -> None:
        """Drop the cached window; the next read rebuilds it from SQL."""
        self._store.cache.invalidate(self.app_id)
