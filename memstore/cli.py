"""The ``memstore`` command line (also ``python -m memstore``)."""

from __future__ import annotations

import sys

import click

from memstore import __version__
from memstore.config import Settings
from memstore.errors import MemstoreError
from memstore.store import MemoryStore

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


def _settings(database_url: str | None, redis_url: str | None) -> Settings:
    overrides: dict[str, str] = {}
    if database_url:
        overrides["database_url"] = database_url
    if redis_url:
        overrides["redis_url"] = redis_url
    return Settings.from_env(None, **overrides)


database_option = click.option(
    "--database-url", envvar="MEMSTORE_DATABASE_URL", help="SQLAlchemy URL (MEMSTORE_DATABASE_URL)."
)
redis_option = click.option(
    "--redis-url", envvar="MEMSTORE_REDIS_URL", help="Redis URL (MEMSTORE_REDIS_URL)."
)


@click.group()
@click.version_option(__version__, prog_name="memstore")
def cli() -> None:
    """memstore: chat memory for tool-calling agents that survives restarts."""


@cli.command()
@click.option(
    "--database-url",
    default=None,
    help="Run the story on this database instead of a throwaway SQLite file.",
)
def demo(database_url: str | None) -> None:
    """Show an agent turn with tool calls surviving a restart that loses the cache."""
    from memstore.demo import run_demo

    run_demo(database_url)


@cli.command()
@click.argument("action", type=click.Choice(["upgrade", "downgrade", "current"]), default="upgrade")
@click.argument("revision", required=False)
@database_option
def migrate(action: str, revision: str | None, database_url: str | None) -> None:
    """Bring the schema to head (default), downgrade to REVISION, or print the current one."""
    from memstore.sql import migrate as migrations

    store = MemoryStore(_settings(database_url, None))
    try:
        if action == "current":
            click.echo(migrations.current_revision(store.engine) or "none")
        elif action == "downgrade":
            if not revision:
                raise click.UsageError("downgrade needs a REVISION (e.g. base)")
            migrations.downgrade(store.engine, revision)
            click.echo(f"downgraded to {revision}")
        else:
            migrations.upgrade(store.engine, revision or "head")
            click.echo(f"upgraded to {migrations.current_revision(store.engine)}")
    finally:
        store.close()


def main() -> None:
    """Console-script entry point: typed memstore errors become exit code 2 on stderr."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FINDINGS)
    except click.ClickException as error:
        error.show()
        sys.exit(EXIT_USAGE)
    except MemstoreError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK)
