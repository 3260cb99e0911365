"""Purge by user on every backend: the windows of every app rows were deleted from are
dropped, including an app the user wrote to while the purge ran."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from memstore import UserMessage
from memstore.operations import purge_user
from memstore.sql.schema import original
from tests.conftest import StoreFactory


def test_an_app_written_while_the_purge_runs_loses_its_window(
    make_store: StoreFactory, app_id: str
) -> None:
    user = f"user-{app_id}"
    store = make_store()
    store.append(app_id, [UserMessage(text="first words")], user_id=user)
    late = f"{app_id}-late"
    listings: list[str] = []
    fired: list[bool] = []

    def write_meanwhile(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # once the purge has listed the user's apps (histories, guard records) and is about
        # to list them again, the user writes to a new app and a reader caches its window
        if "DISTINCT" not in statement.upper():
            return
        listings.append(statement)
        if len(listings) != 4:
            return
        fired.append(True)
        store.append(late, [UserMessage(text="late secret")], user_id=user)
        assert store.memory(late).messages() == [UserMessage(text="late secret")]

    sa.event.listen(store.engine, "before_cursor_execute", write_meanwhile)
    try:
        counts, apps = purge_user(store, user)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", write_meanwhile)
    assert fired
    assert set(apps) == {app_id, late}
    assert counts.original_rows == 2
    assert store.memory(late).messages() == []
    assert store.memory(app_id).messages() == []


def test_a_summary_of_the_users_messages_goes_with_them(
    make_store: StoreFactory, app_id: str
) -> None:
    user, other = f"user-{app_id}", f"other-{app_id}"
    store = make_store()
    store.append(app_id, [UserMessage(text="secret plan of the user")], user_id=user)
    store.append(app_id, [UserMessage(text="hello from the other")], user_id=other)
    store.append(app_id, [UserMessage(text="recent words")], user_id=other)
    report = store.compact(app_id, lambda messages: "SUMMARY: secret plan", keep_last_messages=1)
    assert report.compacted
    window = store.memory(app_id).messages()
    assert "SUMMARY: secret plan" in window[0].text
    # a summary of the other user's messages only is kept
    kept = f"{app_id}-b"
    store.append(kept, [UserMessage(text="other 1")], user_id=other)
    store.append(kept, [UserMessage(text="other 2")], user_id=other)
    store.compact(kept, lambda messages: "SUMMARY: the other's", keep_last_messages=1)
    store.append(kept, [UserMessage(text="user words")], user_id=user)

    counts, apps = purge_user(store, user)
    assert set(apps) == {app_id, kept}
    assert counts.original_rows == 3  # the two user messages and the summary covering one
    assert [m.text for m in store.memory(app_id).messages()] == [
        "hello from the other",
        "recent words",
    ]
    assert [m.text for m in store.memory(kept).messages()] == ["SUMMARY: the other's", "other 2"]
    with store.engine.connect() as conn:
        left = conn.execute(
            sa.select(sa.func.count()).where(original.c.app_id == app_id)
        ).scalar_one()
    assert left == 2
