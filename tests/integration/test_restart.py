"""The restart-survival proof: a window written by one process, with its cache lost, is rebuilt
by a new process from SQL with every tool call and result in place.

Each test writes through a real ``MemoryStore`` (the database under test + a private
``redis-server``), closes it, FLUSHALLs the private Redis, and reads the window back in a new
Python process (``sys.executable``), which prints it as JSON.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from memstore import (
    AiMessage,
    MemoryStore,
    Message,
    Settings,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.cache.keys import window_key
from memstore.core.rows import TOOL_RESULT
from memstore.core.validate import validate
from memstore.core.window import is_synthetic
from memstore.messages import MESSAGE_LIST_ADAPTER
from memstore.sql.schema import original
from tests.conftest import migrated_engine
from tests.integration.conftest import RedisServer

REPO = Path(__file__).resolve().parents[2]
DATABASES = ["sqlite", "postgres", "mysql"]
PARENT_WORKER = 901  # distinct snowflake workers for the two processes that write
CHILD_WORKER = 902

# Runs in the new process. argv[1]: JSON {"settings": {...}, "app_id": ..., "action": ...}.
CHILD = r"""
import json, sys, time
from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage

job = json.loads(sys.argv[1])
store = MemoryStore(Settings(**job["settings"]))
app = job["app_id"]
if job["action"] == "window":
    was_cached = store.cache.read(app).messages is not None
    window = store.memory(app).messages()
    print(json.dumps({
        "was_cached": was_cached,
        "window": [m.model_dump(mode="json") for m in window],
    }))
    store.close()
elif job["action"] == "die_mid_tool":
    memory = store.memory(app)
    memory.add(UserMessage(text="Now read both files"))
    memory.add(AiMessage(text=None, tool_requests=[
        ToolRequest(id="read_a", name="read_file", arguments='{"path": "a.txt"}'),
        ToolRequest(id="read_b", name="read_file", arguments='{"path": "b.txt"}'),
    ]))
    memory.add(ToolResult(id="read_a", tool_name="read_file", text="contents of a"))
    print("READY", flush=True)  # committed; read_b is running when the process dies
    time.sleep(120)
"""


def parallel_turn(prefix: str, *, failed: bool = False) -> list[Message]:
    args_1 = '{"path": "a.txt",  "content": "héllo 🌍\\n"}'
    args_2 = '{ "path":"b.txt" , "mode" : 420 }'
    return [
        UserMessage(text=f"{prefix}: create two files, ünïcødé 你好"),
        AiMessage(
            text=None,
            tool_requests=[
                ToolRequest(id=f"{prefix}-call_1", name="write_file", arguments=args_1),
                ToolRequest(id=f"{prefix}-call_2", name="write_file", arguments=args_2),
            ],
        ),
        ToolResult(id=f"{prefix}-call_2", tool_name="write_file", text="ok b"),  # finished first
        ToolResult(
            id=f"{prefix}-call_1",
            tool_name="write_file",
            text="disk full" if failed else "ok a",
            is_error=failed,
        ),
        AiMessage(text=f"{prefix}: done."),
    ]


def conversation() -> list[Message]:
    """Several turns: parallel calls, three calls at once, a failed tool, plain chat."""
    return [
        SystemMessage(text="You are a file agent."),
        *parallel_turn("t1"),
        UserMessage(text="Search, list and stat"),
        AiMessage(
            text="Running three tools.",
            tool_requests=[
                ToolRequest(id="s1", name="search", arguments='{"q": "memstore"}'),
                ToolRequest(id="s2", name="list_dir", arguments="{}"),
                ToolRequest(id="s3", name="stat", arguments='{"path":"a.txt"}'),
            ],
        ),
        ToolResult(id="s3", tool_name="stat", text="12 bytes"),
        ToolResult(id="s1", tool_name="search", text="3 hits"),
        ToolResult(id="s2", tool_name="list_dir", text="a.txt b.txt"),
        AiMessage(text="Found 3 hits; a.txt is 12 bytes."),
        *parallel_turn("t3", failed=True),
        UserMessage(text="thanks"),
        AiMessage(text="You're welcome."),
    ]


def settings_for(database_url: str, redis: RedisServer, **extra: Any) -> dict[str, Any]:
    return {"database_url": database_url, "redis_url": redis.url, **extra}


def child_command(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "args": [sys.executable, "-c", CHILD, json.dumps(job)],
        "cwd": REPO,
        "env": {**os.environ, "PYTHONPATH": str(REPO)},
        "text": True,
    }


def window_in_new_process(database_url: str, redis: RedisServer, app_id: str) -> dict[str, Any]:
    """Open a new store in a new process and return what it printed."""
    job = {
        "settings": settings_for(database_url, redis, worker_id=CHILD_WORKER),
        "app_id": app_id,
        "action": "window",
    }
    done = subprocess.run(**child_command(job), capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    printed: dict[str, Any] = json.loads(done.stdout)
    return printed


def as_json(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


def flush_private_redis(redis: RedisServer, app_id: str) -> None:
    with redis.client() as client:
        assert client.exists(window_key(app_id)) == 1  # the window was cached...
        client.flushall()  # ...and is lost, as in a restart
        assert client.dbsize() == 0


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of the database under test, migrated (skipped when its URL is unset)."""
    engine = migrated_engine(request.param, tmp_path_factory)
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture
def app_id() -> str:
    return f"restart-{uuid.uuid4().hex[:12]}"


