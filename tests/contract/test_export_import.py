"""Export and import (``memstore-export`` JSON Lines) on every backend, sync and async."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from memstore import AiMessage, MemoryStore, ToolRequest, ToolResult, UserMessage
from memstore.core.export import FORMAT_NAME, FORMAT_VERSION
from memstore.errors import ImportRecordError, InvalidInputError
from memstore.sql.schema import display, original, tool_executions

OLD = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)


def seed(store: MemoryStore, app: str, user: str = "u1") -> None:
    store.append(app, [UserMessage(text="book a room")], user_id=user)
    store.append(
        app,
        [
            AiMessage(
                text="checking",
                tool_requests=[
                    ToolRequest(id="b1", name="book", arguments='{"room": 7,  "x": [1]}'),
                    ToolRequest(id="b2", name="pay", arguments="{}"),
                ],
            ),
            ToolResult(id="b1", tool_name="book", text="booked"),
        ],
        user_id=user,
    )
    store.append(app, [ToolResult(id="b2", tool_name="pay", text="paid", is_error=True)], user)
    store.append(app, [AiMessage(text="done")], user_id=user)
    with store.engine.begin() as conn:
        conn.execute(original.update().where(original.c.app_id == app).values(created_at=OLD))
        conn.execute(
            tool_executions.insert(),
            [
                {
                    "app_id": app,
                    "idempotency_key": f"key-{i}",
                    "tool_name": "book",
                    "arguments_digest": "a" * 64,
                    "state": "succeeded",
                    "attempts": 1,
                    "tool_call_id": f"b{i}",
                    "result": "booked",
                    "created_at": OLD,
                    "updated_at": OLD + timedelta(seconds=i),
                }
                for i in (1, 2)
            ],
        )


def raw(store: MemoryStore, app: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every column of every row of the app, timestamps normalised to UTC."""

    def norm(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value
        return value

    out = {}
    with store.engine.connect() as conn:
        for table, order in (
            (original, original.c.id),
            (display, display.c.id),
            (tool_executions, tool_executions.c.idempotency_key),
        ):
            rows = conn.execute(sa.select(table).where(table.c.app_id == app).order_by(order))
            out[table.name] = [tuple(norm(v) for v in row) for row in rows]
    return out


def as_lines(records: Any) -> list[dict[str, Any]]:
    """Through JSON text, as a file would carry them."""
    return [json.loads(json.dumps(record)) for record in records]


def test_export_purge_import_restores_everything(store: MemoryStore, app_id: str) -> None:
    seed(store, app_id)
    window = store.load_window(app_id)
    history = store.history(app_id, limit=100)
    before = raw(store, app_id)
    records = as_lines(store.export([app_id]))
    header = records[0]
    assert (header["record"], header["format"], header["version"]) == (
        "header",
        FORMAT_NAME,
        FORMAT_VERSION,
    )
    kinds = [r["record"] for r in records[1:]]
    assert kinds == ["original"] * 5 + ["display"] * len(history) + ["tool_execution"] * 2
    assert records[2]["message"]["tool_requests"][0]["arguments"] == '{"room": 7,  "x": [1]}'

    store.memory(app_id).messages()
    store.purge(app_id)
    assert store.load_window(app_id) == []
    report = store.import_records(records)
    assert report.records == len(records) - 1
    counts = report.apps[app_id]
    assert (counts.original_inserted, counts.display_inserted) == (5, len(history))
    assert counts.tool_executions_inserted == 2
    assert report.total.original_skipped == 0
    assert store.load_window(app_id) == window
    assert store.memory(app_id).messages() == window
    assert store.history(app_id, limit=100) == history
    assert raw(store, app_id) == before

    again = store.import_records(records)
    assert again.total.original_inserted == 0 and again.total.display_inserted == 0
    assert again.apps[app_id].original_skipped == 5
    assert again.apps[app_id].tool_executions_skipped == 2
    assert raw(store, app_id) == before
    store.purge(app_id)


def test_export_by_user_holds_only_that_user(store: MemoryStore, app_id: str) -> None:
    seed(store, app_id, "u1")
    other = app_id + "-2"
    store.append(other, [UserMessage(text="someone else")], user_id="u2")
    user = f"user-{uuid.uuid4().hex[:8]}"
    store.append(app_id, [UserMessage(text="mine")], user_id=user)
    store.append(other, [UserMessage(text="mine too")], user_id=user)
    records = as_lines(store.export(user_id=user))[1:]
    assert {r["user_id"] for r in records} == {user}
    assert sorted(r["app_id"] for r in records if r["record"] == "original") == sorted(
        [app_id, other]
    )
    assert len(as_lines(store.export(user_id="u1"))) >= 1 + 5
    with pytest.raises(InvalidInputError):
        list(store.export([app_id], user_id=user))
    store.purge(app_id)
    store.purge(other)


def test_a_bad_record_is_a_typed_error_without_text_and_writes_nothing(
    store: MemoryStore, app_id: str
) -> None:
    seed(store, app_id)
    records = as_lines(store.export([app_id]))
    store.purge(app_id)
    broken = [dict(r) for r in records]
    broken[3] = {**broken[3], "message": {"type": "user", "text": 12, "secret": "SECRET-TEXT"}}
    with pytest.raises(ImportRecordError) as caught:
        store.import_records(broken)
    assert caught.value.line == 4 and caught.value.field == "message"
    assert "SECRET" not in str(caught.value)
    assert raw(store, app_id) == {
        "chat_history_original": [],
        "chat_history": [],
        "tool_executions": [],
    }
    for bad, line in (
        ([{"record": "original"}], 1),
        ([{**records[0], "version": FORMAT_VERSION + 1}], 1),
        ([records[0], {**records[1], "app_id": ""}], 2),
        ([records[0], {**records[1], "id": "x"}], 2),
        ([records[0], {**records[1], "record": "nope"}], 2),
        ([], 1),
    ):
        with pytest.raises(ImportRecordError) as caught:
            store.import_records(bad)
        assert caught.value.line == line
    assert store.load_window(app_id) == []


def test_an_id_stored_for_another_app_is_a_conflict(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi")])
    records = as_lines(store.export([app_id]))
    records[1]["app_id"] = app_id + "-elsewhere"
    with pytest.raises(ImportRecordError) as caught:
        store.import_records(records)
    assert caught.value.line == 2
    assert store.load_window(app_id + "-elsewhere") == []
    store.purge(app_id)
