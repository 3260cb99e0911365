"""Every Redis key name memstore uses. No key is spelled anywhere else.

Keys of one app share one non-empty hash tag, so Redis Cluster keeps them on one slot and the
Lua scripts may touch them together. The tag is the app id itself when that is safe
(``memstore:{chat-42}:window``); an app id that is empty, holds ``{`` or ``}``, or starts with
``=`` is written as ``=`` followed by its UTF-8 bytes in hex (``}x`` -> ``memstore:{=7d78}:...``),
so the tag is never empty, never cut short by a brace, and two apps never share a key.
"""

from __future__ import annotations

PREFIX = "memstore"
ESCAPE = "="


def hash_tag(app_id: str) -> str:
    """The text between the braces of the app's keys (never empty, never holds a brace)."""
    if app_id and "{" not in app_id and "}" not in app_id and not app_id.startswith(ESCAPE):
        return app_id
    return ESCAPE + app_id.encode("utf-8").hex()


def _key(app_id: str, part: str) -> str:
    return f"{PREFIX}:{{{hash_tag(app_id)}}}:{part}"


def window_key(app_id: str) -> str:
    """The list of encoded window entries."""
    return _key(app_id, "window")


def interrupted_key(app_id: str) -> str:
    """The set of call ids the cached window answers with a synthetic interrupted result."""
    return _key(app_id, "interrupted")


def version_key(app_id: str) -> str:
    """A counter bumped by every write; a rebuild stores its window only if it is unchanged."""
    return _key(app_id, "version")


def origin_key(app_id: str) -> str:
    """The replication id of the master the window was stored on (a window stored on another
    master, i.e. before a failover that may have lost writes, is a miss)."""
    return _key(app_id, "origin")


def generation_key(app_id: str) -> str:
    """The app's SQL generation the window reflects (an append extends the window only when
    it continues from that generation)."""
    return _key(app_id, "generation")


def heads_key(app_id: str) -> str:
    """The window entries' headers (kinds, call ids, token counts) with the stamp of the
    window they describe, so an append need not read the whole window (see
    :mod:`memstore.cache.scripts`)."""
    return _key(app_id, "heads")


def app_keys(app_id: str) -> tuple[str, str, str, str, str, str]:
    """All keys of one app, in the order the Lua scripts take them (the same names as
    :func:`window_key` and its siblings; every cache call needs them, so built in one go)."""
    base = f"{PREFIX}:{{{hash_tag(app_id)}}}:"
    return (
        base + "window",
        base + "interrupted",
        base + "version",
        base + "origin",
        base + "generation",
        base + "heads",
    )


WINDOW_PATTERN = f"{PREFIX}:{{*}}:window"
"""A SCAN pattern matching every window key."""
