"""Erase means erased: a property test over every public write path (issue 27).

Several users write through the store, the memory API, the stream collector, the loop guard,
compaction, import and each framework adapter that knows users (LangChain history, OpenAI
Agents session, Google ADK session service), into shared apps and apps of their own; every
text a user writes carries that user's token. Then, for one user:

- ``export(user_id=...)`` lists exactly the rows and loop-guard records carrying that user's
  id, and no other user's token;
- after ``purge_user``, no table (every table of the schema, via the inventory test's
  ``metadata``) and no Redis key holds the token, windows rebuilt afterwards included;
- the other users' rows and records (every table of the inventory, by user) and their exports
  are byte-identical to before.

Scenarios are drawn from a seeded generator (which paths each user takes, into which apps),
on SQLite, PostgreSQL and MariaDB with a real Redis window cache.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from memstore import AiMessage, MemoryStore, ToolRequest, ToolResult, UserMessage
from memstore.core.export import FORMAT_NAME, FORMAT_VERSION
from memstore.guard import LoopGuard
from memstore.operations import purge_user
from memstore.sql.schema import metadata
from memstore.sql.user_data import USER_DATA, user_scope
from tests.conftest import StoreFactory, migrated_engine

DATABASES = ["sqlite", "postgres", "mysql"]
SEEDS = [1, 2]
USERS = 3


@pytest.fixture(params=DATABASES)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A store on the session's migrated database with a real Redis window cache."""
    factory = StoreFactory(
        "sync", request.param, "redis", migrated_engine(request.param, tmp_path_factory)
    )
    yield factory()
    factory.close()


@dataclass
class Person:
    user_id: str
    token: str
    apps: set[str] = field(default_factory=set)
    counter: int = 0

    def text(self, what: str) -> str:
        self.counter += 1
        return f"{what} {self.token} #{self.counter}"


@dataclass
class World:
    store: MemoryStore
    run: str
    guard: LoopGuard
    shared_app: str


Writer = Callable[[World, Person, str], None]


def write_append(world: World, person: Person, app: str) -> None:
    world.store.append(
        app,
        [UserMessage(text=person.text("hello")), AiMessage(text=person.text("hi there"))],
        user_id=person.user_id,
    )


def write_memory(world: World, person: Person, app: str) -> None:
    memory = world.store.memory(app)
    memory.add(UserMessage(text=person.text("note")), user_id=person.user_id)
    memory.add_all([AiMessage(text=person.text("noted"))], user_id=person.user_id)


def write_collector(world: World, person: Person, app: str) -> None:
    world.store.memory(app).add(UserMessage(text=person.text("look up")), user_id=person.user_id)
    call_id = f"call-{uuid.uuid4().hex[:8]}"
    with world.store.collector(app, user_id=person.user_id) as turn:
        turn.on_text(person.text("thinking aloud"))
        turn.on_tool_call_delta(0, id=call_id, name="search")
        turn.on_tool_call_delta(0, arguments=json.dumps({"q": person.text("query")}))
        for request in turn.tool_calls():
            turn.on_tool_executed(request.id, person.text("found"))
        turn.on_text(person.text("answer"))


def write_guarded(world: World, person: Person, app: str) -> None:
    # call ids repeat across users on purpose: providers reuse short ids
    call_id = f"call_{person.counter % 2}"
    arguments = json.dumps({"body": person.text("mail body")})
    world.store.append(app, [UserMessage(text=person.text("send it"))], user_id=person.user_id)
    request = ToolRequest(id=call_id, name="send_email", arguments=arguments)
    world.store.append(app, [AiMessage(tool_requests=[request])], user_id=person.user_id)
    result = person.text("sent")
    outcome = world.guard.execute(
        app, "send_email", arguments, lambda: result, call_id=call_id, user_id=person.user_id
    )
    world.store.append(
        app,
        [ToolResult(id=call_id, tool_name="send_email", text=outcome.text)],
        user_id=person.user_id,
    )