def test_window_survives_restart_and_flushall(
    database_url: str, private_redis: RedisServer, app_id: str
) -> None:
    messages = conversation()
    assert len(messages) < 50  # below reload_max: the rebuild is the whole conversation
    with MemoryStore(
        Settings(**settings_for(database_url, private_redis, worker_id=PARENT_WORKER))
    ) as store:
        memory = store.memory(app_id)
        memory.add(messages[0])
        memory.add_all(messages[1:6], user_id="u-1")
        assert memory.messages() == messages[:6]  # cached from here on: appends extend it
        for message in messages[6:12]:
            memory.add(message)
        store.append(app_id, messages[12:], user_id="u-1")
        assert store.cache.read(app_id).messages is not None
        before = memory.messages()
        assert before == messages
        assert before == store.load_window(app_id, store.settings.reload_max)

    flush_private_redis(private_redis, app_id)
    child = window_in_new_process(database_url, private_redis, app_id)

    assert child["was_cached"] is False  # rebuilt from SQL, not read from a surviving cache
    assert child["window"] == as_json(before)
    reloaded = MESSAGE_LIST_ADAPTER.validate_python(child["window"])
    assert reloaded == messages
    requests = [m for m in reloaded if isinstance(m, AiMessage) and m.tool_requests]
    assert [len(m.tool_requests) for m in requests] == [2, 3, 2]
    assert not any(is_synthetic(m) for m in reloaded)
    assert validate(reloaded, "openai") == []
    assert validate(reloaded, "anthropic") == []
    with private_redis.client() as client:
        assert client.exists(window_key(app_id)) == 1  # the new process cached its rebuild


def test_long_conversation_rebuilds_the_reload_max_window(
    database_url: str, private_redis: RedisServer, app_id: str
) -> None:
    """Longer than reload_max: the new process rebuilds ``load_window(app, reload_max)``, with
    the tool group at its edge kept whole."""
    turns = [message for i in range(12) for message in parallel_turn(f"turn{i}")]
    messages = [SystemMessage(text="sys"), *turns, UserMessage(text="bye"), AiMessage(text="ok")]
    with MemoryStore(
        Settings(**settings_for(database_url, private_redis, worker_id=PARENT_WORKER))
    ) as store:
        reload_max = store.settings.reload_max
        assert len(messages) > store.settings.window_size > reload_max
        memory = store.memory(app_id)
        memory.add_all(messages[:10])
        memory.messages()  # cache the window; the rest is appended and trimmed group-safe
        for message in messages[10:]:
            memory.add(message)
        before = memory.messages()
        expected = store.load_window(app_id, reload_max)

    # The newest 50 messages start inside a tool group: the window widens to its request.
    assert len(expected) == reload_max + 1
    assert isinstance(expected[0], AiMessage) and len(expected[0].tool_requests) == 2
    assert expected == messages[-len(expected) :]
    assert before == messages[-len(before) :] and len(before) > len(expected)

    flush_private_redis(private_redis, app_id)
    child = window_in_new_process(database_url, private_redis, app_id)

    assert child["was_cached"] is False
    assert child["window"] == as_json(expected)
    assert validate(MESSAGE_LIST_ADAPTER.validate_python(child["window"]), "openai") == []


def result_rows(database_url: str, app_id: str) -> list[str]:
    engine = sa.create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = sa.select(original.c.tool_call_id).where(
                original.c.app_id == app_id, original.c.message_type == TOOL_RESULT
            )
            return sorted(str(row[0]) for row in conn.execute(query))
    finally:
        engine.dispose()


def test_process_killed_mid_tool_gets_an_interrupted_error_result(
    database_url: str, private_redis: RedisServer, app_id: str
) -> None:
    history = parallel_turn("t1")
    with MemoryStore(
        Settings(**settings_for(database_url, private_redis, worker_id=PARENT_WORKER))
    ) as store:
        store.append(app_id, history)
        assert store.memory(app_id).messages() == history  # cached

    job = {
        "settings": settings_for(database_url, private_redis, worker_id=CHILD_WORKER),
        "app_id": app_id,
        "action": "die_mid_tool",
    }
    with subprocess.Popen(
        **child_command(job), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        try:
            ready, _, _ = select.select([child.stdout], [], [], 60)
            assert ready, "the child did not write its tool request in time"
            line = child.stdout.readline()
            assert line == "READY\n", line + child.stderr.read()
            child.send_signal(signal.SIGKILL)  # dies before read_b's result is stored
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    # A new process, cache intact: the window ends in the open group, answered for the model.
    from_cache = window_in_new_process(database_url, private_redis, app_id)
    assert from_cache["was_cached"] is True
    # A new process after the cache is lost too: rebuilt from SQL with the edge check.
    flush_private_redis(private_redis, app_id)
    rebuilt = window_in_new_process(database_url, private_redis, app_id)
    assert rebuilt["was_cached"] is False
    assert rebuilt["window"] == from_cache["window"]

    window = MESSAGE_LIST_ADAPTER.validate_python(rebuilt["window"])
    assert window[: len(history)] == history
    user, request, real, synthetic = window[len(history) :]
    assert user == UserMessage(text="Now read both files")
    assert isinstance(request, AiMessage)
    assert [c.id for c in request.tool_requests] == ["read_a", "read_b"]
    assert real == ToolResult(id="read_a", tool_name="read_file", text="contents of a")
    assert isinstance(synthetic, ToolResult)
    assert (synthetic.id, synthetic.tool_name) == ("read_b", "read_file")
    assert synthetic.is_error is True and is_synthetic(synthetic)
    assert "interrupted" in synthetic.text
    assert validate(window, "openai") == [] and validate(window, "anthropic") == []
    # The synthetic answer exists only in windows, never in SQL.
    assert result_rows(database_url, app_id) == sorted(["t1-call_1", "t1-call_2", "read_a"])
