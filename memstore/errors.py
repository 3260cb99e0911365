"""The exception hierarchy: every error memstore raises on purpose is a :class:`MemstoreError`.

Driver errors (SQLAlchemy, psycopg, PyMySQL, sqlite3) are wrapped in :class:`StorageError`,
classified by the driver's error code, so callers never need to catch a driver's exception
types. Errors never carry message text, payloads or SQL parameters: the driver exception stays
the ``__cause__`` only when its message cannot quote data (connection, authentication,
permission, missing schema, busy); otherwise the error is raised ``from None``. Redis errors
never surface: the cache degrades to SQL and logs a warning instead.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class MemstoreError(Exception):
    """Root of every error memstore raises on purpose.

    ``detail`` holds the human-readable explanation (also the ``str()`` of the error).
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with every field (kind, code, line...) rather than re-run through
        # ``__init__``, whose keyword-only fields plain exception pickling would drop or miss:
        # errors keep their type and fields across processes (``memstore reload --workers``).
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[MemstoreError], args: tuple[Any, ...], fields: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(fields)
    return error


class ConfigurationError(MemstoreError):
    """A setting is missing, malformed or out of range (bad URL, worker id outside 0-1023...)."""


class InvalidInputError(MemstoreError):
    """Input was rejected before anything was written; the store is unchanged."""


class InvalidAppIdError(InvalidInputError):
    """An app id (or user id) is empty, too long, or contains control characters."""


class InvalidMessageError(InvalidInputError):
    """A message is malformed: unknown type, wrong field types, invalid unicode, NUL bytes."""


class MessageTooLargeError(InvalidMessageError):
    """A text or arguments field exceeds ``Settings.max_text_bytes``, or a message's metadata
    ``Settings.max_metadata_bytes`` (UTF-8 bytes).

    ``size`` is the field's size in UTF-8 bytes and ``limit`` the limit it broke (``None``
    when not known).
    """

    def __init__(self, detail: str, *, size: int | None = None, limit: int | None = None) -> None:
        super().__init__(detail)
        self.size = size
        self.limit = limit


class UnknownToolCallError(InvalidInputError):
    """A tool result answers a call id that no earlier tool request of the app carries.

    Rejecting it at write time means no durable orphan is ever created.
    """


class InvalidRetentionError(InvalidInputError):
    """A prune was asked with no rule, a negative ``older_than`` or a ``keep_last`` below 1."""


class ImportRecordError(InvalidInputError):
    """A record given to ``import_records`` (or a line of an export file) is not valid.

    ``line`` is the record's 1-based position in the input (the file's line number) and
    ``field`` the offending field when one is to blame. The detail never quotes message text.
    Nothing of the batch holding the record was written.
    """

    def __init__(self, detail: str, *, line: int, field: str | None = None) -> None:
        super().__init__(f"record {line}: {detail}")
        self.line = line
        self.field = field


class SummarizerError(MemstoreError):
    """The ``summarize`` function of a compaction raised, or returned something other than a
    non-empty ``str``. Nothing was written; the function's own exception is ``__cause__``
    (the text names only its class, never message text)."""


class CompactionConflictError(MemstoreError):
    """Another compaction of the app stored a summary while this one was summarizing; this
    summary would not chain from it, so it was not written. Run the compaction again."""


class StreamProtocolError(InvalidInputError):
    """A stream collector got a chunk or call it cannot take in this state: an unknown or
    malformed chunk, a result for a call id never requested or reported twice, text while
    tools still await their results, a call on a closed turn. The collector's buffered state is
    unchanged by the failing call, and nothing was written for it."""


class IncompleteToolCallError(StreamProtocolError):
    """A streamed tool call is not complete: its arguments are not (yet) a strict JSON object,
    or its id or name never arrived. Nothing is repaired or guessed.

    ``index`` and ``call_id`` name the call (``call_id`` is ``None`` when no id arrived).
    """

    def __init__(self, detail: str, *, index: int, call_id: str | None) -> None:
        super().__init__(detail)
        self.index = index
        self.call_id = call_id


class ClockMovedBackwardsError(MemstoreError):
    """The system clock stepped back further than the snowflake generator may wait out."""


class WorkerLeaseError(MemstoreError):
    """A leased snowflake worker id (``MEMSTORE_WORKER_ID=auto``) could not be held; no id
    was issued and nothing was written."""


class WorkerIdsExhaustedError(WorkerLeaseError):
    """Every worker id (0-1023) is leased by a live holder. ``soonest_expiry_seconds`` tells
    when the first lease lapses (by the database's clock) unless its holder renews it."""

    def __init__(self, detail: str, *, soonest_expiry_seconds: float) -> None:
        super().__init__(detail)
        self.soonest_expiry_seconds = soonest_expiry_seconds


class WorkerLeaseLostError(WorkerLeaseError):
    """The store's lease may have lapsed (the process was paused, or the database could not be
    reached to renew it) and could not be renewed or replaced in time; no id was issued."""


