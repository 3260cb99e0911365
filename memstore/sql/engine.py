"""Engine creation and driver-error translation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import AsyncAdaptedQueuePool, QueuePool

from memstore.core.db_errors import (
    SAFE_MESSAGE_KINDS,
    DriverFailure,
    FailureKind,
    classify,
    describe,
)
from memstore.errors import IdCollisionError, SchemaError, StorageError

POOL_TIMEOUT_SECONDS = 30

# Every engine memstore creates: never put bound parameters (chat text, payloads, user ids)
# into exception messages or SQL logs.
ENGINE_OPTIONS: dict[str, Any] = {"hide_parameters": True}


def sqlite_options(url: URL, *, is_async: bool = False, **connect_args: Any) -> dict[str, Any]:
    """Engine options for a SQLite URL: a 30 s lock timeout; in memory, one connection.

    A ``:memory:`` database lives and dies with its one connection, so every thread and task
    must share it; a pool of exactly one connection hands it to one user at a time (the others
    wait up to ``POOL_TIMEOUT_SECONDS``), so transactions of different threads or tasks never
    interleave on it. A shared connection without that (``StaticPool``) crashes the sqlite3
    module when threads use it at once.
    """
    options: dict[str, Any] = {"connect_args": {"timeout": 30, **connect_args}}
    if _in_memory(url):
        options["poolclass"] = AsyncAdaptedQueuePool if is_async else QueuePool
        options["pool_size"] = 1
        options["max_overflow"] = 0
        options["pool_timeout"] = POOL_TIMEOUT_SECONDS
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
        return create_engine(url, pool_pre_ping=True, **ENGINE_OPTIONS)
    engine = create_engine(url, **ENGINE_OPTIONS, **sqlite_options(parsed, check_same_thread=False))
    install_sqlite_pragmas(engine, parsed)
    return engine


def driver_failure(error: SQLAlchemyError) -> DriverFailure:
    """Read the family, code and driver message off a SQLAlchemy error (never its
    statement or parameters)."""
    orig = error.orig if isinstance(error, DBAPIError) else None
    if orig is None:
        return DriverFailure("other", None, "", type(error).__name__)
    module = type(orig).__module__
    family = "other"
    code: object = None
    if module.startswith(("psycopg", "asyncpg")) or "asyncpg" in type(orig).__qualname__:
        family = "postgresql"
        code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    elif module.startswith(("pymysql", "asyncmy", "aiomysql", "MySQLdb", "mysql")):
        family = "mysql"
        code = orig.args[0] if orig.args and isinstance(orig.args[0], int) else None
    elif module.startswith(("sqlite3", "aiosqlite")):
        family = "sqlite"
    if family == "mysql" and len(orig.args) > 1:
        message = str(orig.args[1])
    else:
        message = str(orig.args[0]) if orig.args else ""
    return DriverFailure(
        family=family,
        code=None if code is None else str(code),
        message=message,
        driver_class=type(orig).__name__,
        is_operational=type(orig).__name__ == "OperationalError",
    )


def storage_error(action: str, error: SQLAlchemyError) -> StorageError:
    """The memstore error for a SQLAlchemy error raised while doing ``action``."""
    if isinstance(error, (PoolTimeoutError, DisconnectionError)) and not isinstance(
        error, DBAPIError
    ):
        # SQLAlchemy's own pool messages name sizes and timeouts, never data.
        return StorageError(
            f"{action} failed: {FailureKind.CONNECTION.value} [{type(error).__name__}]: "
            + " ".join(str(error).split("(Background")[0].split()),
            kind=FailureKind.CONNECTION.value,
            driver_error=type(error).__name__,
        )
    failure = driver_failure(error)
    kind = classify(failure)
    detail = describe(action, failure, kind)
    error_type: type[StorageError] = StorageError
    if kind is FailureKind.MISSING_SCHEMA:
        error_type = SchemaError
    elif kind is FailureKind.DUPLICATE_KEY:
        # The history tables have no unique key but the snowflake primary key, so a duplicate
        # key on insert means another process issued the same id.
        error_type = IdCollisionError
    return error_type(detail, kind=kind.value, code=failure.code, driver_error=failure.driver_class)


def keeps_cause(error: StorageError, cause: SQLAlchemyError) -> bool:
    """Whether the driver exception may stay attached: its message cannot quote data, and
    SQLAlchemy left the statement's parameters out of it (engines memstore creates hide
    them; an engine passed in may not)."""
    hidden = getattr(cause, "hide_parameters", False) or getattr(cause, "params", None) is None
    return hidden and any(error.kind == kind.value for kind in SAFE_MESSAGE_KINDS)


@contextmanager
def translated_errors(action: str) -> Iterator[None]:
    """Re-raise driver errors as :class:`StorageError` (or :class:`SchemaError`,
    :class:`IdCollisionError`), classified by the driver's error code.

    The driver exception stays the ``__cause__`` only when its message cannot quote stored
    data (connection, authentication, permission, missing schema, busy); otherwise the error
    is raised ``from None`` so tracebacks and logs never print it (the code and the driver's
    class name are in the message and on the error).
    """
    try:
        yield
    except SQLAlchemyError as error:
        replacement = storage_error(action, error)
        if keeps_cause(replacement, error):
            raise replacement from error
        raise replacement from None
