"""``memstore reload`` in batches: the windows, reports and generations it stores are those of
one-by-one reloads, on SQLite, PostgreSQL and MariaDB, with fakeredis and the real Redis
(``MEMSTORE_TEST_REDIS_URL``; each test uses its own app ids and deletes only their keys)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from memstore import MemoryStore, Settings, operations
from memstore.cache import keys
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import NoWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.core import cache_entries
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.sql.schema import original
from tests.conftest import SESSION_WORKER_ID, migrated_engine, redis_client

WINDOW = 6


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return migrated_engine(request.param, tmp_path_factory)


@pytest.fixture(params=["fakeredis", "redis"])
def client(request: pytest.FixtureRequest) -> Iterator[object]:
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis()
        return
    real = redis_client()
    yield real
    real.close()


def histories(run: str) -> dict[str, list[Message]]:
    """Apps whose windows need: nothing special, a second read (a tool group longer than the
    first read's look-ahead), no rows at all, and an interrupted call in the middle."""
    calls = [ToolRequest(id=f"{run}-c{i}", name="search", arguments="{}") for i in range(40)]
    plain = [UserMessage(text=f"q{i}") if i % 2 == 0 else AiMessage(text=f"a{i}") for i in range(9)]
    widened = [
        UserMessage(text="go"),
        AiMessage(text="", tool_requests=calls),
        *(ToolResult(id=c.id, tool_name="search", text=f"r{i}") for i, c in enumerate(calls)),
        AiMessage(text="done"),
    ]
    interrupted = [
        SystemMessage(text="rules"),
        UserMessage(text="one"),
        AiMessage(text="", tool_requests=[ToolRequest(id=f"{run}-x", name="t", arguments="{}")]),
        UserMessage(text="never answered"),
        AiMessage(text="ok"),
    ]
    return {
        f"{run}-plain": plain,
        f"{run}-widened": widened,
        f"{run}-empty": [],
        f"{run}-interrupted": interrupted,
    }


def redis_store(engine: Engine, client: object, **settings: Any) -> MemoryStore:
    """A store on ``engine`` whose windows live in ``client`` (fakeredis or the real Redis)."""
    chosen = Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        worker_id=SESSION_WORKER_ID,
        **settings,
    )
    cache = RedisWindowCache(client, WindowPolicy.from_settings(chosen))
    return MemoryStore(chosen, engine=engine, cache=cache)


def assert_appends_extend(store: MemoryStore, app: str) -> None:
    """A window stored at the app's generation is extended by the next append (the generation
    guard continues it) and stays the window read from SQL."""
    store.append(app, [UserMessage(text="later")])
    assert store.cache.read(app).messages == store.load_window(app, WINDOW)


def test_a_batch_reload_stores_what_one_by_one_reloads_store(
    engine: Engine, client: fakeredis.FakeRedis
) -> None:
    run = f"rl-{uuid.uuid4().hex[:10]}"
    apps = histories(run)
    store = redis_store(engine, client, window_size=WINDOW, reload_max=WINDOW)
    try:
        for app, messages in apps.items():
            if messages:
                store.append(app, messages)
        names = [*apps, f"{run}-plain"]  # a repeated app is reported twice
        batched = store._reload_batch(names)
        assert [report.app_id for report in batched] == names
        windows = {app: store.cache.read(app).messages for app in apps}
        generations = {app: client.get(keys.generation_key(app)) for app in apps}
        one_by_one = [store.reload(app) for app in names]
        assert batched == one_by_one
        assert windows == {app: store.cache.read(app).messages for app in apps}
        assert generations == {app: client.get(keys.generation_key(app)) for app in apps}
        for app, messages in apps.items():
            expected = store.load_window(app, WINDOW) if messages else None
            assert windows[app] == expected
        assert windows[f"{run}-widened"] is not None and len(windows[f"{run}-widened"]) > WINDOW
        assert generations[f"{run}-plain"] is not None  # stored at the app's generation
        assert_appends_extend(store, f"{run}-plain")
    finally:
        client.delete(*(key for app in apps for key in keys.app_keys(app)))
        store.close()