class StorageError(MemstoreError):
    """The SQL database failed (connection, constraint, timeout). Nothing was committed,
    except for the subclass :class:`CommitOutcomeUnknownError` (the outcome is not known).

    ``kind`` names the classified failure (``"connection failed"``, ``"authentication
    failed"``, ``"value rejected"``, ``"database busy"``...; see the errors table), ``code`` the
    driver's SQLSTATE or MySQL error number when there is one, ``driver_error`` the driver
    exception's class name. None of them, nor the message, contains stored data.
    """

    def __init__(
        self,
        detail: str,
        *,
        kind: str | None = None,
        code: str | None = None,
        driver_error: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.code = code
        self.driver_error = driver_error


class CommitOutcomeUnknownError(StorageError):
    """The connection to the database server was lost while a write's ``COMMIT`` was under way
    (a network blip, a proxy or PgBouncer restart, a backend killed mid-commit): the server may
    have committed the write or not. Never raised on SQLite, whose commits do not travel.

    Before this reaches the caller the app's cached window is dropped (or, when Redis cannot
    be reached, the app is stamped stale in SQL), so no instance serves a window that may miss
    the write. ``app_id`` names the app and ``ids`` the original-history ids the write would
    have (one per message). Do not retry blindly, which may store the turn twice: pass the
    error back, ``store.append(app_id, messages, retry_of=error)``, which finds out whether it
    was committed (waiting for the server to finish it) and writes the messages only if not.
    """

    def __init__(
        self,
        detail: str,
        *,
        kind: str | None = None,
        code: str | None = None,
        driver_error: str | None = None,
        app_id: str | None = None,
        ids: tuple[int, ...] = (),
    ) -> None:
        super().__init__(detail, kind=kind, code=code, driver_error=driver_error)
        self.app_id = app_id
        self.ids = ids


class IdCollisionError(StorageError):
    """A snowflake id was already taken: two processes share a worker id. Appends retry with
    fresh ids before this reaches the caller; set a distinct ``MEMSTORE_WORKER_ID`` per process.
    """


class SchemaError(StorageError):
    """The database schema is missing or not at the migration head; run ``store.migrate()``."""


class EncryptionError(MemstoreError):
    """Encryption at rest (``MEMSTORE_ENCRYPTION_KEYS``) could not seal or open a value."""


class DecryptionError(EncryptionError):
    """A stored value failed to decrypt: its ciphertext was altered, or it was copied from
    another row, app or column (the app id, row key and column are bound as associated data),
    or the key under its key id is not the key that sealed it. Never wrong plaintext.

    ``key_id`` names the key id the value was sealed under (``None`` when the envelope itself
    is malformed)."""

    def __init__(self, detail: str, *, key_id: str | None = None) -> None:
        super().__init__(detail)
        self.key_id = key_id


class UnknownKeyError(DecryptionError):
    """A stored value was sealed under a key id that is not among the configured keys (or
    encryption is off). ``key_id`` names it: add that key to ``MEMSTORE_ENCRYPTION_KEYS``
    (after the current first key) to read the value."""


class FormatConversionError(InvalidMessageError):
    """A message cannot be converted to or from a provider format (``memstore.formats``).

    Raised for an unknown role or message type, a missing or mistyped field, an unknown key,
    content the canonical model cannot hold (images, thinking blocks...) or a canonical message
    the format cannot express (Anthropic tool arguments that are not a JSON object).
    ``provider`` names the format (``"openai"``, ``"anthropic"``, ``"langchain4j"``) and
    ``index`` the position of the offending message in the list given (``-1`` when the list
    itself, or the Anthropic ``system`` parameter, is malformed).
    """

    def __init__(self, detail: str, *, provider: str, index: int) -> None:
        super().__init__(detail)
        self.provider = provider
        self.index = index


class MissingExtraError(ConfigurationError, ImportError):
    """A feature was used without the extra that installs what it needs: the async store
    without greenlet, a database URL whose driver is missing, an adapter without its framework,
    encryption without cryptography, OpenTelemetry export without its API.

    ``extra`` names the extra (``"async"``, ``"langchain"``; two joined by a comma when both are
    needed) and ``install`` the exact command that adds it (``pip install 'memstore[async]'``),
    which also ends the message. It is also an :class:`ImportError`, so ``except ImportError``
    around an optional import keeps working.
    """

    def __init__(self, detail: str, *, extra: str, install: str) -> None:
        super().__init__(detail)
        self.extra = extra
        self.install = install


def describe_validation_error(error: ValidationError, *, unnamed: str = "") -> str:
    """``field.path: problem; ...`` for the detail of the typed error that replaces ``error``;
    ``unnamed`` labels problems of the whole object (an empty location)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or unnamed}: {item['msg']}"
        for item in error.errors(include_url=False)
    )
