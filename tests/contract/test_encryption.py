"""Encryption at rest on every backend, sync and async: no plaintext in rows, files or Redis;
tampered, swapped and foreign rows fail with typed errors; unknown keys are named; an
unencrypted store switched on still reads its rows until ``rekey`` seals them."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from memstore import (
    AiMessage,
    DecryptionError,
    MemoryStore,
    Settings,
    ToolRequest,
    ToolResult,
    UnknownKeyError,
    UserMessage,
)
from memstore.cache import keys as cache_keys
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.crypto import ENVELOPE_PREFIX
from memstore.guard import LoopGuard
from memstore.sql.schema import display, original, tool_executions
from tests.conftest import SESSION_WORKER_ID, StoreFactory

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(100, 132))).decode()
ONE = f"k1:{K1}"
ROTATED = f"k2:{K2},k1:{K1}"


def secrets() -> dict[str, str]:
    tag = uuid.uuid4().hex
    return {
        name: f"{name}-{tag}"
        for name in ("question", "argument", "result", "answer", "guardresult")
    }


def converse(store: Any, app: str, words: dict[str, str]) -> list[Any]:
    turn = [
        UserMessage(text=words["question"]),
        AiMessage(
            tool_requests=[
                ToolRequest(id="c1", name="lookup", arguments=f'{{"q": "{words["argument"]}"}}')
            ]
        ),
        ToolResult(id="c1", tool_name="lookup", text=words["result"]),
        AiMessage(text=words["answer"]),
    ]
    store.append(app, turn[:1])
    store.append(app, turn[1:3])
    store.append(app, turn[3:])
    return turn


def raw_values(engine: sa.Engine, app: str) -> list[str]:
    with engine.connect() as conn:
        values = list(
            conn.execute(sa.select(original.c.payload).where(original.c.app_id == app)).scalars()
        )
        values += conn.execute(
            sa.select(display.c.content).where(display.c.app_id == app)
        ).scalars()
        values += conn.execute(
            sa.select(tool_executions.c.result).where(
                tool_executions.c.app_id == app, tool_executions.c.result.is_not(None)
            )
        ).scalars()
    return values


def raw_window(store: Any, app: str) -> list[bytes] | None:
    if hasattr(store, "raw_window"):
        return store.raw_window(app)  # type: ignore[no-any-return]
    if isinstance(store.cache, RedisWindowCache):
        return list(store.cache.client.lrange(cache_keys.window_key(app), 0, -1))
    return None


def sync_store(factory: StoreFactory, **settings: Any) -> MemoryStore:
    """A sync store on the factory's database (rekey is a sync operation)."""
    config = Settings(
        database_url=factory.engine.url.render_as_string(hide_password=False),
        worker_id=SESSION_WORKER_ID,
        **settings,
    )
    return MemoryStore(config, engine=factory.engine)


def test_rows_files_and_cache_hold_no_plaintext(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(encryption_keys=ONE)
    words = secrets()
    turn = converse(store, app_id, words)
    guard = LoopGuard(store, side_effect_tools={"send"})
    guard.start(app_id, "send", {"to": "x"}, idempotency_key="k-1")
    guard.succeed(app_id, "k-1", words["guardresult"])

    assert store.memory(app_id).messages() == turn  # cached (Redis: sealed entries)
    assert store.load_window(app_id) == turn  # from SQL
    assert words["answer"] in [entry.text for entry in store.history(app_id)]
    assert guard.execution(app_id, "k-1").result == words["guardresult"]  # type: ignore[union-attr]

    values = raw_values(make_store.engine, app_id)
    assert len(values) >= 6
    assert all(value.startswith(f"{ENVELOPE_PREFIX}k1:") for value in values)
    for value in values:
        for word in words.values():
            assert word not in value
    entries = raw_window(store, app_id)
    if entries is not None:
        assert len(entries) == len(turn)
        for entry in entries:
            for word in words.values():
                assert word.encode() not in entry
    if make_store.db == "sqlite":
        raw = _database_file_bytes(Path(str(make_store.engine.url.database)))
        assert app_id.encode() in raw  # the right file: app ids stay visible
        for word in words.values():
            assert word.encode() not in raw
    exported = list(store.export([app_id]))
    assert any(words["guardresult"] == r.get("result") for r in exported)
    assert any(words["question"] == r.get("text") for r in exported)


def _database_file_bytes(path: Path) -> bytes:
    """The raw bytes of a SQLite database and its -wal/-shm files, read by another process.

    Not in this one: closing any descriptor of a file drops every POSIX lock the process holds
    on it, including the locks of this process's open SQLite connections, and later
    multi-process tests on the same file then corrupt it."""
    reader = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
        "sys.stdout.buffer.write(b''.join(f.read_bytes() for f in p.parent.glob(p.name + '*')))"
    )
    return subprocess.run(
        [sys.executable, "-c", reader, str(path)], check=True, capture_output=True
    ).stdout


