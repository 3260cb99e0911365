"""The export format (``memstore-export``, JSON Lines) and the import decision. Pure, no I/O.

One JSON object per line. The first is the header; then one record per row of the original
history, the display history and the loop guard's records, ids and timestamps kept::

    {"record": "header", "format": "memstore-export", "version": 1, "exported_at": "..."}
    {"record": "original", "id": 1, "app_id": "a", "user_id": "u", "created_at": "...",
     "updated_at": "...", "deleted": false, "message": {"type": "user", "text": "hi", ...}}
    {"record": "display", "id": 2, "app_id": "a", "user_id": "u", "role": "user", "text": "hi",
     "status": "ok", "created_at": "...", "updated_at": "...", "deleted": false}
    {"record": "tool_execution", "app_id": "a", "idempotency_key": "...", "tool_name": "...",
     "arguments_digest": "...", "state": "succeeded", "attempts": 1, "tool_call_id": "...",
     "user_id": "u", "result": "...", "created_at": "...", "updated_at": "..."}

Timestamps are ISO 8601 in UTC. ``message`` is the stored message exactly as memstore's
message model dumps it (``arguments`` stays the model's raw JSON string).

A compaction's summary row is an ``original`` record like any other (version 1 needs no new
field or record kind): its ``message`` is a system message whose ``metadata`` holds
``"memstore_summary": {"first_id": ..., "last_id": ..., "messages": ...}``. Import recognizes
that key and stores the row with ``message_type`` ``summary``, so the imported app's windows
open with the same summary. (A reader older than compaction imports it as a plain system
message.) Readers accept every
version up to :data:`FORMAT_VERSION` and refuse newer ones; a version adds fields or record
kinds, and an importer of that version still reads all older files. Version 2 added the
``user_id`` of ``tool_execution`` records (absent in version 1: imported as ``null``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memstore.core.crypto import DISPLAY_CONTENT, EXECUTION_RESULT, ORIGINAL_PAYLOAD, RowCipher
from memstore.core.inputs import check_messages, normalize_app_id
from memstore.core.rows import encode_payload, message_type, open_content
from memstore.errors import ImportRecordError, InvalidAppIdError, InvalidInputError
from memstore.messages import MESSAGE_ADAPTER, Message, ToolResult

FORMAT_NAME = "memstore-export"
FORMAT_VERSION = 2
ORIGINAL = "original"
DISPLAY = "display"
TOOL_EXECUTION = "tool_execution"
HEADER = "header"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _stamp(value: datetime) -> str:
    return _utc(value).astimezone(timezone.utc).isoformat(timespec="microseconds")


def header_record(exported_at: datetime, version: str) -> dict[str, Any]:
    return {
        "record": HEADER,
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "exported_at": _stamp(exported_at),
        "memstore_version": version,
    }


def original_record(row: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """The record of one ``chat_history_original`` row (``message``: its decoded payload)."""
    return {
        "record": ORIGINAL,
        "id": row["id"],
        "app_id": row["app_id"],
        "user_id": row["user_id"],
        "created_at": _stamp(row["created_at"]),
        "updated_at": _stamp(row["updated_at"]),
        "deleted": bool(row["is_deleted"]),
        "message": message.model_dump(mode="json"),
    }


def display_record(row: Mapping[str, Any], cipher: RowCipher) -> dict[str, Any]:
    """The record of one ``chat_history`` row (its text opened by ``cipher``)."""
    return {
        "record": DISPLAY,
        "id": row["id"],
        "app_id": row["app_id"],
        "user_id": row["user_id"],
        "role": row["role"],
        "text": open_content(cipher, row["app_id"], row["id"], row["content"]),
        "status": row["status"],
        "created_at": _stamp(row["created_at"]),
        "updated_at": _stamp(row["updated_at"]),
        "deleted": bool(row["is_deleted"]),
    }


EXECUTION_FIELDS = (
    "app_id",
    "idempotency_key",
    "tool_name",
    "arguments_digest",
    "state",
    "attempts",
    "tool_call_id",
    "user_id",
    "result",
)


def execution_record(row: Mapping[str, Any], cipher: RowCipher) -> dict[str, Any]:
    """The record of one ``tool_executions`` row (its result opened by ``cipher``)."""
    out: dict[str, Any] = {"record": TOOL_EXECUTION}
    out.update({name: row[name] for name in EXECUTION_FIELDS})
    out["result"] = open_result(cipher, row["app_id"], row["idempotency_key"], row["result"])
    out["created_at"] = _stamp(row["created_at"])
    out["updated_at"] = _stamp(row["updated_at"])
    return out


# --- reading records ---------------------------------------------------------------------------


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class _Header(_Record):
    record: Literal["header"]
    format: str
    version: int
    exported_at: datetime | None = None
    memstore_version: str | None = None


class _Original(_Record):
    record: Literal["original"]
    id: int = Field(ge=0)
    app_id: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    deleted: bool = False
    message: dict[str, Any]


class _Display(_Record):
    record: Literal["display"]
    id: int = Field(ge=0)
    app_id: str
    user_id: str | None
    role: Literal["user", "ai"]
    text: str
    status: str = Field(max_length=16)
    created_at: datetime
    updated_at: datetime
    deleted: bool = False


class _Execution(_Record):
    record: Literal["tool_execution"]
    app_id: str
    idempotency_key: str = Field(min_length=1, max_length=255)
    tool_name: str = Field(min_length=1, max_length=255)
    arguments_digest: str = Field(max_length=64)
    state: Literal["pending", "running", "succeeded", "failed", "unknown"]
    attempts: int = Field(ge=0)
    tool_call_id: str | None = Field(default=None, max_length=255)
    user_id: str | None = None
    result: str | None = None
    created_at: datetime
    updated_at: datetime


_MODELS: dict[str, type[_Record]] = {
    HEADER: _Header,
    ORIGINAL: _Original,
    DISPLAY: _Display,
    TOOL_EXECUTION: _Execution,
}


@dataclass(frozen=True, slots=True)
class ImportRow:
    """One validated record: the table it belongs to and its full column dict."""

    line: int
    table: str
    """``ORIGINAL``, ``DISPLAY`` or ``TOOL_EXECUTION``."""
    app_id: str
    values: dict[str, Any]

    @property
    def key(self) -> Any:
        if self.table == TOOL_EXECUTION:
            return (self.app_id, self.values["idempotency_key"])
        return self.values["id"]


def _problem(error: ValidationError) -> tuple[str, str | None]:
    """What is wrong, naming fields and error kinds only (never the values)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or None
    return f"{where or 'record'}: {first['type']}", where