def test_a_batch_reload_without_redis_reloads_one_by_one(engine: Engine) -> None:
    run = f"rn-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        worker_id=SESSION_WORKER_ID,
        reload_max=WINDOW,
    )
    with MemoryStore(settings, engine=engine, cache=NoWindowCache()) as store:
        store.append(f"{run}-a", [UserMessage(text="hi"), AiMessage(text="hello")])
        reports = store._reload_batch([f"{run}-a", f"{run}-b"])
        assert [(r.app_id, r.messages, r.cached) for r in reports] == [
            (f"{run}-a", 2, False),
            (f"{run}-b", 0, False),
        ]


def test_a_batch_reload_with_redis_down_caches_nothing_and_never_raises(engine: Engine) -> None:
    import redis

    from memstore.cache.redis_window import client_options
    from tests.integration.conftest import free_port

    run = f"rd-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        database_url=engine.url.render_as_string(hide_password=False),
        worker_id=SESSION_WORKER_ID,
        reload_max=WINDOW,
    )
    down = redis.Redis(host="127.0.0.1", port=free_port(), **client_options(0.2))
    cache = RedisWindowCache(down, WindowPolicy.from_settings(settings), owns_client=True)
    with MemoryStore(settings, engine=engine, cache=cache) as store:
        store.append(f"{run}-a", [UserMessage(text="hi"), AiMessage(text="hello")])
        reports = store._reload_batch([f"{run}-a", f"{run}-b"])
        assert [(r.app_id, r.messages, r.cached) for r in reports] == [
            (f"{run}-a", 2, False),
            (f"{run}-b", 0, False),
        ]
        assert set(cache.state.dirty_apps()) >= {f"{run}-a", f"{run}-b"}  # drops owed
        cache.state = type(cache.state)(0.0)  # no rest: the batch itself meets the refusal
        reports = store._reload_batch([f"{run}-a", f"{run}-b"])
        assert [r.cached for r in reports] == [False, False]
        assert set(cache.state.dirty_apps()) == {f"{run}-a", f"{run}-b"}


def test_a_rebuilt_window_carries_the_rows_payloads_as_they_are_stored(
    engine: Engine, client: fakeredis.FakeRedis
) -> None:
    """A rebuild does not encode the rows' messages again: each entry's JSON is its row's
    payload, byte for byte (here a payload written with every field, as older versions
    wrote them); the interrupted answer it adds is encoded."""
    run = f"rb-{uuid.uuid4().hex[:10]}"
    app = f"{run}-a"
    store = redis_store(engine, client)
    call = ToolRequest(id=f"{run}-c", name="t", arguments="{}")
    messages: list[Message] = [UserMessage(text="hi"), AiMessage(tool_requests=[call])]
    try:
        store.append(app, messages)
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(original.c.id, original.c.payload)
                .where(original.c.app_id == app)
                .order_by(original.c.id)
            ).all()
            old_style = messages[0].model_dump_json()
            conn.execute(
                original.update().where(original.c.id == rows[0].id).values(payload=old_style)
            )
        expected = [old_style.encode(), rows[1].payload.encode()]
        for rebuild in (lambda: store._reload_batch([app]), lambda: store.reload(app)):
            rebuild()
            raw = client.lrange(keys.window_key(app), 0, -1)
            bodies = [item[item.index(b"\x1e") + 1 :] for item in raw]
            assert bodies[:2] == expected
            assert len(bodies) == 3  # the interrupted answer, encoded
            assert store.memory(app).messages() == store.load_window(app)
    finally:
        client.delete(*keys.app_keys(app))
        store.purge(app)
        store.close()


