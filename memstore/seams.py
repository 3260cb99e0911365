"""The one seam to dependencies' internals (issue 28: private attributes in one module).

memstore reaches below the public API of SQLAlchemy, aiosqlite and redis-py in a few fast
paths, each measured to pay (see docs/benchmarks.md). Every such use is here, named after
what it does, with a fallback on the public API for when a release removes or renames the
private attribute: the fast path then degrades to the slower public one, it never breaks.
``tests/unit/test_seams.py`` checks each private attribute on the installed versions, so a
release that changes one turns CI red instead of silently taking the fallback.

A leaf module: it imports no other memstore module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import PoolProxiedConnection

# -- SQLAlchemy ---------------------------------------------------------------------------------


def has_events(engine: Engine) -> bool:
    """Whether ``engine`` or its dialect has event listeners (``Engine._has_events``,
    ``Dialect._has_events``), which a DBAPI-level fast path would skip. Fallback: True (so
    the fast path is not taken)."""
    return bool(
        getattr(engine, "_has_events", True) or getattr(engine.dialect, "_has_events", True)
    )


def bind_processors(compiled: Any, dialect: Any) -> dict[str, Callable[[Any], Any]]:
    """The bind-parameter processors of a compiled statement, by parameter name
    (``Compiled._bind_processors``); fallback: each bind's public
    ``type.bind_processor(dialect)`` (the same processors for memstore's own statements,
    whose parameter names need no escaping)."""
    private = getattr(compiled, "_bind_processors", None)
    if private is not None:
        return dict(private)
    processors = {}
    for name, bind in compiled.binds.items():
        processor = bind.type.bind_processor(dialect)
        if processor is not None:
            processors[name] = processor
    return processors


def invalidate_pool(engine: Engine, fairy: PoolProxiedConnection, error: BaseException) -> None:
    """After a disconnect on ``fairy``: invalidate it and every pooled connection of its
    generation (what Core does on a disconnect; ``Pool._invalidate``). Fallback: invalidate
    ``fairy`` alone (the others are found dead at their next checkout's ping)."""
    invalidate = getattr(engine.pool, "_invalidate", None)
    if invalidate is None:
        fairy.invalidate(error)
    else:
        invalidate(fairy, error)


def raise_checkout_error(error: BaseException, engine: Engine) -> NoReturn:
    """Raise what Core raises for a driver error while connecting (translated, and
    invalidating the pool on a disconnect: ``Connection._handle_dbapi_exception_noconnection``).
    Fallback: the ``DBAPIError`` Core would build, without the pool invalidation."""
    handle = getattr(Connection, "_handle_dbapi_exception_noconnection", None)
    if handle is not None:
        handle(error, engine.dialect, engine)
    dbapi_error = engine.dialect.loaded_dbapi.Error
    raise DBAPIError.instance(None, None, error, dbapi_error, dialect=engine.dialect) from error


def release_idle(fairy: PoolProxiedConnection) -> bool:
    """Return ``fairy`` to the pool without the reset round trip (no transaction is open on
    it: ``_ConnectionFairy._close_special(transaction_reset=True)``); False when this
    SQLAlchemy has no such path (then close it normally)."""
    close_special = getattr(fairy, "_close_special", None)
    if close_special is None:
        return False
    close_special(transaction_reset=True)
    return True


def adapted_error(adapted: Any, error: Exception) -> None:
    """Raise the dialect's DBAPI exception for a driver ``error`` raised on the async
    adaptation ``adapted`` (``AsyncAdapt_*_connection._handle_exception``); returns (and the
    caller re-raises ``error``) when this SQLAlchemy has no such hook."""
    handle = getattr(adapted, "_handle_exception", None)
    if handle is not None:
        handle(error)


# -- aiosqlite ----------------------------------------------------------------------------------


def aiosqlite_runs_functions() -> bool:
    """Whether this aiosqlite can run a function on a connection's thread
    (``Connection._execute``); without it memstore uses aiosqlite's public API."""
    import aiosqlite

    return callable(getattr(aiosqlite.Connection, "_execute", None))


def aiosqlite_sqlite3(driver: Any) -> Any:
    """The ``sqlite3`` connection under an aiosqlite connection (``Connection._conn``), or
    ``None``."""
    return getattr(driver, "_conn", None)


def aiosqlite_on_thread(driver: Any) -> Callable[..., Awaitable[Any]] | None:
    """``run(fn, *args)``: call ``fn(sqlite3_connection, *args)`` on the aiosqlite
    connection's own thread, in one hop (``Connection._execute``); ``None`` when this
    aiosqlite cannot (then use its public per-statement API)."""
    execute = getattr(driver, "_execute", None)
    connection = aiosqlite_sqlite3(driver)
    if execute is None or connection is None:
        return None

    def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return execute(fn, connection, *args, **kwargs)  # type: ignore[no-any-return]

    return run


# -- Google ADK -----------------------------------------------------------------------------------


def adk_update_marker(session: Any) -> str | None:
    """The revision marker ADK's stale-session check compares (``Session._storage_update_marker``,
    as ADK's own database service sets it); ``None`` when the session has none."""
    return getattr(session, "_storage_update_marker", None)


def set_adk_update_marker(session: Any, marker: str) -> None:
    """Set the marker :func:`adk_update_marker` reads (on a pydantic model that forbids
    unknown attributes, a release without the field, it is simply not kept)."""
    with contextlib.suppress(AttributeError, ValueError):
        session._storage_update_marker = marker


# -- redis-py -----------------------------------------------------------------------------------


async def redis_send(connection: Any, packed: list[bytes]) -> None:
    """Write a packed command on an asyncio redis-py connection: straight to its stream
    (``Connection._writer``), which spares a task per call; fallback: the public
    ``send_packed_command``."""
    writer = getattr(connection, "_writer", None)
    if writer is None:
        await connection.send_packed_command(packed, check_health=False)
    else:
        writer.writelines(packed)
        await writer.drain()
