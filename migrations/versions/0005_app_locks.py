"""Per-app write locks: memstore_app_locks.

Every write of an app locks the app's row for its transaction, then reads the app's newest id
and issues ids above it, so the ids of one app follow the order its messages were written
whatever the clocks of the writing processes.

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

_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "memstore_app_locks",
        sa.Column("app_id", ExactString(128), nullable=False),
        sa.PrimaryKeyConstraint("app_id", name="pk_memstore_app_locks"),
        **_MYSQL,
    )


def downgrade() -> None:
    op.drop_table("memstore_app_locks")
