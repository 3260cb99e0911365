"""Google ADK app, user and session state: adk_state.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString, long_text, timestamp

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}
_INDEX = "ix_adk_state_scope_app_name_user_id_updated_at"


def upgrade() -> None:
    op.create_table(
        "adk_state",
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("app_name", ExactString(128), nullable=False),
        sa.Column("user_id", ExactString(128), nullable=False),
        sa.Column("session_id", ExactString(128), nullable=False),
        sa.Column("history_app_id", ExactString(128), nullable=True),
        sa.Column("state", long_text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "app_name", "user_id", "session_id", name="pk_adk_state"),
        **_MYSQL,
    )
    op.create_index(_INDEX, "adk_state", ["scope", "app_name", "user_id", "updated_at"])


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="adk_state")
    op.drop_table("adk_state")
