"""The loop guard's side-effect executions: tool_executions.

One row per (app, idempotency key) of a side-effecting tool call, with its execution state
(pending, running, succeeded, failed, unknown), so a side effect that succeeded is never run
again, and one left running or unknown after a crash waits for a person.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString, long_text, timestamp

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "tool_executions",
        sa.Column("app_id", ExactString(128), nullable=False),
        sa.Column("idempotency_key", ExactString(255), nullable=False),
        sa.Column("tool_name", ExactString(255), nullable=False),
        sa.Column("arguments_digest", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("tool_call_id", ExactString(255), nullable=True),
        sa.Column("result", long_text(), nullable=True),
        sa.Column("created_at", timestamp(), nullable=False),
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("app_id", "idempotency_key", name="pk_tool_executions"),
        **_MYSQL,
    )
    op.create_index(
        "ix_tool_executions_state_updated_at", "tool_executions", ["state", "updated_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_tool_executions_state_updated_at", table_name="tool_executions")
    op.drop_table("tool_executions")
