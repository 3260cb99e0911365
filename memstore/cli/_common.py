"""What every command of the ``memstore`` command line shares: exit codes, the common
options, opening the store and the confirmation prompt."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from memstore.cache.memory_cache import NoWindowCache
from memstore.cli._output import terminal_safe
from memstore.config import Settings
from memstore.errors import ConfigurationError
from memstore.sql import admin
from memstore.store import MemoryStore

audit = logging.getLogger("memstore.audit")

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2

_F = TypeVar("_F", bound=Callable[..., object])


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
missing_ok_option = click.option(
    "--missing-ok", is_flag=True, help="Accept an APP_ID that has no rows (else exit 1)."
)
all_option = click.option("--all", "all_apps", is_flag=True, help="Every app with history.")
yes_option = click.option("--yes", is_flag=True, help="Do not ask; required without a terminal.")


def json_option(help: str) -> Callable[[_F], _F]:
    """``--json`` (``as_json``) with the command's own help text."""
    return click.option("--json", "as_json", is_flag=True, help=help)


@dataclass(frozen=True)
class Target:
    """The store a command acts on (``--database-url``, ``--redis-url``) and whether an
    APP_ID without rows is accepted there (``--missing-ok``)."""

    database_url: str | None
    redis_url: str | None
    missing_ok: bool

    def open(self) -> MemoryStore:
        """The store, as :func:`_open` opens it."""
        return _open(self.database_url, self.redis_url)

    def require_known(self, store: MemoryStore, apps: list[str] | None) -> None:
        """:func:`_require_known` with this command's ``--missing-ok``."""
        _require_known(store, apps, self.missing_ok)


def store_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--missing-ok``, ``--database-url`` and ``--redis-url``, the options of a command that
    acts on named apps of the configured store: the command gets them as one
    ``store_target: Target`` argument."""

    @functools.wraps(command)
    def with_target(
        *, missing_ok: bool, database_url: str | None, redis_url: str | None, **options: Any
    ) -> None:
        command(store_target=Target(database_url, redis_url, missing_ok), **options)

    return missing_ok_option(database_option(redis_option(with_target)))


def _open(database_url: str | None, redis_url: str | None) -> MemoryStore:
    settings = _settings(database_url, redis_url)
    _require_existing_sqlite(settings.database_url)
    if settings.redis_url:
        return MemoryStore(settings)
    # Without Redis the windows live in the service's own process: a window this command
    # built would die with it (and `reload --all` would hold every app's window in memory).
    return MemoryStore(settings, cache=NoWindowCache())


def _require_existing_sqlite(database_url: str) -> None:
    """Commands other than ``migrate`` and ``demo`` never create a database: a SQLite path
    that does not exist (a typo, another folder) is named instead of becoming an empty file."""
    from sqlalchemy.engine import make_url

    from memstore.sql.engine import is_memory_sqlite

    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or is_memory_sqlite(url) or url.database is None:
        return
    path = url.database
    if path.startswith("file:"):
        return  # a URI: SQLite's own options decide
    if not os.path.exists(path):
        raise ConfigurationError(
            f"no SQLite database at {path!r}; create it with `memstore migrate`"
        )


def _require_known(store: MemoryStore, apps: list[str] | None, missing_ok: bool) -> None:
    """An explicit APP_ID with no rows at all is a typo until told otherwise: name it and
    exit 1 before doing anything (``--missing-ok`` accepts it)."""
    if missing_ok or not apps:
        return
    unknown = admin.unknown_apps(store.engine, apps)
    if unknown:
        names = ", ".join(terminal_safe(repr(app)) for app in unknown)
        click.echo(f"no rows for app id(s) {names}; pass --missing-ok to accept that", err=True)
        raise SystemExit(EXIT_FINDINGS)


def _confirm(yes: bool, verb: str, question: str) -> None:
    """Ask ``question`` on the terminal unless ``yes``; without a terminal refuse to ``verb``.
    Either refusal exits 1."""
    if yes:
        return
    if not sys.stdin.isatty():
        click.echo(f"refusing to {verb} without a terminal; pass --yes", err=True)
        raise SystemExit(EXIT_FINDINGS)
    if not click.confirm(question, err=True):
        raise SystemExit(EXIT_FINDINGS)
