"""Compaction summaries: an index to find an app's newest summary row.

Summary rows live in ``chat_history_original`` with ``message_type = 'summary'`` (no new
column: the covered id range is in the row's payload). Every window read looks up the app's
newest summary; the ``(app_id, message_type, id)`` index makes that one lookup whatever the
size of the app.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_chat_history_original_app_id_message_type_id",
        "chat_history_original",
        ["app_id", "message_type", "id"],
    )


def downgrade() -> None:
    op.drop_index(
        "ix_chat_history_original_app_id_message_type_id", table_name="chat_history_original"
    )
