"""A store in a child process, driven over a pipe by the multi-process cache tests.

Each worker is one process with its own in-process window cache (the embedded default), as
a gunicorn worker would be.
"""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection
from typing import Any

from memstore import MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore


def serve(conn: Connection, url: str, worker_id: int, flavor: str) -> None:
    """Answer ``(command, app_id, text)`` requests until ``close``; errors are sent back."""
    settings = Settings(database_url=url, worker_id=worker_id)
    if flavor == "async":
        asyncio.run(_serve_async(conn, settings))
        return
    store = MemoryStore(settings)
    try:
        while True:
            command, app_id, text = conn.recv()
            if command == "close":
                return
            try:
                conn.send(("ok", _run(store, command, app_id, text)))
            except Exception as error:  # reported to the test, which fails with it
                conn.send(("error", repr(error)))
    finally:
        store.close()


def _run(store: MemoryStore, command: str, app_id: str, text: str) -> Any:
    if command == "append":
        return store.append(app_id, [UserMessage(text=text)])
    if command == "read":
        return [m.text for m in store.memory(app_id).messages()]  # type: ignore[union-attr]
    if command == "purge":
        return store.purge(app_id).original_rows
    raise ValueError(command)


async def _serve_async(conn: Connection, settings: Settings) -> None:
    store = AsyncMemoryStore(settings)
    try:
        while True:
            command, app_id, text = conn.recv()
            if command == "close":
                return
            try:
                if command == "append":
                    result: Any = await store.append(app_id, [UserMessage(text=text)])
                elif command == "read":
                    window = await store.memory(app_id).messages()
                    result = [m.text for m in window]  # type: ignore[union-attr]
                elif command == "purge":
                    result = (await store.purge(app_id)).original_rows
                else:
                    raise ValueError(command)
                conn.send(("ok", result))
            except Exception as error:
                conn.send(("error", repr(error)))
    finally:
        await store.close()
