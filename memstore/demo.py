"""The quick-start story: an agent turn with parallel tool calls, a restart that loses the
cache, and the window rebuilt from SQL with the tool calls intact."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from memstore.config import Settings
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from memstore.store import MemoryStore

APP_ID = "demo-app"


def describe(message: Message) -> str:
    """One message as a few readable lines."""
    if isinstance(message, UserMessage):
        return f"user        {message.text}"
    if isinstance(message, ToolResult):
        flag = " (error)" if message.is_error else ""
        return f"tool result {message.id} <- {message.text}{flag}"
    if isinstance(message, AiMessage):
        lines = [f"ai          {message.text}"] if message.text else []
        lines += [
            f"ai -> tool  {call.id}: {call.name}({call.arguments})"
            for call in message.tool_requests
        ]
        return "\n".join(lines)
    return f"system      {message.text}"


def _print_window(title: str, messages: list[Message], out: Callable[[str], None]) -> None:
    out(f"\n== {title} ({len(messages)} messages)")
    for message in messages:
        for line in describe(message).splitlines():
            out("  " + line)


def run_demo(database_url: str | None = None, out: Callable[[str], None] = print) -> list[Message]:
    """Run the story on ``database_url`` (a fresh SQLite file by default); return the window."""
    workdir = None
    if database_url is None:
        workdir = tempfile.TemporaryDirectory(prefix="memstore-demo-")
        database_url = f"sqlite:///{Path(workdir.name) / 'demo.db'}"
    settings = Settings(database_url=database_url)
    try:
        with MemoryStore(settings) as store:
            store.migrate()
            store.purge(APP_ID)
            memory = store.memory(APP_ID)
            out(f"database: {database_url}   cache: in-process (no server)")
            turn: list[Message] = [
                UserMessage(text="Create notes.txt and todo.txt, then tell me when you're done."),
                AiMessage(
                    text="I'll create both files.",
                    tool_requests=[
                        ToolRequest(
                            id="call_1",
                            name="write_file",
                            arguments='{"path": "notes.txt", "content": "ideas"}',
                        ),
                        ToolRequest(
                            id="call_2",
                            name="write_file",
                            arguments='{"path": "todo.txt", "content": "- ship"}',
                        ),
                    ],
                ),
                ToolResult(id="call_2", tool_name="write_file", text="wrote 6 bytes"),
                ToolResult(id="call_1", tool_name="write_file", text="wrote 5 bytes"),
                AiMessage(text="Done: notes.txt and todo.txt are created."),
            ]
            memory.add(turn[0])  # the person's message, durable before the model runs
            memory.add_all(turn[1:])  # the agent turn: requests, results, final reply
            before = memory.messages()
            _print_window("memory window before the restart", before, out)
            out("\n== display history (what the person saw)")
            for entry in reversed(store.history(APP_ID)):
                out(f"  {entry.role:<5} " + entry.text.replace("\n", "\n        "))

        out("\n-- simulated restart: the process exits and the cache is lost --")
        with MemoryStore(settings) as store:
            after = store.memory(APP_ID).messages()
            _print_window("memory window rebuilt from SQL", after, out)
            same = after == before
            out(f"\nidentical to the window before the restart: {same}")
            calls = sum(len(m.tool_requests) for m in after if isinstance(m, AiMessage))
            out(f"tool calls present: {calls}")
            return after
    finally:
        if workdir is not None:
            workdir.cleanup()
