"""Classifying database failures by driver error code, never by the text of a statement.

Pure: :func:`classify` takes what :mod:`memstore.sql.engine` read off a driver exception
(the database family, the SQLSTATE or error number, the driver's own message) and decides
which memstore error it is and whether the driver's message may be shown. A driver's message
can quote row data ("Key (id)=(...)", "invalid byte sequence ... 0x00", a JSON token), so it
is shown only for kinds whose messages name servers, users, databases or tables and never a
value: connection, authentication, permission, missing schema, busy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class FailureKind(str, Enum):
    MISSING_SCHEMA = "missing schema"
    DUPLICATE_KEY = "duplicate key"
    CONSTRAINT = "constraint violated"
    DATA = "value rejected"
    CONNECTION = "connection failed"
    AUTHENTICATION = "authentication failed"
    PERMISSION = "permission denied"
    BUSY = "database busy"
    OTHER = "database error"


# Kinds whose driver messages name things (hosts, users, tables), never row values.
SAFE_MESSAGE_KINDS = frozenset(
    {
        FailureKind.MISSING_SCHEMA,
        FailureKind.CONNECTION,
        FailureKind.AUTHENTICATION,
        FailureKind.PERMISSION,
        FailureKind.BUSY,
    }
)

_PG_CODES = {
    "42P01": FailureKind.MISSING_SCHEMA,  # undefined_table
    "42703": FailureKind.MISSING_SCHEMA,  # undefined_column
    "3F000": FailureKind.MISSING_SCHEMA,  # invalid_schema_name
    "23505": FailureKind.DUPLICATE_KEY,  # unique_violation
    "3D000": FailureKind.CONNECTION,  # invalid_catalog_name: the database does not exist
    "28000": FailureKind.AUTHENTICATION,  # invalid_authorization_specification (unknown role)
    "28P01": FailureKind.AUTHENTICATION,  # invalid_password
    "42501": FailureKind.PERMISSION,  # insufficient_privilege
    "40001": FailureKind.BUSY,  # serialization_failure
    "40P01": FailureKind.BUSY,  # deadlock_detected
    "55P03": FailureKind.BUSY,  # lock_not_available
    "57014": FailureKind.BUSY,  # query_canceled (statement timeout)
}
_PG_CLASSES = {
    "08": FailureKind.CONNECTION,
    "57": FailureKind.CONNECTION,  # operator intervention: shutdown, cannot connect now
    "53": FailureKind.CONNECTION,  # insufficient resources (too many connections, disk full)
    "22": FailureKind.DATA,
    "23": FailureKind.CONSTRAINT,
}
_MYSQL_CODES = {
    1146: FailureKind.MISSING_SCHEMA,  # ER_NO_SUCH_TABLE
    1054: FailureKind.MISSING_SCHEMA,  # ER_BAD_FIELD_ERROR
    1062: FailureKind.DUPLICATE_KEY,  # ER_DUP_ENTRY
    1049: FailureKind.CONNECTION,  # ER_BAD_DB_ERROR: unknown database
    1040: FailureKind.CONNECTION,  # too many connections
    2002: FailureKind.CONNECTION,  # cannot connect through the socket
    2003: FailureKind.CONNECTION,  # cannot connect to the server
    2005: FailureKind.CONNECTION,  # unknown host
    2006: FailureKind.CONNECTION,  # server has gone away
    2013: FailureKind.CONNECTION,  # lost connection during a query
    2055: FailureKind.CONNECTION,  # lost connection (system error)
    1045: FailureKind.AUTHENTICATION,  # ER_ACCESS_DENIED_ERROR
    1698: FailureKind.AUTHENTICATION,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR
    1044: FailureKind.PERMISSION,  # ER_DBACCESS_DENIED_ERROR
    1142: FailureKind.PERMISSION,  # table command denied
    1143: FailureKind.PERMISSION,  # column command denied
    1205: FailureKind.BUSY,  # lock wait timeout
    1213: FailureKind.BUSY,  # deadlock
    1406: FailureKind.DATA,  # data too long
    1366: FailureKind.DATA,  # incorrect string value
    1264: FailureKind.DATA,  # out of range
    1048: FailureKind.CONSTRAINT,  # column cannot be null
    1452: FailureKind.CONSTRAINT,  # foreign key
    4025: FailureKind.CONSTRAINT,  # CHECK constraint (MariaDB)
    3819: FailureKind.CONSTRAINT,  # CHECK constraint (MySQL)
}
# SQLite has no codes for these in the sqlite3 module of every supported Python; its messages
# start with fixed words and never quote values, and only the message's start is matched.
_SQLITE_PREFIXES = (
    ("no such table", FailureKind.MISSING_SCHEMA),
    ("no such column", FailureKind.MISSING_SCHEMA),
    ("unique constraint failed", FailureKind.DUPLICATE_KEY),
    ("database is locked", FailureKind.BUSY),
    ("database table is locked", FailureKind.BUSY),
    ("unable to open database", FailureKind.CONNECTION),
    ("string or blob too big", FailureKind.DATA),
    ("not null constraint failed", FailureKind.CONSTRAINT),
    ("check constraint failed", FailureKind.CONSTRAINT),
    ("foreign key constraint failed", FailureKind.CONSTRAINT),
)

_SECRETS = (
    (re.compile(r"(?i)\b(password|passwd|pwd)\s*=\s*\S+"), r"\1=***"),
    (re.compile(r"(://[^:/@\s]+):[^@\s]+@"), r"\1:***@"),
)
MAX_MESSAGE_CHARS = 400


@dataclass(frozen=True, slots=True)
class DriverFailure:
    """What is known about one failure, read off the driver's exception."""

    family: str
    """``"postgresql"``, ``"mysql"``, ``"sqlite"`` or ``"other"``."""
    code: str | None
    """The SQLSTATE (PostgreSQL) or error number (MySQL/MariaDB) as text, if any."""
    message: str
    """The driver's own message (not SQLAlchemy's, which adds the statement)."""
    driver_class: str
    """The driver exception's class name (``UniqueViolation``, ``OperationalError``...)."""
    is_operational: bool = False
    """The driver raised an ``OperationalError`` (PostgreSQL: no SQLSTATE means the
    connection itself failed)."""


