"""The two tables. Alembic owns the live schema; these definitions must match the migrations
(``tests/integration/test_migrations.py`` proves it on every database).

Identifiers (``app_id``, ``user_id``, ``tool_call_id``) compare byte for byte on every database:
on MySQL/MariaDB they are stored as ``VARBINARY`` (the default collations there ignore case
and trailing spaces), elsewhere as ``VARCHAR`` with the database's exact comparison.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import SchemaItem
from sqlalchemy.types import TypeDecorator, TypeEngine

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

ORIGINAL_TABLE = "chat_history_original"
DISPLAY_TABLE = "chat_history"
MESSAGE_TYPES = ("user", "ai", "toolExecutionRequest", "toolExecutionResult", "system", "summary")
MAX_ID_CHARS = 128


class ExactString(TypeDecorator[str]):
    """A short identifier string compared byte for byte (``VARBINARY`` on MySQL/MariaDB)."""

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.VARBINARY(self.length * 4))
        return dialect.type_descriptor(sa.String(self.length))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is not None and dialect.name in ("mysql", "mariadb"):
            return value.encode("utf-8")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8")
        return value  # type: ignore[no-any-return]


def long_text() -> TypeEngine[str]:
    """Text that holds at least the 1 MiB default limit everywhere (``LONGTEXT`` on MySQL)."""
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def timestamp() -> TypeEngine[Any]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def row_id() -> TypeEngine[int]:
    """A history row's snowflake id: ``BIGINT``, and ``INTEGER`` on SQLite, where an
    ``INTEGER`` primary key is the table's rowid (a ``BIGINT`` one would be a second b-tree
    beside the rowid table, written on every insert). Both are signed 64-bit there."""
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _table(name: str, *items: SchemaItem) -> sa.Table:
    """A table of :data:`metadata`; on MySQL/MariaDB an InnoDB one (row locks, transactions)
    in ``utf8mb4``."""
    return sa.Table(name, metadata, *items, mysql_engine="InnoDB", mysql_charset="utf8mb4")


original = _table(
    ORIGINAL_TABLE,
    sa.Column("id", row_id(), primary_key=True, autoincrement=False),
    sa.Column("app_id", ExactString(MAX_ID_CHARS), nullable=False),
    sa.Column("user_id", ExactString(MAX_ID_CHARS), nullable=True),
    sa.Column("message_type", sa.String(32), nullable=False),
    sa.Column("tool_call_id", ExactString(255), nullable=True),
    sa.Column("payload", long_text(), nullable=False),
    sa.Column("created_at", timestamp(), nullable=False),
    sa.Column("updated_at", timestamp(), nullable=False),
    sa.Column("is_deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Index("ix_chat_history_original_app_id_id", "app_id", "id"),
    sa.Index("ix_chat_history_original_user_id", "user_id"),
    sa.Index("ix_chat_history_original_app_id_message_type_id", "app_id", "message_type", "id"),
)
"""The full history: one row per message, ``payload`` the message's canonical JSON. The
``(app_id, message_type, id)`` index finds an app's newest summary row in one lookup."""

