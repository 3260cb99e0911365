"""Per-app generation counter: chat_app_generation.

Every transaction that changes an app's original history raises the app's counter; the
in-process window cache checks it on read so that a write of another process is never missed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_app_generation",
        sa.Column("app_id", ExactString(128), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("app_id", name="pk_chat_app_generation"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    op.drop_table("chat_app_generation")
