"""History ids are the rowid on SQLite: chat_history_original.id and chat_history.id INTEGER.

A ``BIGINT PRIMARY KEY`` on SQLite is not the rowid: the table is a rowid table plus a second
b-tree on ``id``, both written on every insert. Declared ``INTEGER`` the key is the rowid
itself (signed 64-bit, as before), so each history insert writes one b-tree fewer and a
lookup by id reads the table directly. SQLite cannot change a primary key in place: both
tables are rebuilt (rows, ids and indexes kept). PostgreSQL and MariaDB are unchanged.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

HISTORY_TABLES = ("chat_history_original", "chat_history")


def _id_type(old: sa.types.TypeEngine[int], new: sa.types.TypeEngine[int]) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in HISTORY_TABLES:
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.alter_column("id", type_=new, existing_type=old, existing_nullable=False)


def upgrade() -> None:
    _id_type(sa.BigInteger(), sa.Integer())


def downgrade() -> None:
    _id_type(sa.Integer(), sa.BigInteger())
