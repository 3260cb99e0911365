"""Every Redis key name memstore uses, for the cache layer: defined in
:mod:`memstore.core.cache_keys` (pure, so the cache decisions in core can name keys too)."""

from __future__ import annotations

from memstore.core.cache_keys import (
    ESCAPE,
    PREFIX,
    WINDOW_PATTERN,
    app_keys,
    generation_key,
    hash_tag,
    heads_key,
    interrupted_key,
    origin_key,
    version_key,
    window_key,
)

__all__ = [
    "ESCAPE",
    "PREFIX",
    "WINDOW_PATTERN",
    "app_keys",
    "generation_key",
    "hash_tag",
    "heads_key",
    "interrupted_key",
    "origin_key",
    "version_key",
    "window_key",
]
