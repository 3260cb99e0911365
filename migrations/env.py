"""Alembic environment for memstore.

memstore runs migrations itself (``MemoryStore.migrate()`` / ``memstore migrate``) and hands
its connection over in ``config.attributes["connection"]``; a plain ``alembic`` call works
too, with ``sqlalchemy.url`` or ``MEMSTORE_DATABASE_URL`` set.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from memstore.sql.migrate import compare_options
from memstore.sql.schema import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,
        **compare_options(),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or os.environ.get(
        "MEMSTORE_DATABASE_URL", "sqlite:///memstore.db"
    )
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
