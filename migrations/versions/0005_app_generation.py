"""Per-app write lock and generation counter: chat_app_generation.

Every write of an app raises the app's counter as its first statement, which locks the row for
the transaction: writers of one app take turns, each reading the app's newest id and issuing ids
above it, so an app's ids follow the order its messages were written whatever the writers'
clocks. The in-process window cache checks the counter on read so that a write of another
process is never missed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString

revision = "0005"
down_revision = "0004"
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
