"""What ``<!-- docs-test: given NAME -->`` prepares before a ``bash`` block runs.

Run as ``python -m tests.docs.given_shell NAME...`` in the page's scratch folder, in page order
(so the store is the one the page's commands use, as the page left it). Each fixture prepares
files or rows there and may print shell assignments (``NAME=value``), which the page's shell
evaluates: the variables a block takes as already set. Every fixture can run twice.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.sql import admin


def _turn(city: str) -> list[UserMessage | AiMessage | ToolResult]:
    return [
        UserMessage(text=f"weather in {city}?"),
        AiMessage(tool_requests=[ToolRequest(id="w1", name="weather", arguments="{}")]),
        ToolResult(id="w1", tool_name="weather", text="rain, 7C"),
        AiMessage(text="It rains."),
    ]


def sample_store() -> dict[str, str]:
    """The configured store (the embedded default: ``memstore.db`` here), at head, holding the
    apps the docs name: ``support-42`` (written for user ``u-1``) and ``app-42`` (for user
    ``u-7``, whom the docs purge and export by user)."""
    with MemoryStore(Settings.from_env()) as store:
        store.migrate()
        known = set(admin.iter_app_ids(store.engine))
        for app, city, user in (("support-42", "Oslo", "u-1"), ("app-42", "Bergen", "u-7")):
            if app not in known:
                store.append(app, _turn(city), user_id=user)
    return {}


_AGENTS_ITEMS = [
    {"role": "user", "content": "weather in Oslo?"},
    {"type": "function_call", "call_id": "w1", "name": "weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "w1", "output": "rain, 7C"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "It rains.", "annotations": []}],
    },
]
_LANGCHAIN4J_MEMORY = [
    {"contents": [{"text": "Weather in Oslo?", "type": "TEXT"}], "type": "USER"},
    {"text": "Rain in Oslo.", "toolExecutionRequests": [], "attributes": {}, "type": "AI"},
]


def import_sources() -> dict[str, str]:
    """The other stores' files the import examples read: ``agents.db`` (an OpenAI Agents SDK
    ``SQLiteSession`` file, the SDK's tables), ``memories.json`` (LangChain4j memories by id)
    and ``memory-42.json`` (one LangChain4j memory)."""
    agents = Path("agents.db")
    if not agents.exists():
        conn = sqlite3.connect(agents)
        with conn:
            conn.execute(
                "CREATE TABLE agent_sessions (session_id TEXT PRIMARY KEY, "
                "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
                "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)"
            )
            conn.execute(
                "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "session_id TEXT NOT NULL, message_data TEXT NOT NULL, "
                "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)"
            )
            conn.execute("INSERT INTO agent_sessions (session_id) VALUES ('trip')")
            conn.executemany(
                "INSERT INTO agent_messages (session_id, message_data) VALUES ('trip', ?)",
                [(json.dumps(item),) for item in _AGENTS_ITEMS],
            )
        conn.close()
    Path("memories.json").write_text(json.dumps({"m-1": _LANGCHAIN4J_MEMORY}))
    Path("memory-42.json").write_text(json.dumps(_LANGCHAIN4J_MEMORY))
    return {}


def rotation_keys() -> dict[str, str]:
    """``OLD_KEY`` and ``NEW_KEY``: two AES-256 keys (base64), as an operator rotating holds."""
    return {name: base64.b64encode(os.urandom(32)).decode() for name in ("OLD_KEY", "NEW_KEY")}


FIXTURES: dict[str, Callable[[], dict[str, str]]] = {
    "sample_store": sample_store,
    "import_sources": import_sources,
    "rotation_keys": rotation_keys,
}


def main(names: list[str]) -> None:
    for name in names:
        for variable, value in FIXTURES[name]().items():
            print(f"{variable}={shlex.quote(value)}")


if __name__ == "__main__":
    main(sys.argv[1:])