display = _table(
    DISPLAY_TABLE,
    sa.Column("id", row_id(), primary_key=True, autoincrement=False),
    sa.Column("app_id", ExactString(MAX_ID_CHARS), nullable=False),
    sa.Column("user_id", ExactString(MAX_ID_CHARS), nullable=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("content", long_text(), nullable=False),
    sa.Column("status", sa.String(16), nullable=False, server_default="ok"),
    sa.Column("created_at", timestamp(), nullable=False),
    sa.Column("updated_at", timestamp(), nullable=False),
    sa.Column("is_deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Index("ix_chat_history_app_id_id", "app_id", "id"),
    sa.Index("ix_chat_history_user_id", "user_id"),
)
"""The display history: what a person saw (user messages, AI replies with tool summaries)."""

EXECUTIONS_TABLE = "tool_executions"
EXECUTION_STATES = ("pending", "running", "succeeded", "failed", "unknown")
MAX_IDEMPOTENCY_KEY_CHARS = 255
MAX_TOOL_NAME_CHARS = 255

tool_executions = _table(
    EXECUTIONS_TABLE,
    sa.Column("app_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("idempotency_key", ExactString(MAX_IDEMPOTENCY_KEY_CHARS), primary_key=True),
    sa.Column("tool_name", ExactString(MAX_TOOL_NAME_CHARS), nullable=False),
    sa.Column("arguments_digest", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("tool_call_id", ExactString(255), nullable=True),
    sa.Column("result", long_text(), nullable=True),
    sa.Column("created_at", timestamp(), nullable=False),
    sa.Column("updated_at", timestamp(), nullable=False),
    sa.Column("user_id", ExactString(MAX_ID_CHARS), nullable=True),
    sa.Index("ix_tool_executions_state_updated_at", "state", "updated_at"),
    sa.Index("ix_tool_executions_user_id", "user_id"),
)
"""Side-effecting tool calls of the loop guard (``memstore.guard``): one row per idempotency
key of an app, with its execution state (one of ``EXECUTION_STATES``), the attempts started
and the first successful result (or the last failure's text). ``user_id`` is the user whose
call created or last started the record (``None`` when the caller named none; purge and export
by user then match the record through its ``tool_call_id``)."""

CONVERSATIONS_TABLE = "pydantic_ai_conversations"
ENTRIES_TABLE = "pydantic_ai_entries"
MAX_ENTRY_ID_CHARS = 128
MAX_SCOPE_CHARS = 255

conversations = _table(
    CONVERSATIONS_TABLE,
    sa.Column("conversation_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("scope", ExactString(MAX_SCOPE_CHARS), nullable=True),
    sa.Column("revision", ExactString(MAX_ENTRY_ID_CHARS), nullable=False),
    sa.Column("head_id", ExactString(MAX_ENTRY_ID_CHARS), nullable=True),
    sa.Column("record", long_text(), nullable=False),
    sa.Column("updated_at", timestamp(), nullable=False),
    sa.Index("ix_pydantic_ai_conversations_scope_updated_at", "scope", "updated_at"),
    sa.Index("ix_pydantic_ai_conversations_updated_at", "updated_at"),
)
"""pydantic-ai's per-conversation record (``memstore.adapters.pydantic_ai``): the revision the
compare-and-swap checks, the scope, the head entry, and the rest of the record as JSON (usage,
deferred tool requests, branches, fork origin)."""

conversation_entries = _table(
    ENTRIES_TABLE,
    sa.Column("app_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("entry_id", ExactString(MAX_ENTRY_ID_CHARS), primary_key=True),
    sa.Column("owner", ExactString(MAX_ID_CHARS), nullable=False),
    sa.Column("parent_id", ExactString(MAX_ENTRY_ID_CHARS), nullable=True),
    sa.Column("depth", sa.Integer(), nullable=False),
    sa.Column("first_row", sa.BigInteger(), nullable=False),
    sa.Column("last_row", sa.BigInteger(), nullable=False),
    sa.Column("row_count", sa.Integer(), nullable=False),
    sa.Index("ix_pydantic_ai_entries_entry_id", "entry_id"),
    sa.Index("ix_pydantic_ai_entries_app_id_depth", "app_id", "depth"),
    sa.Index("ix_pydantic_ai_entries_owner", "owner"),
)
"""Where each pydantic-ai conversation entry (one ``ModelMessage``) lives: the app whose
original history holds its rows (``first_row``..``last_row``, ``row_count`` rows), its parent
entry and its depth on the path from the first message. An entry may live in several apps
(a fork or a branch switch copies the rows of its path); ``owner`` is the conversation whose
delete removes the location."""

ADK_STATE_TABLE = "adk_state"
ADK_STATE_SCOPES = ("app", "user", "session")

adk_state = _table(
    ADK_STATE_TABLE,
    sa.Column("scope", sa.String(16), primary_key=True),
    sa.Column("app_name", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("user_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("session_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("history_app_id", ExactString(MAX_ID_CHARS), nullable=True),
    sa.Column("state", long_text(), nullable=False),
    sa.Column("revision", sa.Integer(), nullable=False),
    sa.Column("updated_at", timestamp(), nullable=False),
    sa.Index(
        "ix_adk_state_scope_app_name_user_id_updated_at",
        "scope",
        "app_name",
        "user_id",
        "updated_at",
    ),
)
"""Google ADK state (``memstore.adapters.google_adk``): one row per app (``user_id`` and
``session_id`` empty), per user of an app (``session_id`` empty) and per session, each with its
state as JSON; a session row also names the app id of its events in the original history and
carries the revision that ADK's stale-session check compares."""

GENERATION_TABLE = "chat_app_generation"

app_generation = _table(
    GENERATION_TABLE,
    sa.Column("app_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("stale_at_ms", sa.BigInteger, nullable=True),
    sa.Index("ix_chat_app_generation_stale_at_ms", "stale_at_ms"),
)
"""One row per app that was written to: the app's write lock and its generation. Every write
of the app (append, purge, repair, pop) raises the counter as its first statement, which locks
the row for the transaction, so writers of one app take turns: each then reads the app's newest
id and issues ids above it (``memstore.core.id_order``). An in-process window cache compares the
counter with the generation its window was built at, so a write by another process is never
missed. Never deleted (it holds no user data), so a counter never restarts and an old window can
never match again. ``stale_at_ms`` (the database's time, Unix milliseconds) is set when a
committed change of the app could not reach its Redis window, and cleared by the first instance
that dropped that window (:mod:`memstore.sql.staleness`); ``NULL`` otherwise."""

WORKER_LEASES_TABLE = "worker_leases"
MAX_HOLDER_CHARS = 255

worker_leases = _table(
    WORKER_LEASES_TABLE,
    sa.Column("worker_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("holder", ExactString(MAX_HOLDER_CHARS), nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    sa.Column("last_ms", sa.BigInteger, nullable=False),
)
"""One row per snowflake worker id ever leased (``MEMSTORE_WORKER_ID=auto``). ``expires_at_ms``
is in the database's own clock (Unix milliseconds), so the processes' clocks never decide
whether a lease lapsed; ``epoch`` rises on every claim and fences renewals and releases of an
earlier holder; ``last_ms`` is the newest millisecond the holders issued ids in (as of their
last renewal or release), which the next holder never issues below. Rows are never deleted."""
