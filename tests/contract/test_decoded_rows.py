"""Window reads reuse the rows they decoded before, and never a row that changed since."""

from __future__ import annotations

import base64

import pytest
import sqlalchemy as sa

from memstore import AiMessage, ToolRequest, ToolResult, UserMessage
from memstore.core.rows import encode_payload
from memstore.errors import DecryptionError
from memstore.sql.schema import original
from tests.conftest import StoreFactory

KEY = "k1:" + base64.b64encode(bytes(range(32))).decode()


def turn(n: int) -> list[object]:
    call = f"call-{n}"
    return [
        UserMessage(text=f"question {n}"),
        AiMessage(tool_requests=[ToolRequest(id=call, name="look", arguments="{}")]),
        ToolResult(id=call, tool_name="look", text=f"found {n}"),
        AiMessage(text=f"answer {n}"),
    ]


def test_a_second_read_reuses_rows_and_sees_a_row_edited_behind_its_back(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    for n in range(5):
        store.append(app_id, turn(n))
    first = store.load_window(app_id, 12)
    again = store.load_window(app_id, 12)
    assert again == first
    assert all(a is b for a, b in zip(first, again, strict=True))
    newest = max(store.append(app_id, [UserMessage(text="one more")]))
    with make_store.engine.begin() as conn:
        conn.execute(
            original.update()
            .where(original.c.id == newest)
            .values(payload=encode_payload(UserMessage(text="changed in SQL")))
        )
    latest = store.load_window(app_id, 12)
    assert latest[-1] == UserMessage(text="changed in SQL")
    assert latest[-2] is first[-1]


def test_purge_forgets_the_apps_decoded_rows(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    other = f"{app_id}-other"
    for app in (app_id, other):
        store.append(app, turn(1))
        store.load_window(app)
    remembered = len(store.row_memo)
    assert remembered >= 8
    store.purge(app_id)
    assert len(store.row_memo) == remembered - 4
    assert store.load_window(app_id) == []
    assert len(store.load_window(other)) == 4


def test_without_a_budget_nothing_is_remembered(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(decoded_rows_cache_mb=0)
    store.append(app_id, turn(1))
    first = store.load_window(app_id)
    again = store.load_window(app_id)
    assert again == first and again[0] is not first[0]
    assert len(store.row_memo) == 0


def test_sealed_rows_are_reused_and_a_swapped_ciphertext_still_fails(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store(encryption_keys=KEY)
    store.append(app_id, turn(1))
    first = store.load_window(app_id)
    assert store.load_window(app_id)[0] is first[0]
    with make_store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(original.c.id, original.c.payload)
            .where(original.c.app_id == app_id)
            .order_by(original.c.id)
        ).all()
    with make_store.engine.begin() as conn:
        conn.execute(
            original.update().where(original.c.id == rows[0].id).values(payload=rows[1].payload)
        )
    with pytest.raises(DecryptionError):
        store.load_window(app_id)


def test_reused_and_decoded_rows_are_counted(make_store: StoreFactory, app_id: str) -> None:
    store = make_store()
    store.append(app_id, turn(1))
    before = store.metrics()
    store.load_window(app_id)
    first = store.metrics()
    assert first["rows_decoded"] - before["rows_decoded"] == 4
    assert first["rows_reused"] == before["rows_reused"]
    store.load_window(app_id)
    again = store.metrics()
    assert again["rows_reused"] - first["rows_reused"] == 4
    assert again["rows_decoded"] == first["rows_decoded"]
    off = make_store(decoded_rows_cache_mb=0)
    off.load_window(app_id)
    assert off.metrics()["rows_decoded"] == off.metrics()["rows_reused"] == 0
