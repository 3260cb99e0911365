"""The two history tables: chat_history (display) and chat_history_original (full).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString, long_text, timestamp

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "chat_history_original",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("app_id", ExactString(128), nullable=False),
        sa.Column("user_id", ExactString(128), nullable=True),
        sa.Column("message_type", sa.String(32), nullable=False),
        sa.Column("tool_call_id", ExactString(255), nullable=True),
        sa.Column("payload", long_text(), nullable=False),
        sa.Column("created_at", timestamp(), nullable=False),
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.Column("is_deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("id", name="pk_chat_history_original"),
        **_MYSQL,
    )
    op.create_index("ix_chat_history_original_app_id_id", "chat_history_original", ["app_id", "id"])
    op.create_index("ix_chat_history_original_user_id", "chat_history_original", ["user_id"])
    op.create_table(
        "chat_history",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("app_id", ExactString(128), nullable=False),
        sa.Column("user_id", ExactString(128), nullable=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", long_text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="ok"),
        sa.Column("created_at", timestamp(), nullable=False),
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.Column("is_deleted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("id", name="pk_chat_history"),
        **_MYSQL,
    )
    op.create_index("ix_chat_history_app_id_id", "chat_history", ["app_id", "id"])
    op.create_index("ix_chat_history_user_id", "chat_history", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_chat_history_user_id", table_name="chat_history")
    op.drop_index("ix_chat_history_app_id_id", table_name="chat_history")
    op.drop_table("chat_history")
    op.drop_index("ix_chat_history_original_user_id", table_name="chat_history_original")
    op.drop_index("ix_chat_history_original_app_id_id", table_name="chat_history_original")
    op.drop_table("chat_history_original")
