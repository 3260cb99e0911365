"""The user of each loop-guard record: tool_executions.user_id.

Purge and export by user find a user's loop-guard records (tool results included) by this
column. Existing records get the user of the tool-result rows that answer their call id, when
exactly one user (and no row without a user) answered it in the app; the others stay NULL and
are matched through their call id at purge and export time (see memstore.sql.admin).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memstore.sql.schema import ExactString

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_executions = sa.table(
    "tool_executions",
    sa.column("app_id"),
    sa.column("tool_call_id"),
    sa.column("user_id"),
)
_original = sa.table(
    "chat_history_original",
    sa.column("app_id"),
    sa.column("tool_call_id"),
    sa.column("user_id"),
)


def _answers(*columns: sa.ColumnElement[object]) -> sa.Select[tuple[object, ...]]:
    """The original rows answering the record's call id in its app."""
    return sa.select(*columns).where(
        _original.c.app_id == _executions.c.app_id,
        _original.c.tool_call_id == _executions.c.tool_call_id,
    )


def upgrade() -> None:
    op.add_column("tool_executions", sa.Column("user_id", ExactString(128), nullable=True))
    op.create_index("ix_tool_executions_user_id", "tool_executions", ["user_id"])
    owner = _answers(sa.func.min(_original.c.user_id)).scalar_subquery()
    single_owner = sa.and_(
        _answers(sa.func.min(_original.c.user_id)).scalar_subquery()
        == _answers(sa.func.max(_original.c.user_id)).scalar_subquery(),
        # COUNT(user_id) skips NULLs: equal counts mean no answering row lacks a user
        _answers(sa.func.count()).scalar_subquery()
        == _answers(sa.func.count(_original.c.user_id)).scalar_subquery(),
    )
    op.execute(
        _executions.update()
        .where(
            _executions.c.user_id.is_(None),
            _executions.c.tool_call_id.is_not(None),
            single_owner,
        )
        .values(user_id=owner)
    )


def downgrade() -> None:
    op.drop_index("ix_tool_executions_user_id", table_name="tool_executions")
    op.drop_column("tool_executions", "user_id")
