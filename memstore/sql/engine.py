"""Engine creation and driver-error translation.

A URL without a driver gets the one memstore's extra installs (``sqlite`` -> the standard
library's sqlite3, ``postgresql`` -> psycopg 3, ``mysql``/``mariadb`` -> PyMySQL); an explicit
synchronous driver is kept. A driver that is not installed raises
:class:`~memstore.errors.MissingExtraError` naming the extra, never the driver's ImportError.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, make_url
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
from memstore.errors import (
    CommitOutcomeUnknownError,
    ConfigurationError,
    IdCollisionError,
    SchemaError,
    StorageError,
)
from memstore.extras import missing_extra

POOL_TIMEOUT_SECONDS = 30
PING_AFTER_IDLE_SECONDS = 2.0
"""A pooled connection idle at least this long is pinged when checked out (a server round
trip); one used more recently is handed out as is, and a read or write that still finds it
dead is retried once on a fresh connection (see :func:`read_retrying`)."""

T = TypeVar("T")

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
    if is_memory_sqlite(url):
        options["poolclass"] = AsyncAdaptedQueuePool if is_async else QueuePool
        options["pool_size"] = 1
        options["max_overflow"] = 0
        options["pool_timeout"] = POOL_TIMEOUT_SECONDS
    return options


def install_sqlite_pragmas(engine: Engine, url: URL) -> None:
    """WAL (file databases) and a busy timeout on every new connection, so several processes
    can write to one file."""
    in_memory = is_memory_sqlite(url)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()


def is_memory_sqlite(url: URL | str) -> bool:
    """Whether ``url`` names a SQLite database that lives in memory (``sqlite://``,
    ``:memory:``, or a ``file:`` URI with ``mode=memory``): one connection's (or one process's)
    alone."""
    url = make_url(url)
    if url.get_backend_name() != "sqlite":
        return False
    return url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"


def install_idle_ping(engine: Engine, idle_seconds: float = PING_AFTER_IDLE_SECONDS) -> None:
    """Ping a pooled connection at checkout when it sat idle ``idle_seconds`` or longer.

    ``pool_pre_ping`` pings on every checkout: one extra round trip per read, the largest
    single cost of a short indexed query. Stale connections (a restarted server, an idle
    timeout, a failover) are found on connections that sat in the pool; a connection that was
    just used is pinged by its own next statement, and the callers retry once when that
    statement finds it dead (:func:`read_retrying`, :func:`write_retrying`). A failed ping
    makes the pool drop the connection and connect anew, as ``pool_pre_ping`` does.
    """
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _stamp(_dbapi_connection: Any, record: Any) -> None:
        record.info["memstore_checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("memstore_checked_in")
        if since is None or time.monotonic() - since < idle_seconds:
            return
        try:
            alive = dialect.do_ping(dbapi_connection)
        except Exception:
            alive = False
        if not alive:
            raise DisconnectionError("stale pooled connection")


def is_dead_connection(error: BaseException) -> bool:
    """Whether ``error`` says the connection is gone (SQLAlchemy invalidated it), so the same
    work may run again on a fresh connection."""
    return isinstance(error, DBAPIError) and bool(error.connection_invalidated)


def read_retrying(engine: Engine, work: Callable[[Connection], T], **options: Any) -> T:
    """Run the read-only ``work`` on a pooled connection; once more on a fresh one when the
    first finds its connection dead. ``options``: execution options of the connection."""
    try:
        with engine.connect().execution_options(**options) as conn:
            return work(conn)
    except DBAPIError as error:
        if not is_dead_connection(error):
            raise
    with engine.connect().execution_options(**options) as conn:
        return work(conn)


def dbapi_retrying(work: Callable[[], T]) -> T:
    """:func:`read_retrying` for a read that checks out its own connection (see
    :mod:`memstore.sql.fastread`): once more when it found its connection dead."""
    try:
        return work()
    except DBAPIError as error:
        if not is_dead_connection(error):
            raise
    return work()


class CommitInDoubt(Exception):
    """A write's ``COMMIT`` failed on a lost connection to a database server, which may have
    committed it; ``ids`` are the ids the write issued. :func:`translated_errors` turns it
    into :class:`~memstore.errors.CommitOutcomeUnknownError`."""

    def __init__(self, error: SQLAlchemyError, ids: tuple[int, ...]) -> None:
        super().__init__("commit outcome unknown")
        self.error = error
        self.ids = ids


def commit_failed(dialect_name: str, error: SQLAlchemyError, issued: Sequence[int]) -> Exception:
    """What a failed ``COMMIT`` raises: the error itself when the outcome is known (the server
    answered; SQLite's commits never leave the process), else :class:`CommitInDoubt` with the
    ``issued`` ids."""
    if dialect_name == "sqlite":
        return error
    lost = is_dead_connection(error) or classify(driver_failure(error)) is FailureKind.CONNECTION
    return CommitInDoubt(error, tuple(issued)) if lost else error


def no_ids(_result: object) -> Sequence[int]:
    return ()


def write_retrying(
    engine: Engine,
    work: Callable[[Connection], T],
    issued: Callable[[T], Sequence[int]] = no_ids,
) -> T:
    """Run ``work`` in one transaction; once more when a statement before the commit finds
    the connection dead (the server dropped the transaction with it, so nothing was written).
    A failure of the commit itself is never retried: on a lost connection its outcome is
    unknown (:class:`CommitInDoubt`, with the ids ``issued`` reads off the work's result)."""
    for attempt in (1, 2):
        with engine.connect() as conn:
            transaction = conn.begin()
            try:
                result = work(conn)
            except DBAPIError as error:
                if attempt == 1 and is_dead_connection(error):
                    continue
                raise
            try:
                transaction.commit()
            except SQLAlchemyError as error:
                raise commit_failed(engine.dialect.name, error, issued(result)) from error
            return result
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """``engine.begin()`` for a write: rolled back on any error, and a commit whose connection
    is lost raises :class:`CommitInDoubt` (outcome unknown), not an error that means "not
    written" (see :func:`commit_failed`)."""
    with engine.connect() as conn:
        transaction = conn.begin()
        try:
            yield conn
        except BaseException:
            if transaction.is_active:
                transaction.rollback()
            raise
        try:
            transaction.commit()
        except SQLAlchemyError as error:
            raise commit_failed(engine.dialect.name, error, ()) from error


def read_options(engine: Engine) -> dict[str, Any]:
    """Execution options for one-statement reads: autocommit on PostgreSQL, where it saves
    the ``BEGIN`` and ``ROLLBACK`` round trips (psycopg switches it client-side; a single
    statement sees one snapshot either way). Elsewhere none: SQLite sends no ``BEGIN`` for a
    read, and MySQL drivers would spend a round trip switching autocommit."""
    return {"isolation_level": "AUTOCOMMIT"} if engine.dialect.name == "postgresql" else {}


DEFAULT_SYNC_DRIVERS = {
    "sqlite": "pysqlite",
    "postgresql": "psycopg",
    "mysql": "pymysql",
    "mariadb": "pymysql",
}
"""The driver a URL without one gets (the one the ``postgres`` / ``mysql`` extra installs)."""
ASYNC_ONLY_DRIVERS = frozenset({"aiosqlite", "asyncpg", "psycopg_async", "asyncmy", "aiomysql"})

DRIVER_EXTRAS: dict[str, tuple[str, ...]] = {
    "psycopg": ("postgres",),
    "pymysql": ("mysql",),
    "aiosqlite": ("async",),
    "asyncmy": ("async",),
    "asyncpg": ("asyncpg",),
}
"""Driver -> the extras that install it."""


def sync_url(url: str | URL) -> URL:
    """``url`` with a synchronous driver: an explicit one is kept; none, or an asyncio one
    (an :class:`~memstore.aio.AsyncMemoryStore`'s URL), becomes :data:`DEFAULT_SYNC_DRIVERS`'."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    explicit = "+" in parsed.drivername
    if explicit and parsed.get_driver_name() not in ASYNC_ONLY_DRIVERS:
        return parsed
    driver = DEFAULT_SYNC_DRIVERS.get(backend)
    if driver is None:
        raise ConfigurationError(f"no synchronous driver known for the {backend!r} database")
    if parsed.get_driver_name() == "asyncpg":
        parsed = parsed.set(query=_psycopg_query(parsed.query))
    return parsed.set(drivername=f"{backend}+{driver}")


ASYNCPG_ONLY_OPTIONS = frozenset(
    {
        "prepared_statement_cache_size",
        "prepared_statement_name_func",
        "statement_cache_size",
        "max_cached_statement_lifetime",
        "max_cacheable_statement_size",
        "command_timeout",
    }
)
"""URL options of SQLAlchemy's asyncpg dialect (and asyncpg's own) that psycopg does not know:
the sync twin of an asyncpg store leaves them out."""
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _psycopg_query(query: Any) -> dict[str, Any]:
    """An asyncpg URL's options as psycopg takes them: asyncpg-only ones left out, ``ssl``
    (asyncpg's spelling) as ``sslmode`` (``true`` meaning ``require``)."""
    out: dict[str, Any] = {}
    for key, value in query.items():
        if key in ASYNCPG_ONLY_OPTIONS:
            continue
        if key == "ssl":
            if "sslmode" in query:
                continue  # psycopg's own spelling wins
            mode = str(value).lower()
            mode = {"true": "require", "1": "require", "false": "disable", "0": "disable"}.get(
                mode, mode
            )
            if mode not in _SSL_MODES:
                raise ConfigurationError(
                    f"ssl={value!r} of an asyncpg URL has no psycopg sslmode; use one of "
                    f"{', '.join(_SSL_MODES)}"
                )
            out["sslmode"] = mode
            continue
        out[key] = value
    return out


@contextmanager
def driver_imports(url: URL, feature: str) -> Iterator[None]:
    """Turn the ImportError of a driver that is not installed (raised when an engine for
    ``url`` is created) into :class:`~memstore.errors.MissingExtraError` naming the extra that
    installs it, or :class:`~memstore.errors.ConfigurationError` for a driver no extra
    installs. ``feature`` says what needed it (``"MemoryStore"``, ``"AsyncMemoryStore"``)."""
    try:
        yield
    except ImportError as error:
        if isinstance(error, ConfigurationError):
            raise
        driver = url.get_driver_name()
        what = f"{feature} on a {url.drivername}:// URL"
        extras = DRIVER_EXTRAS.get(driver)
        if extras is not None:
            raise missing_extra(what, extras, error) from error
        raise ConfigurationError(
            f"{what} needs the {driver!r} driver, which is not installed (importing "
            f"{error.name!r} failed); install it, or use a driver memstore's extras install: "
            "postgresql+psycopg:// (memstore[postgres]), mysql+pymysql:// (memstore[mysql]); "
            "for AsyncMemoryStore sqlite+aiosqlite:// or mysql+asyncmy:// (memstore[async]), "
            "postgresql+asyncpg:// (memstore[asyncpg])"
        ) from error


def make_engine(url: str) -> Engine:
    """An engine with settings that suit memstore on each database (see the module
    docstring for the driver a URL gets)."""
    parsed = sync_url(url)
    with driver_imports(parsed, "MemoryStore"):
        if parsed.get_backend_name() != "sqlite":
            engine = create_engine(parsed, **ENGINE_OPTIONS)
            install_idle_ping(engine)
            return engine
        options = sqlite_options(parsed, check_same_thread=False)
        engine = create_engine(parsed, **ENGINE_OPTIONS, **options)
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
    except CommitInDoubt as doubt:
        known = storage_error(action, doubt.error)
        unknown = CommitOutcomeUnknownError(
            f"{known.detail} (while committing: the outcome is unknown)",
            kind=known.kind,
            code=known.code,
            driver_error=known.driver_error,
            ids=doubt.ids,
        )
        if keeps_cause(known, doubt.error):
            raise unknown from doubt.error
        raise unknown from None
    except SQLAlchemyError as error:
        replacement = storage_error(action, error)
        if keeps_cause(replacement, error):
            raise replacement from error
        raise replacement from None
