"""A Claude Agent SDK session kept in memstore, read back after a restart.

Runs as is (``python examples/claude_agent_sdk_session.py``), with no API key and no network:
the transcript lines below are what the SDK hands its ``session_store`` while an agent runs
(``append(key, entries)`` after each turn). In your service, pass the store in the options
and let the SDK do the appends::

    options = ClaudeAgentOptions(session_store=MemstoreSessionStore(store))
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from claude_agent_sdk import (
    SessionKey,
    get_session_messages_from_store,
    list_sessions_from_store,
    project_key_for_directory,
)

from memstore import MemoryStore, Settings, ToolResult
from memstore.adapters.claude_agent_sdk import MemstoreSessionStore

PROJECT = "/srv/calculator"  # the agent's working directory names the project


def line(kind: str, message: dict[str, object], session_id: str, n: int) -> dict[str, object]:
    """One transcript line as the Claude Code CLI writes it."""
    return {
        "type": kind,
        "uuid": f"00000000-0000-4000-8000-{n:012d}",
        "parentUuid": None if n == 1 else f"00000000-0000-4000-8000-{n - 1:012d}",
        "sessionId": session_id,
        "timestamp": f"2026-01-01T00:00:0{n}.000Z",
        "cwd": PROJECT,
        "isSidechain": False,
        "message": message,
    }


def transcript(session_id: str) -> list[Any]:
    """A turn: the user asks, the model calls a tool, the tool answers, the model replies."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"}
    reply = {"type": "text", "text": "1 + 2 = 3"}
    return [
        line("user", {"role": "user", "content": "Add 1 and 2"}, session_id, 1),
        line("assistant", {"role": "assistant", "content": [call]}, session_id, 2),
        line("user", {"role": "user", "content": [result]}, session_id, 3),
        line("assistant", {"role": "assistant", "content": [reply]}, session_id, 4),
    ]


async def main() -> None:
    settings = Settings(database_url="sqlite:///claude-example.db")
    session_id = str(uuid.uuid4())
    key: SessionKey = {"project_key": project_key_for_directory(PROJECT), "session_id": session_id}

    # The first process: the SDK mirrors the turn into memstore.
    with MemoryStore(settings) as store:
        store.migrate()
        session_store = MemstoreSessionStore(store)
        await session_store.append(key, transcript(session_id))
        print("App id:", session_store.app_id(key))

    # A restart: a new store on the same database has the whole session.
    with MemoryStore(settings) as store:
        session_store = MemstoreSessionStore(store)
        entries = await session_store.load(key)
        print(f"Resumed {len(entries or [])} entries")
        sessions = await list_sessions_from_store(session_store, directory=PROJECT)
        print("Sessions:", [info.summary for info in sessions if info.session_id == session_id])
        messages = await get_session_messages_from_store(session_store, session_id, PROJECT)
        print("Last reply:", messages[-1].message["content"][0]["text"])
        # memstore sees the tool call as canonical rows (window, display history, check)
        window = store.memory(session_store.app_id(key)).messages()
        tool = next(m for m in window if isinstance(m, ToolResult))
        print(f"Tool {tool.tool_name} returned {tool.text}; doubled: {int(tool.text) * 2}")
        await session_store.delete(key)


if __name__ == "__main__":
    asyncio.run(main())
