"""A writer in a child process for the staleness tests: its Redis link goes through a proxy.

Commands over a pipe: ``("append", app_id, text)`` answers the wall-clock time the call
started (before its transaction) and how long it took; ``("read", app_id, "")`` the window's
texts; ``("close", "", "")`` ends it. The test SIGKILLs it to model a writer that died.
"""

from __future__ import annotations

import asyncio
import time
from multiprocessing.connection import Connection
from typing import Any

from memstore import MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore


def serve(conn: Connection, settings: Settings, flavor: str) -> None:
    if flavor == "async":
        asyncio.run(_serve_async(conn, settings))
        return
    with MemoryStore(settings) as store:
        while True:
            command, app_id, text = conn.recv()
            if command == "close":
                return
            try:
                started = time.time()
                if command == "append":
                    store.append(app_id, [UserMessage(text=text)])
                    result: Any = (started, time.time() - started)
                else:
                    result = [m.text for m in store.memory(app_id).messages()]  # type: ignore[union-attr]
                conn.send(("ok", result))
            except Exception as error:  # reported to the test, which fails with it
                conn.send(("error", repr(error)))


async def _serve_async(conn: Connection, settings: Settings) -> None:
    async with AsyncMemoryStore(settings) as store:
        while True:
            command, app_id, text = conn.recv()
            if command == "close":
                return
            try:
                started = time.time()
                if command == "append":
                    await store.append(app_id, [UserMessage(text=text)])
                    result: Any = (started, time.time() - started)
                else:
                    window = await store.memory(app_id).messages()
                    result = [m.text for m in window]  # type: ignore[union-attr]
                conn.send(("ok", result))
            except Exception as error:
                conn.send(("error", repr(error)))
