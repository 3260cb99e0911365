"""Durable stale-window records: chat_app_generation.stale_at_ms.

A write whose Redis window update was skipped (Redis unreachable from the writer) stamps its
app's row with the database's time; every instance with a Redis cache polls the stamped rows,
drops those apps' windows and clears the stamp (see memstore.sql.staleness).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chat_app_generation", sa.Column("stale_at_ms", sa.BigInteger(), nullable=True))
    op.create_index("ix_chat_app_generation_stale_at_ms", "chat_app_generation", ["stale_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_chat_app_generation_stale_at_ms", table_name="chat_app_generation")
    op.drop_column("chat_app_generation", "stale_at_ms")
