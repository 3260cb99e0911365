"""What :class:`~memstore.MemoryStore` and :class:`~memstore.aio.AsyncMemoryStore` share apart
from their I/O: settings, the id generator, tool formatters, laying out a write and the
policy for snowflake id collisions."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy.engine import make_url

from memstore.config import Settings
from memstore.core.display import DisplayDraft, ToolFormatter
from memstore.core.plans import ID_COLLISION_RETRIES, WritePlan, plan_write
from memstore.errors import IdCollisionError
from memstore.ids import SnowflakeGenerator, shared_generator
from memstore.messages import Message

logger = logging.getLogger("memstore")

StoreT = TypeVar("StoreT", bound="StoreBase")


class StoreBase:
    """The I/O-free half of a store."""

    def __init__(
        self, settings: Settings | None, id_generator: SnowflakeGenerator | None = None
    ) -> None:
        self.settings = settings or Settings()
        self._ids: SnowflakeGenerator = id_generator or shared_generator(
            self.settings.worker_id, self.settings.clock_backwards_max_wait_ms
        )
        self._formatters: dict[str, ToolFormatter] = {}
        self._closed = False

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
        return self._ids.next_ids(count, above=above)

    def _id_collided(self, attempt: int, error: IdCollisionError) -> None:
        """Called when attempt ``attempt`` of a write hit a taken id: retry, or give up."""
        if attempt >= ID_COLLISION_RETRIES:
            raise error
        logger.warning(
            "memstore: snowflake id collision (another process uses worker id %d?); "
            "retrying with fresh ids",
            self.settings.worker_id,
        )
