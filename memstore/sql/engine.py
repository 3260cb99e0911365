"""Engine creation and driver-error translation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from memstore.errors import IdCollisionError, SchemaError, StorageError

_MISSING_TABLE_HINTS = ("no such table", "does not exist", "doesn't exist", "undefinedtable")


def sqlite_options(url: URL, **connect_args: Any) -> dict[str, Any]:
    """Engine options for a SQLite URL: a 30 s lock timeout, one shared connection in memory."""
    options: dict[str, Any] = {"connect_args": {"timeout": 30, **connect_args}}
    if _in_memory(url):
        options["poolclass"] = StaticPool
    return options


def install_sqlite_pragmas(engine: Engine, url: URL) -> None:
    """WAL (file databases) and a busy timeout on every new connection, so several processes
    can write to one file."""
    in_memory = _in_memory(url)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()


def _in_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:")


def make_engine(url: str) -> Engine:
    """An engine with settings that suit memstore on each database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, **sqlite_options(parsed, check_same_thread=False))
    install_sqlite_pragmas(engine, parsed)
    return engine


@contextmanager
def translated_errors(action: str) -> Iterator[None]:
    """Re-raise driver errors as :class:`StorageError` (or :class:`SchemaError`)."""
    try:
        yield
    except IntegrityError as error:
        # The history tables have no unique key but the snowflake primary key, so an
        # integrity error on insert means another process issued the same id.
        raise IdCollisionError(
            f"{action} failed: a row id is already taken (give every process writing to this "
            f"database its own MEMSTORE_WORKER_ID): {error}"
        ) from error
    except SQLAlchemyError as error:
        text = str(error).lower()
        if any(hint in text for hint in _MISSING_TABLE_HINTS):
            raise SchemaError(
                f"{action} failed: memstore's tables are missing; run store.migrate() or "
                "`memstore migrate` first"
            ) from error
        raise StorageError(f"{action} failed: {type(error).__name__}: {error}") from error
