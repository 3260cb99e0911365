"""The Claude Agent SDK session store: the SDK's own conformance kit (14 contracts, none
skipped) on every backend of ``tests/adapters/conftest.py`` (SQLite always, PostgreSQL and
MariaDB when their URLs are set; sync and async stores), and what memstore sees of the
transcripts: canonical rows, display history, purge by user, export, check, restart, unicode,
large entries, long keys and concurrent appends."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import SessionKey, SessionStore, get_session_messages_from_store
from claude_agent_sdk.testing import run_session_store_conformance

from memstore.adapters.claude_agent_sdk import (
    ENTRY_KEY,
    MemstoreSessionStore,
    entry_to_message,
    parse_app_id,
    session_app_id,
)
from memstore.messages import AiMessage, SystemMessage, ToolResult, UserMessage
from memstore.operations import check_app, purge_user
from tests.adapters.conftest import AdapterEnv

OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
BIG = "a line of a file, é and 🌍\n" * 12_000  # ~330 KB, over the 64 KiB metadata limit


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def key(session_id: str | None = None, project: str = "proj", **extra: str) -> SessionKey:
    out: dict[str, str] = {"project_key": project, "session_id": session_id or str(uuid.uuid4())}
    out.update(extra)
    return out  # type: ignore[return-value]


def turn(session_id: str, text: str = "Add 1 and 2", call_id: str = "toolu_1") -> list[Any]:
    """A user prompt, a tool call, its result and the reply, as the CLI writes them."""

    def line(kind: str, n: int, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": kind,
            "uuid": f"{call_id}-{n}",
            "sessionId": session_id,
            "timestamp": f"2026-01-01T00:00:0{n}.000Z",
            "message": message,
        }

    call = {"type": "tool_use", "id": call_id, "name": "add", "input": {"a": 1, "b": 2}}
    result = {"type": "tool_result", "tool_use_id": call_id, "content": "3"}
    return [
        line("user", 1, {"role": "user", "content": text}),
        line("assistant", 2, {"role": "assistant", "content": [call]}),
        line("user", 3, {"role": "user", "content": [result]}),
        line("assistant", 4, {"role": "assistant", "content": [{"type": "text", "text": "3"}]}),
        {"type": "custom-title", "customTitle": "Adding", "sessionId": session_id},
    ]


def test_the_sdk_kit_passes_with_every_optional_method(env: AdapterEnv) -> None:
    store = env.store()
    probe = MemstoreSessionStore(store, namespace=namespace())
    for method in OPTIONAL:  # how the kit tells an implemented optional method
        assert getattr(type(probe), method) is not getattr(SessionStore, method), method
    env.run(
        run_session_store_conformance(lambda: MemstoreSessionStore(store, namespace=namespace()))
    )


def test_entries_become_canonical_rows(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(env.store(), namespace=namespace(), user_id="u-1")
    k = key()
    entries = turn(k["session_id"])
    env.run(sessions.append(k, entries[:2]))
    env.run(sessions.append(k, entries[2:]))
    assert env.run(sessions.load(k)) == entries
    app = sessions.app_id(k)
    window = env.sync_store().load_window(app)
    assert [type(m) for m in window] == [
        UserMessage,
        AiMessage,
        ToolResult,
        AiMessage,
        SystemMessage,
    ]
    assert window[0].text == "Add 1 and 2"
    assert isinstance(window[1], AiMessage)
    assert window[1].tool_requests[0].name == "add"
    assert window[1].tool_requests[0].arguments == '{"a": 1, "b": 2}'
    assert isinstance(window[2], ToolResult)
    assert (window[2].tool_name, window[2].text) == ("add", "3")
    assert window[4].text == ""  # the title line: an opaque row
    cached = sessions._access.sync_store().memory(app)  # the store the appends went through
    assert cached.messages() == window
    env.run(sessions.append(k, turn(k["session_id"], "Again", call_id="toolu_2")))
    assert cached.messages() == env.sync_store().load_window(app)
    shown = [(e.role, e.text) for e in reversed(env.sync_store().history(app))]
    assert shown[0] == ("user", "Add 1 and 2") and ("user", "Again") in shown
    assert check_app(env.sync_store(), app) == []
    exported = list(env.sync_store().export(app_ids=[app]))
    originals = [r for r in exported if r.get("record") == "original"]
    assert [r["message"]["metadata"][ENTRY_KEY] for r in originals] == env.run(sessions.load(k))
    messages = env.run(get_session_messages_from_store(sessions, k["session_id"], None))
    assert messages == [] or messages[0].type == "user"  # no directory: another project key


def test_a_batch_sent_again_after_it_landed_is_stored_once(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(env.store(), namespace=namespace())
    k = key()
    entries = turn(k["session_id"])
    env.run(sessions.append(k, entries))
    env.run(sessions.append(k, entries))  # the title line has no uuid: stored again
    assert env.run(sessions.load(k)) == entries + entries[-1:]
    assert check_app(env.sync_store(), sessions.app_id(k)) == []


def test_purge_by_user_removes_the_session_and_its_listing(env: AdapterEnv) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    sessions = MemstoreSessionStore(env.store(), namespace=namespace(), user_id=user)
    k = key()
    sub = key(k["session_id"], subpath="subagents/agent-1")
    env.run(sessions.append(k, turn(k["session_id"])))
    env.run(sessions.append(sub, turn(k["session_id"], call_id="toolu_s")))
    assert [s["session_id"] for s in env.run(sessions.list_sessions("proj"))] == [k["session_id"]]
    purge_user(env.sync_store(), user)
    assert env.run(sessions.load(k)) is None
    assert env.run(sessions.load(sub)) is None
    assert env.run(sessions.list_sessions("proj")) == []
    assert env.run(sessions.list_subkeys(k)) == []


def test_a_user_id_per_key(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(
        env.store(), namespace=namespace(), user_id=lambda k: f"tenant-{k['project_key']}"
    )
    k = key(project=f"p{uuid.uuid4().hex[:6]}")
    env.run(sessions.append(k, turn(k["session_id"])))
    rows = env.sync_store().history(sessions.app_id(k))
    assert {row.user_id for row in rows} == {f"tenant-{k['project_key']}"}


def test_a_new_store_on_the_same_database_resumes(env: AdapterEnv) -> None:
    ns = namespace()
    k = key()
    sub = key(k["session_id"], subpath="subagents/agent-1")
    entries = turn(k["session_id"])
    first = MemstoreSessionStore(env.store(), namespace=ns)
    env.run(first.append(k, entries))
    env.run(first.append(sub, entries[:1]))
    again = MemstoreSessionStore(env.store(), namespace=ns)
    assert env.run(again.load(k)) == entries
    assert env.run(again.list_subkeys(k)) == ["subagents/agent-1"]
    summaries = env.run(again.list_session_summaries("proj"))
    assert [s["data"].get("custom_title") for s in summaries] == ["Adding"]


def test_unicode_large_and_odd_entries_round_trip(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(env.store(), namespace=namespace())
    k = key(project="プロジェクト:100%~x", session_id="séance/🌍:1")
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": BIG}],
    }
    entries: list[Any] = [
        {"type": "user", "message": {"role": "user", "content": "¿qué tal? 你好 🌍"}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "ü"}},
                ],
            },
        },
        {"type": "user", "message": {"role": "user", "content": [result]}},
        {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result"}]}},
        {"type": "x", "n": 1.5, "deep": [[{"a": None, "b": True}]], "empty": {}},
    ]
    env.run(sessions.append(k, entries))
    assert env.run(sessions.load(k)) == entries
    window = env.sync_store().load_window(sessions.app_id(k))
    assert isinstance(window[2], ToolResult) and window[2].text == BIG
    assert parse_app_id(sessions.app_id(k)) == {
        "project_key": k["project_key"],
        "session_id": k["session_id"],
    }
    listed = env.run(sessions.list_sessions(k["project_key"]))
    assert [s["session_id"] for s in listed] == [k["session_id"]]


def test_long_keys_get_a_hashed_part_and_still_list(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(env.store(), namespace=namespace())
    project = "-home-someone-" + "deeply-nested-directory-" * 10
    k = key(project=project)
    sub = key(k["session_id"], project=project, subpath="subagents/" + "agent-" * 20 + "1")
    env.run(sessions.append(k, [{"type": "x"}]))
    env.run(sessions.append(sub, [{"type": "y"}]))
    assert len(sessions.app_id(sub)) <= 128 and "~" in sessions.app_id(sub)
    assert parse_app_id(sessions.app_id(k)) is None
    assert env.run(sessions.load(sub)) == [{"type": "y"}]
    assert [s["session_id"] for s in env.run(sessions.list_sessions(project))] == [k["session_id"]]
    assert env.run(sessions.list_subkeys(k)) == [sub["subpath"]]  # type: ignore[typeddict-item]
    env.run(sessions.delete(k))
    assert env.run(sessions.load(sub)) is None


def test_concurrent_appends_to_one_session_from_tasks(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(env.store(), namespace=namespace())
    k = key()

    async def writer(name: str) -> None:
        for n in range(8):
            await sessions.append(k, [{"type": "x", "w": name, "n": n, "customTitle": name}])

    async def both() -> None:
        await asyncio.gather(writer("a"), writer("b"))

    env.run(both())
    loaded = env.run(sessions.load(k)) or []
    assert len(loaded) == 16
    for name in "ab":
        assert [e["n"] for e in loaded if e["w"] == name] == list(range(8))
    (summary,) = env.run(sessions.list_session_summaries("proj"))
    assert summary["data"]["custom_title"] == loaded[-1]["w"]  # the last fold saw every batch


def test_concurrent_appends_from_threads(env: AdapterEnv) -> None:
    sessions = MemstoreSessionStore(env.sync_store(), namespace=namespace())
    k = key()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for n in range(6):
                asyncio.run(sessions.append(k, [{"type": "x", "w": name, "n": n}]))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    loaded = asyncio.run(sessions.load(k)) or []
    for name in "ab":
        assert [e["n"] for e in loaded if e["w"] == name] == list(range(6))


def test_app_ids_and_entry_rows() -> None:
    k = key("s-1", project="-srv-app")
    assert session_app_id(k) == "claude:-srv-app:s-1"
    sub = key("s-1", project="-srv-app", subpath="subagents/agent-7")
    assert session_app_id(sub, "ns") == "ns:-srv-app:s-1:subagents/agent-7"
    assert parse_app_id("ns:-srv-app:s-1:subagents/agent-7") == sub
    assert parse_app_id("plain-app") is None
    both = {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result"}] * 2}}
    row = entry_to_message(both)  # type: ignore[arg-type]
    assert isinstance(row, SystemMessage) and row.metadata[ENTRY_KEY] == both
    with pytest.raises(Exception, match="namespace"):
        MemstoreSessionStore(object(), namespace="a:b")  # type: ignore[arg-type]
