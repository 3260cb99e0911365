"""A bounded memo of decoded original rows, so re-reading a window decodes only its new rows.

An agent reads its window before every model call; without a window cache (or after a
miss) each read fetches the newest rows from SQL again, and all but the few appended since
the last read were decoded then. Decoding (pydantic, and opening sealed payloads) is the
largest part of such a read. Messages are immutable all the way down, so one decoded
message can be handed to every reader.

A remembered row is used only when the row read now has the same id, the same app and the
very same payload text: a row whose payload changed (an edit, a re-encryption, a hostile
write) is decoded again. Entries are forgotten oldest first once their estimated memory
passes the budget; an app's entries are forgotten when this process purges it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from memstore.core.window import StoredMessage

ENTRY_OVERHEAD_BYTES = 1_200
"""Estimated bytes of one entry besides its texts: the decoded model's objects, the tuples and
the memo's slot (tracemalloc of a tool-heavy conversation, 550-byte payloads on average:
2.3 KB per remembered row, 1.5 times the estimate with 400 here)."""
LARGEST_SHARE = 64
"""A row whose estimate exceeds 1/64 of the budget is not remembered: one large tool result
would otherwise push out the windows of many apps."""


def estimated_bytes(payload: str) -> int:
    """Rough memory of one remembered row: the payload text kept for the comparison, the
    decoded message holding about as much text again, and the fixed overhead."""
    return 2 * len(payload) + ENTRY_OVERHEAD_BYTES


class RowMemo:
    """Decoded rows by row id, within ``max_bytes`` (estimated; see :func:`estimated_bytes`).

    Safe to share between threads and tasks: lookups are single dictionary reads; changes
    take a lock (they happen only when a row is decoded). ``max_bytes`` of 0 remembers
    nothing.
    """

    __slots__ = ("_apps", "_bytes", "_lock", "_rows", "listener", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.max_bytes = max_bytes
        self._rows: OrderedDict[int, tuple[str, str, StoredMessage]] = OrderedDict()
        self._apps: dict[str, int] = {}
        """How many rows of each app are remembered (a purge of an app with none is free)."""
        self._bytes = 0
        self._lock = threading.Lock()
        self.listener: Callable[[int, int], None] | None = None
        """Told ``(reused, decoded)`` after each read that used the memo (a store's metrics)."""

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def used_bytes(self) -> int:
        """The estimated memory of what is remembered now."""
        return self._bytes

    def get(self, app_id: str, row_id: int, payload: str) -> StoredMessage | None:
        """The remembered row ``row_id`` of ``app_id`` when it was decoded from ``payload``."""
        hit = self._rows.get(row_id)
        if hit is not None and hit[1] == payload and hit[0] == app_id:
            return hit[2]
        return None

    def counted(self, reused: int, decoded: int) -> None:
        """Report one read's rows taken from the memo and decoded anew to the listener."""
        listener = self.listener
        if listener is not None and (reused or decoded):
            listener(reused, decoded)

    def put(self, app_id: str, payload: str, row: StoredMessage) -> None:
        """Remember ``row`` (decoded from ``payload``), forgetting the oldest entries beyond
        the budget."""
        size = estimated_bytes(payload)
        if size * LARGEST_SHARE > self.max_bytes:
            return
        with self._lock:
            rows = self._rows
            old = rows.pop(row.id, None)
            if old is not None:
                self._dropped(old)
            rows[row.id] = (app_id, payload, row)
            self._apps[app_id] = self._apps.get(app_id, 0) + 1
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._dropped(rows.popitem(last=False)[1])

    def forget_app(self, app_id: str) -> int:
        """Forget every row of ``app_id`` (after a purge); how many were remembered."""
        if app_id not in self._apps:
            return 0
        with self._lock:
            gone = [row_id for row_id, entry in self._rows.items() if entry[0] == app_id]
            for row_id in gone:
                self._dropped(self._rows.pop(row_id))
        return len(gone)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._rows.clear()
            self._apps.clear()
            self._bytes = 0

    def _dropped(self, entry: tuple[str, str, StoredMessage]) -> None:
        """Account for ``entry`` leaving the memo (the lock is held)."""
        app_id, payload, _ = entry
        self._bytes -= estimated_bytes(payload)
        left = self._apps[app_id] - 1
        if left:
            self._apps[app_id] = left
        else:
            del self._apps[app_id]


NO_MEMO = RowMemo(0)
"""The memo of reads that should not remember (bulk reloads, which read each app once)."""
