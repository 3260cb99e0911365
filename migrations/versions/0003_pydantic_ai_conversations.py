"""pydantic-ai conversation records and entry locations.

``pydantic_ai_conversations``: one row per conversation of
``memstore.adapters.pydantic_ai.MemstoreConversationStore`` (revision, scope, head, the rest of
the record as JSON). ``pydantic_ai_entries``: where each stored message (entry) lives in the
original history.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString, long_text, timestamp

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "pydantic_ai_conversations",
        sa.Column("conversation_id", ExactString(128), nullable=False),
        sa.Column("scope", ExactString(255), nullable=True),
        sa.Column("revision", ExactString(128), nullable=False),
        sa.Column("head_id", ExactString(128), nullable=True),
        sa.Column("record", long_text(), nullable=False),
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_pydantic_ai_conversations"),
        **_MYSQL,
    )
    op.create_index(
        "ix_pydantic_ai_conversations_scope_updated_at",
        "pydantic_ai_conversations",
        ["scope", "updated_at"],
    )
    op.create_index(
        "ix_pydantic_ai_conversations_updated_at", "pydantic_ai_conversations", ["updated_at"]
    )
    op.create_table(
        "pydantic_ai_entries",
        sa.Column("app_id", ExactString(128), nullable=False),
        sa.Column("entry_id", ExactString(128), nullable=False),
        sa.Column("owner", ExactString(128), nullable=False),
        sa.Column("parent_id", ExactString(128), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("first_row", sa.BigInteger(), nullable=False),
        sa.Column("last_row", sa.BigInteger(), nullable=False),
        sa.Column("row_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("app_id", "entry_id", name="pk_pydantic_ai_entries"),
        **_MYSQL,
    )
    op.create_index("ix_pydantic_ai_entries_entry_id", "pydantic_ai_entries", ["entry_id"])
    op.create_index(
        "ix_pydantic_ai_entries_app_id_depth", "pydantic_ai_entries", ["app_id", "depth"]
    )
    op.create_index("ix_pydantic_ai_entries_owner", "pydantic_ai_entries", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_pydantic_ai_entries_owner", table_name="pydantic_ai_entries")
    op.drop_index("ix_pydantic_ai_entries_app_id_depth", table_name="pydantic_ai_entries")
    op.drop_index("ix_pydantic_ai_entries_entry_id", table_name="pydantic_ai_entries")
    op.drop_table("pydantic_ai_entries")
    op.drop_index("ix_pydantic_ai_conversations_updated_at", table_name="pydantic_ai_conversations")
    op.drop_index(
        "ix_pydantic_ai_conversations_scope_updated_at", table_name="pydantic_ai_conversations"
    )
    op.drop_table("pydantic_ai_conversations")
