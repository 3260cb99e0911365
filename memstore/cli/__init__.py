"""The ``memstore`` command line (also ``python -m memstore``).

This module builds the ``memstore`` group from the command modules (one per command group)
and holds the console-script entry point; the modules below it never import it.
"""

from __future__ import annotations

import logging
import sys

import click

from memstore._version import __version__
from memstore.cli._bulk import Skipped, Terminated
from memstore.cli._common import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    audit,
    database_option,
    missing_ok_option,
    redis_option,
)
from memstore.cli._output import PROVIDER_FORMATS, terminal_safe
from memstore.cli.history import _count_windows, check, show, stats
from memstore.cli.maintenance import migrate, prune, purge, rekey
from memstore.cli.service import demo, health, workers
from memstore.cli.transfer import IMPORT_SOURCES, export_command, import_command
from memstore.cli.windows import reload
from memstore.errors import MemstoreError

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_OK",
    "EXIT_USAGE",
    "IMPORT_SOURCES",
    "PROVIDER_FORMATS",
    "Skipped",
    "Terminated",
    "_count_windows",
    "audit",
    "check",
    "cli",
    "database_option",
    "demo",
    "export_command",
    "health",
    "import_command",
    "main",
    "migrate",
    "missing_ok_option",
    "prune",
    "purge",
    "redis_option",
    "rekey",
    "reload",
    "show",
    "stats",
    "terminal_safe",
    "workers",
]


@click.group()
@click.version_option(__version__, prog_name="memstore")
def cli() -> None:
    """memstore: chat memory for tool-calling agents that survives restarts."""


for command in (
    demo,
    migrate,
    show,
    reload,
    check,
    purge,
    stats,
    workers,
    health,
    prune,
    export_command,
    import_command,
    rekey,
):
    cli.add_command(command)
del command


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name, level in (("memstore", logging.WARNING), ("memstore.audit", logging.INFO)):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = False


def main() -> None:
    """Console-script entry point: typed memstore errors become exit code 2 on stderr."""
    _configure_logging()
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
