"""Loop-guard records belong to users: purge by user removes the user's records (tool results
included) and nobody else's, export by user lists the user's records and nobody else's, also
when two users' calls share a call id in one app, and records without a user id (written
before migration 0009, or by a caller that named no user) are matched through their call id.

Runs on SQLite, PostgreSQL and MariaDB (each when configured), sync and async stores.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from memstore import AiMessage, ToolRequest, ToolResult, UserMessage
from memstore.guard import LoopGuard
from memstore.operations import purge_user
from memstore.sql.schema import tool_executions
from tests.conftest import StoreFactory


def _turn(
    store: Any,
    guard: LoopGuard,
    app_id: str,
    user: str,
    call_id: str,
    body: str,
    *,
    record_user: bool = True,
) -> None:
    """One user turn whose side-effecting call runs through the guard (its result text is
    ``"sent " + body``)."""
    arguments = f'{{"body": "{body}"}}'
    store.append(app_id, [UserMessage(text=f"please send {body}")], user_id=user)
    request = ToolRequest(id=call_id, name="send_email", arguments=arguments)
    store.append(app_id, [AiMessage(tool_requests=[request])], user_id=user)
    outcome = guard.execute(
        app_id,
        "send_email",
        arguments,
        lambda: f"sent {body}",
        call_id=call_id,
        user_id=user if record_user else None,
    )
    assert outcome.executed
    store.append(
        app_id, [ToolResult(id=call_id, tool_name="send_email", text=outcome.text)], user_id=user
    )


def _records(store: Any, app_id: str) -> list[tuple[str, str | None, str | None]]:
    """The records of ``app_id`` and the apps named after it (the databases are shared)."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                tool_executions.c.app_id, tool_executions.c.user_id, tool_executions.c.result
            ).where(tool_executions.c.app_id.startswith(app_id))
        ).all()
    return sorted((row.app_id, row.user_id, row.result) for row in rows)


def _exported_results(store: Any, user: str) -> list[str]:
    return sorted(
        record["result"]
        for record in store.export(user_id=user)
        if record["record"] == "tool_execution"
    )


def test_records_carry_their_user_and_go_with_the_user(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    alice, bob = f"alice-{app_id}", f"bob-{app_id}"
    # the same call id in one app for both users: providers reuse short ids
    _turn(store, guard, app_id, alice, "call_1", "alice-secret")
    _turn(store, guard, app_id, bob, "call_1", "bob-note")
    other_app = f"{app_id}-2"
    _turn(store, guard, other_app, alice, "call_9", "alice-elsewhere")

    key = guard.idempotency_key(app_id, "send_email", '{"body": "alice-secret"}')
    execution = guard.execution(app_id, key)
    assert execution is not None and execution.user_id == alice

    # export by user: the user's records, nobody else's
    assert _exported_results(store, alice) == ["sent alice-elsewhere", "sent alice-secret"]
    assert _exported_results(store, bob) == ["sent bob-note"]
    exported = [r for r in store.export(user_id=alice) if r["record"] == "tool_execution"]
    assert {r["user_id"] for r in exported} == {alice}

    counts, apps = purge_user(store, alice)
    assert counts.tool_executions == 2
    assert set(apps) == {app_id, other_app}
    assert _records(store, app_id) == [(app_id, bob, "sent bob-note")]
    assert _exported_results(store, alice) == []


def test_records_without_a_user_are_matched_through_their_call_id(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    alice, bob = f"alice-{app_id}", f"bob-{app_id}"
    _turn(store, guard, app_id, alice, "call_a", "alice-only", record_user=False)
    _turn(store, guard, app_id, alice, "call_s", "alice-shared", record_user=False)
    _turn(store, guard, app_id, bob, "call_s", "bob-shared", record_user=False)
    _turn(store, guard, app_id, bob, "call_b", "bob-only", record_user=True)

    # a record only alice's rows name is hers; one both users' rows name is nobody's to export
    assert _exported_results(store, alice) == ["sent alice-only"]
    assert _exported_results(store, bob) == ["sent bob-only"]

    counts, _apps = purge_user(store, alice)
    # erasure wins: the shared-call-id records go with alice (both of them name call_s)
    assert counts.tool_executions == 3
    assert _records(store, app_id) == [(app_id, bob, "sent bob-only")]


def test_dry_run_counts_name_the_users_records(make_store: StoreFactory, app_id: str) -> None:
    from memstore.sql import admin

    store = make_store()
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    alice = f"alice-{app_id}"
    _turn(store, guard, app_id, alice, "call_1", "x")
    counts = admin.counts_for(store.engine, user_id=alice)
    assert (counts.original_rows, counts.display_rows, counts.tool_executions) == (3, 2, 1)
    assert admin.counts_for(store.engine, app_id=app_id).tool_executions == 1


def test_a_guard_record_alone_makes_a_user_known_to_purge(
    make_store: StoreFactory, app_id: str
) -> None:
    store = make_store()
    guard = LoopGuard(store, side_effect_tools={"send_email"})
    carol = f"carol-{app_id}"
    guard.execute(app_id, "send_email", '{"body": "c"}', lambda: "sent c", user_id=carol)
    counts, apps = purge_user(store, carol)
    assert (counts.tool_executions, apps) == (1, [app_id])
    assert _records(store, app_id) == []
