"""Purge fences: nothing in flight when a purge ran brings the purged data back into a cache.

A rebuild reads the app's cache version, then its rows from SQL, then stores the window only
if the version is unchanged. A purge in between must change the version, also when the app had
none yet (a new app, or one idle past the cache TTL): otherwise the rebuild caches the rows
the purge deleted and every instance serves them until the TTL.
"""

from __future__ import annotations

import uuid

import pytest

from memstore import UserMessage
from memstore.cache import keys
from memstore.cache.base import WindowPolicy
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.window import entry_for
from tests.conftest import CACHES, make_cache

POLICY = WindowPolicy(max_messages=50, ttl_seconds=3600)


@pytest.mark.parametrize("cache_name", CACHES)
@pytest.mark.parametrize("had_version", [True, False])
def test_a_rebuild_racing_a_purge_is_refused(cache_name: str, had_version: bool) -> None:
    cache = make_cache(cache_name, POLICY)
    app = f"fence-{uuid.uuid4().hex[:8]}"
    try:
        if had_version:
            cache.invalidate(app)  # any earlier write leaves a version behind
        elif isinstance(cache, RedisWindowCache):
            cache.client.delete(keys.version_key(app))  # expired with the TTL
        version = cache.read(app).version  # the rebuild starts: a miss
        assert cache.purge(app) >= 0  # the purge commits and drops the app's cache
        rows = [entry_for(UserMessage(text="purged text"))]
        assert not cache.store(app, rows, [], version)  # the rebuild's rows are the old ones
        assert cache.read(app).messages is None
    finally:
        cache.purge(app)
        cache.close()