def test_encrypt_cache_off_keeps_sql_sealed(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(encryption_keys=ONE, encrypt_cache=False)
    words = secrets()
    turn = converse(store, app_id, words)
    assert store.memory(app_id).messages() == turn
    assert all(v.startswith(ENVELOPE_PREFIX) for v in raw_values(make_store.engine, app_id))
    entries = raw_window(store, app_id)
    if entries is not None:
        assert any(words["question"].encode() in entry for entry in entries)


def test_tampered_and_swapped_rows_raise(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(encryption_keys=ONE)
    converse(store, app_id, secrets())
    other = f"{app_id}-other"
    store.append(other, [UserMessage(text="elsewhere")])
    engine = make_store.engine
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(original.c.id, original.c.payload)
            .where(original.c.app_id == app_id)
            .order_by(original.c.id)
        ).all()
    first, second = rows[0], rows[1]

    def set_payload(row_id: int, payload: str) -> None:
        with engine.begin() as conn:
            conn.execute(original.update().where(original.c.id == row_id).values(payload=payload))

    # one flipped character of the ciphertext
    body = second.payload
    flipped = body[:-3] + ("A" if body[-3] != "A" else "B") + body[-2:]
    set_payload(second.id, flipped)
    with pytest.raises(DecryptionError) as raised:
        store.load_window(app_id)
    assert raised.value.key_id == "k1"
    assert "elsewhere" not in str(raised.value)

    # another row's ciphertext (same app, other id)
    set_payload(second.id, first.payload)
    with pytest.raises(DecryptionError):
        store.load_window(app_id)
    set_payload(second.id, second.payload)
    assert len(store.load_window(app_id)) == 4

    # a row copied to another app
    with engine.connect() as conn:
        foreign = conn.execute(
            sa.select(original.c.id).where(original.c.app_id == other)
        ).scalar_one()
    set_payload(foreign, first.payload)
    with pytest.raises(DecryptionError):
        store.load_window(other)

    # display content swapped between rows
    with engine.connect() as conn:
        shown = conn.execute(
            sa.select(display.c.id, display.c.content)
            .where(display.c.app_id == app_id)
            .order_by(display.c.id)
        ).all()
    with engine.begin() as conn:
        conn.execute(
            display.update().where(display.c.id == shown[0].id).values(content=shown[-1].content)
        )
    with pytest.raises(DecryptionError):
        store.history(app_id)


def test_unknown_or_wrong_key_is_named(make_store: StoreFactory, app_id: str) -> None:
    writer = make_store(encryption_keys=ONE)
    turn = converse(writer, app_id, secrets())

    with pytest.raises(UnknownKeyError) as raised:
        make_store(encryption_keys=f"k2:{K2}").load_window(app_id)
    assert raised.value.key_id == "k1" and "'k1'" in str(raised.value)
    assert K1 not in str(raised.value)

    with pytest.raises(UnknownKeyError) as off:
        make_store().load_window(app_id)
    assert off.value.key_id == "k1"

    with pytest.raises(DecryptionError) as wrong:  # the id is known, the key is not it
        make_store(encryption_keys=f"k1:{K2}").load_window(app_id)
    assert not isinstance(wrong.value, UnknownKeyError) and wrong.value.key_id == "k1"

    assert make_store(encryption_keys=ROTATED).load_window(app_id) == turn


def test_switching_on_reads_old_rows_and_rekey_seals_them(
    make_store: StoreFactory, app_id: str
) -> None:
    plain = make_store()
    words = secrets()
    old = converse(plain, app_id, words)
    guard = LoopGuard(plain, side_effect_tools={"send"})
    guard.start(app_id, "send", {"to": "x"}, idempotency_key="k-1")
    guard.succeed(app_id, "k-1", words["guardresult"])
    assert any(words["question"] in v for v in raw_values(make_store.engine, app_id))

    sealed = make_store(encryption_keys=ONE)
    assert sealed.load_window(app_id) == old  # plaintext rows still read
    new = [UserMessage(text="and now?")]
    sealed.append(app_id, new)
    assert sealed.load_window(app_id) == [*old, *new]  # mixed rows read
    assert LoopGuard(sealed).execution(app_id, "k-1").result == words["guardresult"]  # type: ignore[union-attr]

    rekeying = sync_store(make_store, encryption_keys=ONE)
    try:
        dry = rekeying.rekey(dry_run=True, app_ids=[app_id])
        assert dry.dry_run and dry.tables["chat_history_original"].rekeyed >= 4
        assert any(words["question"] in v for v in raw_values(make_store.engine, app_id))
        done = rekeying.rekey(batch_size=1, app_ids=[app_id])  # keyset pages of one row
        assert done.tables["chat_history_original"].rekeyed >= 4
        assert done.tables["tool_executions"].rekeyed >= 1
        values = raw_values(make_store.engine, app_id)
        assert all(v.startswith(f"{ENVELOPE_PREFIX}k1:") for v in values)
        assert not any(w in v for v in values for w in words.values())
        again = rekeying.rekey(app_ids=[app_id])  # resumable: nothing left
        assert again.tables["chat_history_original"].rekeyed == 0
    finally:
        rekeying.close()
    assert sealed.load_window(app_id) == [*old, *new]

    # rotation: a new first key, the old one kept for reading until rekeyed
    rotating = sync_store(make_store, encryption_keys=ROTATED)
    try:
        assert rotating.load_window(app_id) == [*old, *new]
        rotating.rekey(app_ids=[app_id])
    finally:
        rotating.close()
    values = raw_values(make_store.engine, app_id)
    assert all(v.startswith(f"{ENVELOPE_PREFIX}k2:") for v in values)
    assert make_store(encryption_keys=f"k2:{K2}").load_window(app_id) == [*old, *new]
    guard2 = LoopGuard(make_store(encryption_keys=f"k2:{K2}"))
    assert guard2.execution(app_id, "k-1").result == words["guardresult"]  # type: ignore[union-attr]


def test_rekey_under_concurrent_appends_loses_nothing(
    make_store: StoreFactory, app_id: str
) -> None:
    wanted = "memory" if make_store.db == "sqlite" else "fakeredis"
    if make_store.flavor != "sync" or make_store.cache_name != wanted:
        pytest.skip("one run per database is enough for the race")
    plain = make_store()
    for i in range(60):
        plain.append(app_id, [UserMessage(text=f"old {i}")])
    writer = make_store(encryption_keys=ROTATED)
    stop = threading.Event()
    written: list[str] = []
    errors: list[BaseException] = []

    def append_while_rekeying() -> None:
        try:
            i = 0
            while not stop.is_set() or i < 10:
                text = f"new {i}"
                writer.append(app_id, [UserMessage(text=text)])
                written.append(text)
                i += 1
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=append_while_rekeying)
    rekeying = sync_store(make_store, encryption_keys=ROTATED)
    try:
        thread.start()
        report = rekeying.rekey(batch_size=7, app_ids=[app_id])
        stop.set()
        thread.join(timeout=120)
        rekeying.rekey(app_ids=[app_id])
    finally:
        stop.set()
        rekeying.close()
    assert not errors
    assert report.tables["chat_history_original"].rekeyed >= 60
    texts = [m.text for m in writer.load_window(app_id, max_messages=100_000)]
    assert texts == [f"old {i}" for i in range(60)] + written
    values = raw_values(make_store.engine, app_id)
    assert all(v.startswith(f"{ENVELOPE_PREFIX}k2:") for v in values)


