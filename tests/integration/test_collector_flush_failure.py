"""The collector when the database itself fails mid-turn (a real SQLite failure: the
original-history table is renamed away, so its INSERTs fail while display rows still work).

The failed turn's display row must show only what is durable: a result held by the
collector because its flush failed is not shown as ``-> ok``.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memstore import MemoryStore, StorageError, ToolResult, UserMessage


def rename(store: MemoryStore, old: str, new: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))


def test_failed_flush_leaves_a_truthful_display_row(sqlite_store: MemoryStore) -> None:
    store, app = sqlite_store, "app-flush-failure"
    store.append(app, [UserMessage(text="read and send")])
    with pytest.raises(StorageError), store.collector(app) as turn:
        turn.on_text("Both.")
        turn.on_tool_call_delta(0, id="c1", name="read_file", arguments="{}")
        turn.on_tool_call_delta(1, id="c2", name="send_email", arguments="{}")
        turn.on_tool_executed("c1", "contents")  # durable
        rename(store, "chat_history_original", "parked_original")
        turn.on_tool_executed("c2", "sent")  # its flush fails: StorageError, result held
    rename(store, "parked_original", "chat_history_original")
    window = store.load_window(app)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "tool_result"]
    assert window[2] == ToolResult(id="c1", tool_name="read_file", text="contents")
    row = store.history(app)[0]
    assert row.status == "failed"
    lines = row.text.splitlines()
    assert lines[1] == "[tool] read_file({}) -> ok"
    assert lines[2] == "[tool] send_email({})"  # not stored: no outcome claimed
    assert lines[-1].startswith("[failed] ")  # StorageError or its SchemaError
