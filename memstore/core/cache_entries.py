"""What a window cache holds and hands back, as plain data: the policy, a read's result, the
decoded-window memo, and the entry encoding the Lua scripts read. Pure (no I/O), so the cache
decisions in :mod:`memstore.core.cache_plan` use them; :mod:`memstore.cache.base` re-exports
them for the cache layer."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from memstore.config import Settings
from memstore.core.crypto import CACHE_ENTRY, PLAIN, RowCipher
from memstore.core.rows import encode_message
from memstore.core.window import WindowEntry
from memstore.messages import MESSAGE_LIST_ADAPTER, STORED, Message

ID_SEPARATOR = "\x1f"
TOKENS_SEPARATOR = "\x1d"
HEADER_END = "\x1e"


@dataclass(frozen=True, slots=True)
class WindowPolicy:
    """How big a cached window may grow and how long it lives."""

    max_messages: int
    ttl_seconds: int
    start_at_user: bool = False
    max_tokens: int | None = None
    """Token budget the append trim keeps (entries carry their counts); ``None``: none."""
    cipher: RowCipher = PLAIN
    """Seals the message of every Redis entry (the in-process caches keep objects and ignore
    it); :data:`~memstore.core.crypto.PLAIN`: entries are stored as JSON."""

    @classmethod
    def from_settings(cls, settings: Settings) -> WindowPolicy:
        sealed = settings.encryption_keys and settings.encrypt_cache
        return cls(
            max_messages=settings.window_size,
            ttl_seconds=settings.cache_ttl_seconds,
            start_at_user=settings.window_start_at_user,
            max_tokens=settings.window_max_tokens,
            cipher=RowCipher(settings.encryption_keys) if sealed else PLAIN,
        )


@dataclass(frozen=True, slots=True)
class CachedWindow:
    """A cache read: the window (``None`` on a miss) and the version to guard a rebuild with."""

    messages: list[Message] | None
    version: str
    generation: int | None = None
    """The app's SQL generation the window was built at (the in-process cache keeps it, so
    the store can tell a window that misses another process's write; ``None`` elsewhere)."""
    stamp: str = ""
    """The Redis window's stamp (see :class:`WindowMemo`); ``""`` elsewhere."""


class WindowMemo:
    """The Redis windows this process decoded last, by app, with each window's *stamp*.

    Every change of a Redis window's content gives it a new random stamp (see
    :mod:`memstore.cache.scripts`), so a read that finds the window still at the stamp of the
    decoded copy gets no entries from Redis and serves the copy: the same messages, without
    the transfer and the decoding. Messages are immutable; each read gets a new list. At most
    ``max_apps`` windows, the least recently used dropped first. Like the in-process cache it
    holds decoded (opened) messages in this process's memory only.
    """

    def __init__(self, max_apps: int = 1024) -> None:
        self._max_apps = max_apps
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[str, tuple[Message, ...]]] = {}

    def stamp(self, app_id: str) -> str:
        """The stamp of the app's decoded window (``""``: none)."""
        held = self._windows.get(app_id)
        return "" if held is None else held[0]

    def get(self, app_id: str, stamp: str) -> list[Message] | None:
        """A new list of the decoded window when it is at ``stamp``, else ``None``."""
        with self._lock:
            held = self._windows.pop(app_id, None)
            if held is None or held[0] != stamp:
                return None
            self._windows[app_id] = held  # most recently used last
        return list(held[1])

    def put(self, app_id: str, stamp: str, messages: Sequence[Message]) -> None:
        """Remember the window at ``stamp`` (``""``: forget the app's window)."""
        with self._lock:
            self._windows.pop(app_id, None)
            if not stamp or self._max_apps < 1:
                return
            self._windows[app_id] = (stamp, tuple(messages))
            while len(self._windows) > self._max_apps:
                del self._windows[next(iter(self._windows))]

    def forget(self, app_id: str) -> None:
        with self._lock:
            self._windows.pop(app_id, None)

    def clear(self) -> None:
        with self._lock:
            self._windows.clear()


def encode_entry(entry: WindowEntry, app_id: str = "", cipher: RowCipher = PLAIN) -> bytes:
    """``<kind><call ids joined by 0x1f>[<0x1d><tokens>]<0x1e><message JSON>``, readable by the
    Lua scripts (the token count only when it is not 0). With an enabled ``cipher`` the
    message JSON is sealed, bound to ``app_id`` and the entry's header (the Lua scripts still
    read kinds, call ids and token counts)."""
    counted = f"{TOKENS_SEPARATOR}{entry.tokens}" if entry.tokens else ""
    header = entry.kind + ID_SEPARATOR.join(entry.call_ids) + counted
    body = encode_message(entry.message) if entry.body is None else entry.body.encode("utf-8")
    if cipher.enabled:
        body = cipher.seal_bytes(body, CACHE_ENTRY, app_id, header)
    return (header + HEADER_END).encode("utf-8") + body


def decode_entries(
    raw: Sequence[bytes], app_id: str = "", cipher: RowCipher = PLAIN
) -> list[Message]:
    """Decode a whole window in one validation pass (opening sealed entries first)."""
    if cipher.enabled:
        bodies = []
        for item in raw:
            end = item.index(b"\x1e")
            header = item[:end].decode("utf-8")
            bodies.append(cipher.open_bytes(item[end + 1 :], CACHE_ENTRY, app_id, header))
    else:
        bodies = [item[item.index(b"\x1e") + 1 :] for item in raw]
    return MESSAGE_LIST_ADAPTER.validate_json(b"[" + b",".join(bodies) + b"]", context=STORED)
