"""The collector when the database itself fails mid-turn (a real SQLite failure: a trigger
aborts every INSERT into the original history, while display rows still work).

The failed turn's display row must show only what is durable: a result held by the
collector because its flush failed is not shown as ``-> ok``.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memstore import MemoryStore, StorageError, ToolResult, UserMessage


def fail_original_inserts(store: MemoryStore, on: bool) -> None:
    with store.engine.begin() as conn:
        if on:
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse_original BEFORE INSERT ON chat_history_original "
                    "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
                )
            )
        else:
            conn.execute(sa.text("DROP TRIGGER refuse_original"))


def test_failed_flush_leaves_a_truthful_display_row(sqlite_store: MemoryStore) -> None:
    store, app = sqlite_store, "app-flush-failure"
    store.append(app, [UserMessage(text="read and send")])
    with pytest.raises(StorageError), store.collector(app) as turn:
        turn.on_text("Both.")
        turn.on_tool_call_delta(0, id="c1", name="read_file", arguments="{}")
        turn.on_tool_call_delta(1, id="c2", name="send_email", arguments="{}")
        turn.on_tool_executed("c1", "contents")  # durable
        fail_original_inserts(store, True)
        turn.on_tool_executed("c2", "sent")  # its flush fails: StorageError, result held
    fail_original_inserts(store, False)
    window = store.load_window(app)
    assert [m.type for m in window] == ["user", "ai", "tool_result", "tool_result"]
    assert window[2] == ToolResult(id="c1", tool_name="read_file", text="contents")
    row = store.history(app)[0]
    assert row.status == "failed"
    lines = row.text.splitlines()
    assert lines[1] == "[tool] read_file({}) -> ok"
    assert lines[2] == "[tool] send_email({})"  # not stored: no outcome claimed
    assert lines[-1].startswith("[failed] ")  # StorageError or its SchemaError