def classify(failure: DriverFailure) -> FailureKind:
    """The kind of ``failure``, from its code (PostgreSQL, MySQL) or message start (SQLite)."""
    if failure.family == "postgresql":
        if failure.code is None:
            return FailureKind.CONNECTION if failure.is_operational else FailureKind.OTHER
        return _PG_CODES.get(failure.code) or _PG_CLASSES.get(failure.code[:2], FailureKind.OTHER)
    if failure.family == "mysql":
        if failure.code is None or not failure.code.isdigit():
            return FailureKind.OTHER
        number = int(failure.code)
        if 2000 <= number < 3000 and number not in _MYSQL_CODES:
            return FailureKind.CONNECTION  # client-side errors: the connection failed
        return _MYSQL_CODES.get(number, FailureKind.OTHER)
    if failure.family == "sqlite":
        start = failure.message.lstrip().lower()
        for prefix, kind in _SQLITE_PREFIXES:
            if start.startswith(prefix):
                return kind
    return FailureKind.OTHER


def shown_message(failure: DriverFailure, kind: FailureKind) -> str | None:
    """The driver's message as it may appear in an error, or ``None`` when it could quote
    data. Whitespace is collapsed, passwords are masked and the length is capped."""
    if kind not in SAFE_MESSAGE_KINDS:
        return None
    text = " ".join(failure.message.split())
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return text


def describe(action: str, failure: DriverFailure, kind: FailureKind) -> str:
    """``"<action> failed: <kind> [<driver class> <code>]: <safe message or advice>"``."""
    code = f" {failure.code}" if failure.code else ""
    head = f"{action} failed: {kind.value} [{failure.driver_class}{code}]"
    if kind is FailureKind.MISSING_SCHEMA:
        advice = (
            "memstore's tables are missing or outdated; run store.migrate() or `memstore migrate`"
        )
        return f"{head}: {shown_message(failure, kind)} ({advice})"
    if kind is FailureKind.DUPLICATE_KEY:
        return (
            f"{head}: a row id is already taken (give every process writing to this database "
            "its own MEMSTORE_WORKER_ID)"
        )
    safe = shown_message(failure, kind)
    if safe is not None:
        return f"{head}: {safe}"
    return f"{head} (the driver's message is withheld because it may quote stored data)"
