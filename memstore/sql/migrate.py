"""Run the Alembic migrations that ship with memstore, on a connection memstore owns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from memstore.errors import ConfigurationError
from memstore.sql.engine import translated_errors


def migrations_dir() -> Path:
    """Where the migration scripts are: inside the installed package, or the source checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigurationError("memstore's migration scripts are missing from this installation")


_BOOLEAN_LITERALS = {"0": False, "false": False, "1": True, "true": True}


def _boolean_literal(rendered: str | None) -> bool | None:
    if rendered is None:
        return None
    return _BOOLEAN_LITERALS.get(rendered.strip().strip("()").strip("'\"").lower())


def compare_server_default(
    context: MigrationContext,
    inspected_column: Any,
    metadata_column: sa.Column[Any],
    inspected_default: str | None,
    metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """Alembic's server-default comparison, with boolean defaults compared by value.

    MySQL/MariaDB have no boolean type: ``BOOLEAN`` is ``TINYINT(1)`` and a ``false()`` default
    is stored and reflected as ``'0'`` while the metadata renders ``false``, so alembic would
    report a change that is none. Both sides are read as booleans here; every other column (and
    a boolean default that is not a plain literal) goes to alembic's own comparison (``None``).
    """
    if isinstance(metadata_column.type, sa.Boolean):
        inspected = _boolean_literal(inspected_default)
        rendered = _boolean_literal(rendered_metadata_default)
        if inspected is not None and rendered is not None:
            return inspected != rendered
    return None


def compare_options() -> dict[str, Any]:
    """How autogenerate compares the live schema with ``schema.metadata``: column types and
    server defaults. ``migrations/env.py`` and the schema test both use it."""
    return {"compare_type": True, "compare_server_default": compare_server_default}


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to ``revision``."""
    with translated_errors("migrating"), engine.begin() as connection:
        upgrade_connection(connection, revision)


def upgrade_connection(connection: Connection, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` inside the caller's transaction (the async store
    runs this through ``AsyncConnection.run_sync``)."""
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the schema down to ``revision`` (``"base"`` drops every memstore table)."""
    config = alembic_config()
    with translated_errors("migrating"), engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def revisions_undone(current: str | None, target: str) -> list[tuple[str, str]]:
    """The revisions a downgrade from ``current`` to ``target`` undoes, newest first, each
    with the first line of its description. Raises
    :class:`~memstore.errors.ConfigurationError` for a ``target`` that is not an older
    revision of this line (``"base"`` undoes every one)."""
    script = ScriptDirectory.from_config(alembic_config())
    if target != "base":
        try:
            script.get_revision(target)
        except Exception:  # alembic's own errors for an unknown or ambiguous revision
            raise ConfigurationError(f"unknown revision {target!r}") from None
    undone: list[tuple[str, str]] = []
    revision = script.get_revision(current) if current else None
    while revision is not None and revision.revision != target:
        doc = (revision.doc or "").strip().splitlines()
        undone.append((revision.revision, doc[0] if doc else ""))
        down = revision.down_revision
        revision = script.get_revision(down) if isinstance(down, str) else None
    if target != "base" and (revision is None or revision.revision != target):
        raise ConfigurationError(f"{target!r} is not older than the current revision")
    return undone


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or ``None`` when it was never migrated."""
    with translated_errors("reading the schema revision"), engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    """The newest revision this installation ships."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
