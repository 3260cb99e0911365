"""Purge by user on every backend: the windows of every app rows were deleted from are
dropped, including an app the user wrote to while the purge ran."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from memstore import UserMessage
from memstore.operations import purge_user
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
        # once the purge has listed the user's apps (both histories) and is about to list them
        # again, the user writes to a new app and a reader caches its window
        if "DISTINCT" not in statement.upper():
            return
        listings.append(statement)
        if len(listings) != 3:
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