MARKED = [f"{ENVELOPE_PREFIX}k1:AAAA", "\x01ms0:escaped?", f"{ENVELOPE_PREFIX}"]


def test_texts_that_look_like_envelopes_stay_plain_text(
    make_store: StoreFactory, app_id: str
) -> None:
    """Without encryption, a message (or tool result) that starts with the envelope prefix is
    still text: history, export and rekey read it, and switching encryption on keeps it."""
    plain = make_store()
    messages = [UserMessage(text=text) for text in MARKED]
    plain.append(app_id, messages)
    guard = LoopGuard(plain, side_effect_tools={"send"})
    guard.start(app_id, "send", {"to": "x"}, idempotency_key="k-env")
    guard.succeed(app_id, "k-env", MARKED[0])
    assert [entry.text for entry in plain.history(app_id)] == MARKED[::-1]
    assert plain.load_window(app_id) == messages
    exported = list(plain.export([app_id]))
    assert {record.get("text") for record in exported} >= set(MARKED)
    assert LoopGuard(plain).execution(app_id, "k-env").result == MARKED[0]  # type: ignore[union-attr]

    rekeying = sync_store(make_store, encryption_keys=ONE)
    try:
        rekeying.rekey(app_ids=[app_id])
        assert [entry.text for entry in rekeying.history(app_id)] == MARKED[::-1]
    finally:
        rekeying.close()
    sealed = make_store(encryption_keys=ONE)
    assert [entry.text for entry in sealed.history(app_id)] == MARKED[::-1]
    assert LoopGuard(sealed).execution(app_id, "k-env").result == MARKED[0]  # type: ignore[union-attr]