def check_header(data: object, line: int) -> None:
    """The first record must be a header of a format and version this reader knows."""
    if not isinstance(data, dict) or data.get("record") != HEADER:
        raise ImportRecordError(f"the first record must be a {FORMAT_NAME} header", line=line)
    try:
        header = _Header.model_validate(data)
    except ValidationError as error:
        detail, where = _problem(error)
        raise ImportRecordError(f"bad header: {detail}", line=line, field=where) from None
    if header.format != FORMAT_NAME:
        raise ImportRecordError(f"not a {FORMAT_NAME} file", line=line, field="format")
    if not 1 <= header.version <= FORMAT_VERSION:
        raise ImportRecordError(
            f"format version {header.version} is not supported (this memstore reads 1 to "
            f"{FORMAT_VERSION})",
            line=line,
            field="version",
        )


def parse_record(data: object, line: int, max_text_bytes: int) -> ImportRow | None:
    """Validate one record after the header; ``None`` for a further header (files joined)."""
    if not isinstance(data, dict):
        raise ImportRecordError("a record must be a JSON object", line=line)
    model = _MODELS.get(str(data.get("record")))
    if model is None:
        raise ImportRecordError("unknown record kind", line=line, field="record")
    try:
        parsed = model.model_validate(data)
    except ValidationError as error:
        detail, where = _problem(error)
        raise ImportRecordError(detail, line=line, field=where) from None
    if isinstance(parsed, _Header):
        check_header(data, line)
        return None
    assert isinstance(parsed, (_Original, _Display, _Execution))
    app_id = _identifier(parsed.app_id, "app_id", line)
    if isinstance(parsed, _Original):
        return _original_row(parsed, app_id, line, max_text_bytes)
    if isinstance(parsed, _Display):
        values = {
            "id": parsed.id,
            "app_id": app_id,
            "user_id": _user(parsed.user_id, line),
            "role": parsed.role,
            "content": parsed.text,
            "status": parsed.status,
            "created_at": _utc(parsed.created_at),
            "updated_at": _utc(parsed.updated_at),
            "is_deleted": parsed.deleted,
        }
        return ImportRow(line, DISPLAY, app_id, values)
    assert isinstance(parsed, _Execution)
    values = {name: getattr(parsed, name) for name in EXECUTION_FIELDS}
    values.update(
        app_id=app_id,
        user_id=_user(parsed.user_id, line),
        created_at=_utc(parsed.created_at),
        updated_at=_utc(parsed.updated_at),
    )
    return ImportRow(line, TOOL_EXECUTION, app_id, values)


def _identifier(value: str, name: str, line: int) -> str:
    try:
        return normalize_app_id(value, what=name)
    except InvalidAppIdError:
        raise ImportRecordError(f"{name} is not a valid id", line=line, field=name) from None


def _user(value: str | None, line: int) -> str | None:
    return None if value is None else _identifier(value, "user_id", line)


