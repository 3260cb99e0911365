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
MESSAGE_TYPES = ("user", "ai", "toolExecutionRequest", "toolExecutionResult", "system")
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


original = sa.Table(
    ORIGINAL_TABLE,
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
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
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
"""The full history: one row per message, ``payload`` the message's canonical JSON."""

display = sa.Table(
    DISPLAY_TABLE,
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
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
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
"""The display history: what a person saw (user messages, AI replies with tool summaries)."""

EXECUTIONS_TABLE = "tool_executions"
EXECUTION_STATES = ("pending", "running", "succeeded", "failed", "unknown")
MAX_IDEMPOTENCY_KEY_CHARS = 255
MAX_TOOL_NAME_CHARS = 255

tool_executions = sa.Table(
    EXECUTIONS_TABLE,
    metadata,
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
    sa.Index("ix_tool_executions_state_updated_at", "state", "updated_at"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
"""Side-effecting tool calls of the loop guard (``memstore.guard``): one row per idempotency
key of an app, with its execution state (one of ``EXECUTION_STATES``), the attempts started
and the first successful result (or the last failure's text)."""

GENERATION_TABLE = "chat_app_generation"

app_generation = sa.Table(
    GENERATION_TABLE,
    metadata,
    sa.Column("app_id", ExactString(MAX_ID_CHARS), primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
)
"""One counter per app, raised by every transaction that changes the app's original history
(append, purge, repair, pop). An in-process window cache compares it with the generation its
window was built at, so a write by another process is never missed. Never deleted, so a
counter never restarts and an old window can never match again."""