def write_import(world: World, person: Person, app: str) -> None:
    now = datetime.now(timezone.utc).isoformat()
    row_id = random.Random(person.token).randrange(10**12, 10**13) + person.counter
    world.store.import_records(
        [
            {"record": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION},
            {
                "record": "original",
                "id": row_id,
                "app_id": f"{app}-imported",
                "user_id": person.user_id,
                "created_at": now,
                "updated_at": now,
                "message": {"type": "user", "text": person.text("imported")},
            },
            {
                "record": "display",
                "id": row_id + 1,
                "app_id": f"{app}-imported",
                "user_id": person.user_id,
                "role": "user",
                "text": person.text("imported display"),
                "status": "ok",
                "created_at": now,
                "updated_at": now,
            },
            {
                "record": "tool_execution",
                "app_id": f"{app}-imported",
                "idempotency_key": f"k-{person.token}",
                "tool_name": "send_email",
                "arguments_digest": "0" * 64,
                "state": "succeeded",
                "attempts": 1,
                "tool_call_id": None,
                "user_id": person.user_id,
                "result": person.text("imported result"),
                "created_at": now,
                "updated_at": now,
            },
        ]
    )
    person.apps.add(f"{app}-imported")


def write_langchain(world: World, person: Person, app: str) -> None:
    messages = pytest.importorskip("langchain_core.messages")
    from memstore.adapters.langchain import MemstoreChatMessageHistory

    history = MemstoreChatMessageHistory(world.store, app, user_id=person.user_id)
    history.add_messages(
        [
            messages.HumanMessage(content=person.text("lc question")),
            messages.AIMessage(content=person.text("lc answer")),
        ]
    )


def write_agents(world: World, person: Person, app: str) -> None:
    pytest.importorskip("agents")
    from memstore.adapters.openai_agents import MemstoreSession

    session = MemstoreSession(app, world.store, user_id=person.user_id)
    call_id = f"call_{person.counter % 2}"
    items: list[Any] = [
        {"role": "user", "content": person.text("agents question")},
        {
            "type": "function_call",
            "call_id": call_id,
            "name": "lookup",
            "arguments": json.dumps({"q": person.text("agents args")}),
        },
        {"type": "function_call_output", "call_id": call_id, "output": person.text("out")},
    ]
    asyncio.run(session.add_items(items))


def write_adk(world: World, person: Person, app: str) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events import Event, EventActions
    from google.genai import types

    from memstore.adapters.google_adk import MemstoreSessionService

    async def scenario() -> None:
        service = MemstoreSessionService(world.store)
        session = await service.create_session(
            app_name=f"adk-{world.run}",
            user_id=person.user_id,
            state={"user:pref": person.text("pref"), "mood": person.text("mood")},
        )
        event = Event(
            author="user",
            invocation_id=f"inv-{uuid.uuid4().hex[:8]}",
            content=types.Content(role="user", parts=[types.Part(text=person.text("adk"))]),
            actions=EventActions(state_delta={"user:last": person.text("last")}),
        )
        await service.append_event(session, event)

    asyncio.run(scenario())


WRITERS: list[Writer] = [
    write_append,
    write_memory,
    write_collector,
    write_guarded,
    write_import,
    write_langchain,
    write_agents,
    write_adk,
]


def build_world(store: MemoryStore, seed: int) -> tuple[World, list[Person]]:
    rng = random.Random(seed)
    run = f"erase-{uuid.uuid4().hex[:10]}"
    world = World(store, run, LoopGuard(store, side_effect_tools={"send_email"}), f"{run}-shared")
    people = [
        Person(user_id=f"{run}-user{n}", token=f"TOK{uuid.uuid4().hex[:16]}") for n in range(USERS)
    ]
    steps = [(person, writer) for person in people for writer in WRITERS]
    steps += [(rng.choice(people), rng.choice(WRITERS)) for _ in range(len(WRITERS))]
    rng.shuffle(steps)
    for person, writer in steps:
        app = world.shared_app if rng.random() < 0.6 else f"{run}-own-{person.user_id[-1]}"
        person.apps.add(app)
        writer(world, person, app)
    # a summary written from several users' messages, and one of one user only
    summarize = lambda messages: "SUMMARY " + " | ".join(m.text or "" for m in messages)  # noqa: E731
    store.compact(world.shared_app, summarize, keep_last_messages=2)
    own = sorted(people[1].apps - {world.shared_app})
    if own:
        store.compact(own[0], summarize, keep_last_messages=1)
    return world, people


