"""Every Redis key name memstore uses. No key is spelled anywhere else.

Keys of one app share the hash tag ``{<app_id>}``, so Redis Cluster keeps them on one slot and
the Lua scripts may touch them together.
"""

from __future__ import annotations

PREFIX = "memstore"


def _key(app_id: str, part: str) -> str:
    return f"{PREFIX}:{{{app_id}}}:{part}"


def window_key(app_id: str) -> str:
    """The list of encoded window entries."""
    return _key(app_id, "window")


def interrupted_key(app_id: str) -> str:
    """The set of call ids the cached window answers with a synthetic interrupted result."""
    return _key(app_id, "interrupted")


def version_key(app_id: str) -> str:
    """A counter bumped by every write; a rebuild stores its window only if it is unchanged."""
    return _key(app_id, "version")


def app_keys(app_id: str) -> tuple[str, str, str]:
    """All keys of one app, in the order the Lua scripts take them."""
    return window_key(app_id), interrupted_key(app_id), version_key(app_id)


WINDOW_PATTERN = f"{PREFIX}:{{*}}:window"
"""A SCAN pattern matching every window key."""