def test_reload_apps_overlaps_batches_and_reports_in_order(
    engine: Engine, client: fakeredis.FakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``memstore reload``'s loop: the next batch is read while one is stored; every window
    is the one a single reload stores and the reports come in the apps' order."""
    monkeypatch.setattr(operations, "RELOAD_BATCH", 3)
    run = f"ra-{uuid.uuid4().hex[:10]}"
    store = redis_store(engine, client, window_size=WINDOW, reload_max=WINDOW)
    histories_by_app = {
        f"{run}-{n}": [UserMessage(text=f"m{n}-{i}") for i in range(n % 4)] for n in range(8)
    }
    try:
        for app, messages in histories_by_app.items():
            if messages:
                store.append(app, messages)
        with operations.bulk_collection():
            reports = list(operations.reload_apps(store, list(histories_by_app)))
        assert [r.app_id for r in reports] == list(histories_by_app)
        assert [r.messages for r in reports] == [len(m) for m in histories_by_app.values()]
        for app, messages in histories_by_app.items():
            assert store.cache.read(app).messages == (store.load_window(app) if messages else None)
    finally:
        client.delete(*(key for app in histories_by_app for key in keys.app_keys(app)))
        store.close()


def test_the_in_process_cache_keeps_messages_not_payloads(tmp_path: Any) -> None:
    """Only a cache that encodes entries gets the rows' payloads; the in-process windows hold
    the decoded messages alone."""
    store = MemoryStore(Settings(database_url=f"sqlite:///{tmp_path / 'local.db'}"))
    store.migrate()
    try:
        store.append("app", [UserMessage(text="hi"), AiMessage(text="hello")])
        local: Any = store._local
        local.invalidate("app")
        assert store.memory("app").messages() == store.load_window("app")
        entries = local._slots["app"].entries
        assert len(entries) == 2 and all(entry.body is None for entry in entries)
    finally:
        store.close()


@pytest.mark.parametrize("url", ["file", "memory"])
def test_appends_keep_messages_in_process_and_payloads_in_redis(
    tmp_path: Any, url: str, client: fakeredis.FakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append hands Redis each message's payload as its entry JSON (encoded once, the
    same bytes as the SQL row); the in-process cache (also over a private in-memory
    database) keeps the messages alone."""
    database_url = f"sqlite:///{tmp_path / 'a.db'}" if url == "file" else "sqlite://"
    app = f"ap-{uuid.uuid4().hex[:10]}"
    local = MemoryStore(Settings(database_url=database_url))
    local.migrate()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'r.db'}")
    remote = MemoryStore(
        settings, cache=RedisWindowCache(client, WindowPolicy.from_settings(settings))
    )
    remote.migrate()
    turn: list[Message] = [UserMessage(text="hi", metadata={"k": 1}), AiMessage(text="hello")]
    try:
        for store in (local, remote):
            store.append(app, [UserMessage(text="first")])
            assert store.memory(app).messages()  # the window is cached
            with monkeypatch.context() as patched:
                # the cache never encodes an appended message: its entry carries the payload
                patched.setattr(cache_entries, "encode_message", _no_second_encoding)
                store.append(app, turn)
            assert store.memory(app).messages() == store.load_window(app)
        slots: Any = local.cache
        assert all(entry.body is None for entry in slots._slots[app].entries)
        with remote.engine.connect() as conn:
            payloads = (
                conn.execute(
                    sa.select(original.c.payload)
                    .where(original.c.app_id == app)
                    .order_by(original.c.id)
                )
                .scalars()
                .all()
            )
        raw = client.lrange(keys.window_key(app), 0, -1)
        assert [item[item.index(b"\x1e") + 1 :] for item in raw] == [p.encode() for p in payloads]
    finally:
        client.delete(*keys.app_keys(app))
        local.close()
        remote.close()


def _no_second_encoding(message: Message) -> bytes:
    raise AssertionError("a message was encoded again for the cache")