def _original_row(parsed: _Original, app_id: str, line: int, max_text_bytes: int) -> ImportRow:
    try:
        message = MESSAGE_ADAPTER.validate_python(parsed.message)
        check_messages([message], max_text_bytes)
    except ValidationError as error:
        detail, _ = _problem(error)
        raise ImportRecordError(f"message: {detail}", line=line, field="message") from None
    except InvalidInputError as error:  # the store's own limits (sizes, NUL bytes...)
        raise ImportRecordError(
            f"message rejected ({type(error).__name__})", line=line, field="message"
        ) from None
    values = {
        "id": parsed.id,
        "app_id": app_id,
        "user_id": _user(parsed.user_id, line),
        "message_type": message_type(message),
        "tool_call_id": message.id if isinstance(message, ToolResult) else None,
        "payload": encode_payload(message),
        "created_at": _utc(parsed.created_at),
        "updated_at": _utc(parsed.updated_at),
        "is_deleted": parsed.deleted,
    }
    return ImportRow(line, ORIGINAL, app_id, values)


# --- the import decision -------------------------------------------------------------------------


@dataclass(slots=True)
class TableCounts:
    inserted: int = 0
    skipped: int = 0


@dataclass(slots=True)
class AppCounts:
    original: TableCounts = field(default_factory=TableCounts)
    display: TableCounts = field(default_factory=TableCounts)
    tool_executions: TableCounts = field(default_factory=TableCounts)

    def table(self, name: str) -> TableCounts:
        if name == ORIGINAL:
            return self.original
        if name == DISPLAY:
            return self.display
        return self.tool_executions


def plan_import(
    batch: Sequence[ImportRow],
    existing: Mapping[str, Mapping[Any, str]],
    counts: dict[str, AppCounts],
) -> dict[str, list[dict[str, Any]]]:
    """The rows of ``batch`` to insert per table, given the keys already stored
    (``existing[table][key] -> app_id``); updates ``counts``. A key stored for another app,
    or given twice in a batch for two apps, is a conflict, never silently merged."""
    inserts: dict[str, list[dict[str, Any]]] = {ORIGINAL: [], DISPLAY: [], TOOL_EXECUTION: []}
    seen: dict[tuple[str, Any], str] = {}
    for row in batch:
        owner = existing.get(row.table, {}).get(row.key) or seen.get((row.table, row.key))
        tally = counts.setdefault(row.app_id, AppCounts()).table(row.table)
        if owner is not None:
            if owner != row.app_id:
                raise ImportRecordError(
                    f"{row.table} row {row.key!r} is already stored for another app",
                    line=row.line,
                    field="id",
                )
            tally.skipped += 1
            continue
        seen[(row.table, row.key)] = row.app_id
        inserts[row.table].append(row.values)
        tally.inserted += 1
    return inserts


def open_result(cipher: RowCipher, app_id: str, key: str, result: str | None) -> str | None:
    """A ``tool_executions.result`` value's plaintext (``None`` stays ``None``)."""
    return None if result is None else cipher.open(result, EXECUTION_RESULT, app_id, key)


def seal_result(cipher: RowCipher, app_id: str, key: str, result: str | None) -> str | None:
    """A ``tool_executions.result`` value as stored (sealed when encryption is on)."""
    if result is None or not cipher.seals(result):
        return result
    return cipher.seal(result, EXECUTION_RESULT, app_id, key)


def seal_inserts(
    cipher: RowCipher, inserts: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """The import's rows with their texts sealed (as they are when encryption is off, but
    for texts that need their escape: see :meth:`RowCipher.seals`)."""
    return {
        ORIGINAL: [
            {
                **row,
                "payload": cipher.seal(row["payload"], ORIGINAL_PAYLOAD, row["app_id"], row["id"]),
            }
            if cipher.enabled
            else row
            for row in inserts[ORIGINAL]
        ],
        DISPLAY: [
            {
                **row,
                "content": cipher.seal(row["content"], DISPLAY_CONTENT, row["app_id"], row["id"]),
            }
            if cipher.seals(row["content"])
            else row
            for row in inserts[DISPLAY]
        ],
        TOOL_EXECUTION: [
            {
                **row,
                "result": seal_result(cipher, row["app_id"], row["idempotency_key"], row["result"]),
            }
            for row in inserts[TOOL_EXECUTION]
        ],
    }


def changed_apps(inserts: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The apps whose histories the inserts change, sorted (writers lock apps in this order,
    so two imports never wait on each other crosswise)."""
    return sorted({row["app_id"] for name in (ORIGINAL, DISPLAY) for row in inserts[name]})


def requested_call_ids(message: Message) -> list[str]:
    """The call ids a message requests."""
    requests = getattr(message, "tool_requests", None) or []
    return [call.id for call in requests]


def message_call_ids(message: Message) -> list[str]:
    """The call ids a message requests or answers (what ties a user's rows to loop-guard
    records that carry no user id)."""
    if isinstance(message, ToolResult):
        return [message.id]
    return requested_call_ids(message)


def export_scope(app_ids: list[str] | None, user_id: str | None) -> None:
    """An export names apps or one user, not both."""
    if app_ids is not None and user_id is not None:
        raise InvalidInputError("export app_ids or one user_id, not both")