def sql_hits(store: MemoryStore, token: str) -> list[str]:
    """Every ``table.column`` holding ``token`` anywhere in the schema's tables."""
    hits = []
    with store.engine.connect() as conn:
        for table in metadata.sorted_tables:
            for column in table.columns:
                if not _is_text(column):
                    continue
                query = sa.select(sa.func.count()).where(column.contains(token, autoescape=True))
                if conn.execute(query).scalar():
                    hits.append(f"{table.name}.{column.name}")
    return hits


def _is_text(column: sa.Column[Any]) -> bool:
    try:
        return column.type.python_type in (str, bytes)
    except NotImplementedError:
        return True


def redis_hits(store: MemoryStore, token: str) -> list[str]:
    """Every memstore Redis key whose name or value holds ``token``."""
    client = store.cache._client  # type: ignore[attr-defined]
    needle = token.encode()
    hits = []
    for key in client.scan_iter(match="memstore:*", count=1000):
        kind = client.type(key)
        if kind == b"list":
            values = client.lrange(key, 0, -1)
        elif kind == b"set":
            values = list(client.smembers(key))
        elif kind == b"hash":
            values = [v for pair in client.hgetall(key).items() for v in pair]
        elif kind == b"string":
            values = [client.get(key) or b""]
        else:
            values = []
        if needle in key or any(needle in value for value in values):
            hits.append(key.decode())
    return hits


def rows_of(store: MemoryStore, user_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every inventory table carrying ``user_id``, in primary-key order."""
    out = {}
    with store.engine.connect() as conn:
        for entry in USER_DATA:
            table = entry.table
            query = sa.select(table).where(user_scope(table, user_id))
            out[table.name] = sorted(tuple(row) for row in conn.execute(query))
    return out


def exported(store: MemoryStore, user_id: str) -> list[dict[str, Any]]:
    return [record for record in store.export(user_id=user_id) if record["record"] != "header"]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_purged_user_leaves_nothing_and_the_others_keep_everything(
    store: MemoryStore, seed: int
) -> None:
    _world, people = build_world(store, seed)
    victim, others = people[0], people[1:]
    for app in {app for person in people for app in person.apps}:
        store.load_window(app)  # every window cached in Redis before the purge

    # export by user: exactly the victim's rows and records
    records = exported(store, victim.user_id)
    dumped = json.dumps(records)
    assert victim.token in dumped
    for other in others:
        assert other.token not in dumped
    assert {record["user_id"] for record in records} == {victim.user_id}
    stored = rows_of(store, victim.user_id)
    kinds = {"original": "chat_history_original", "display": "chat_history"}
    kinds["tool_execution"] = "tool_executions"
    for kind, table in kinds.items():
        assert sum(r["record"] == kind for r in records) == len(stored[table]), kind

    before = {other.user_id: rows_of(store, other.user_id) for other in others}
    exports_before = {other.user_id: exported(store, other.user_id) for other in others}
    assert all(before[other.user_id]["chat_history_original"] for other in others)

    counts, apps = purge_user(store, victim.user_id)
    assert counts.original_rows and counts.tool_executions
    assert victim.apps <= set(apps) | {a for a in victim.apps if "adk" in a}

    assert sql_hits(store, victim.token) == []
    assert redis_hits(store, victim.token) == []
    for app in {app for person in people for app in person.apps}:
        window = store.load_window(app)  # rebuilt from SQL into Redis
        assert victim.token not in json.dumps([m.model_dump() for m in window])
    assert redis_hits(store, victim.token) == []
    assert exported(store, victim.user_id) == []

    for other in others:
        assert rows_of(store, other.user_id) == before[other.user_id]
        assert exported(store, other.user_id) == exports_before[other.user_id]
        assert sql_hits(store, other.token)
