"""Leased snowflake worker ids: worker_leases.

One row per worker id ever leased (``MEMSTORE_WORKER_ID=auto``, the default): its holder, a
fencing epoch raised on every claim, the expiry in the database's clock and the newest
millisecond its holders issued ids in.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker_leases",
        sa.Column("worker_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("holder", ExactString(255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name="pk_worker_leases"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    op.drop_table("worker_leases")
