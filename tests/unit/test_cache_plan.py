"""The Redis cache's pure decisions: key hash tags, URL forms, per-route failure state."""

from __future__ import annotations

import fakeredis
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from memstore.cache import keys
from memstore.cache.base import WindowPolicy
from memstore.cache.redis_window import RedisWindowCache
from memstore.core import cache_plan
from memstore.core.cache_plan import CacheState
from memstore.core.redis_url import parse_redis_url
from memstore.core.window import entry_for
from memstore.messages import UserMessage
from memstore.metrics import Metrics

POLICY = WindowPolicy(max_messages=10, ttl_seconds=60)


@given(st.text())
def test_every_key_of_an_app_hashes_to_one_slot_by_a_non_empty_tag(app_id: str) -> None:
    tag = keys.hash_tag(app_id)
    assert tag and "{" not in tag and "}" not in tag
    slots = {key_slot(key.encode()) for key in keys.app_keys(app_id)}
    assert slots == {key_slot(tag.encode())}


@given(st.text(), st.text())
def test_two_apps_never_share_a_key(first: str, second: str) -> None:
    if first != second:
        assert keys.window_key(first) != keys.window_key(second)


def test_plain_app_ids_keep_their_readable_keys() -> None:
    assert keys.window_key("chat-42") == "memstore:{chat-42}:window"
    assert keys.window_key("}x") == "memstore:{=7d78}:window"
    assert keys.window_key("=7d78") == "memstore:{=3d37643738}:window"


def test_url_forms() -> None:
    plain = parse_redis_url("redis://localhost:6379/2")
    assert plain.kind == "plain"
    cluster = parse_redis_url("rediss+cluster://user:p%40ss@a:7000,b:7001/")
    assert cluster.kind == "cluster" and cluster.tls
    assert cluster.nodes == (("a", 7000), ("b", 7001))
    assert (cluster.username, cluster.password) == ("user", "p@ss")
    sentinel = parse_redis_url("redis+sentinel://s1:26379,s2:26379/mymaster/3")
    assert sentinel.kind == "sentinel" and not sentinel.tls
    assert sentinel.master_name == "mymaster" and sentinel.db == 3
    assert parse_redis_url("redis+sentinel://[::1]:26379/m").nodes == (("::1", 26379),)


@pytest.mark.parametrize(
    "url",
    [
        "http://x:1",
        "redis+cluster://",
        "redis+cluster://a:7000/3",
        "redis+cluster://a",
        "redis+sentinel://s:26379",
        "redis+sentinel://s:26379/m/x",
        "redis+sentinel://s:99999/m",
    ],
)
def test_bad_urls_raise_without_echoing_secrets(url: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_redis_url(url.replace("://", "://u:secret@", 1) if "@" not in url else url)
    assert "secret" not in str(caught.value)


def route_of(app_id: str) -> str:
    return app_id.split("/")[0]


def test_a_failed_route_rests_while_other_routes_go() -> None:
    metrics = Metrics()
    state = CacheState(1.0, metrics)
    read_a = cache_plan.read_call("a/1", POLICY)
    assert state.begin(read_a, "a", 0.0, route_of) == cache_plan.Go("a")
    state.failed(read_a, "a", redis.TimeoutError("slow"), 0.0, cluster=True)
    assert state.begin(read_a, "a", 0.5, route_of) is None  # resting: SQL
    read_b = cache_plan.read_call("b/1", POLICY)
    assert state.begin(read_b, "b", 0.5, route_of) == cache_plan.Go("b")
    go = state.begin(read_a, "a", 1.0, route_of)  # rested: retry, refresh the view first
    assert go is not None and go.refresh
    state.refreshed("a")
    state.succeeded("a")
    assert state.begin(read_a, "a", 1.1, route_of) == cache_plan.Go("a")
    snapshot = metrics.snapshot()
    assert snapshot["cache_errors"] == 1 and snapshot["cache_fallbacks"] == 2


def test_a_skipped_write_marks_its_app_dirty_and_is_replayed_on_its_route() -> None:
    seen: list[str] = []
    state = CacheState(1.0)
    state.add_dirty_listener(seen.append)
    append = cache_plan.append_call("a/1", POLICY, [], 0, 1)
    state.failed(append, "a", redis.ConnectionError("down"), 0.0, cluster=False)
    state.begin(cache_plan.append_call("a/1", POLICY, [], 1, 2), "a", 0.1, route_of)  # resting
    state.begin(cache_plan.invalidate_call("a/2", POLICY), "a", 0.2, route_of)  # resting
    assert seen == ["a/1", "a/1", "a/2"] and state.dirty_apps() == ["a/1", "a/2"]
    other = state.begin(cache_plan.read_call("b/9", POLICY), "b", 0.3, route_of)
    assert other == cache_plan.Go("b")  # another shard's dirty apps are not its business
    go = state.begin(cache_plan.read_call("a/2", POLICY), "a", 2.0, route_of)
    assert go is not None and go.replay == [("a/2", 3), ("a/1", 2)]  # the app itself first
    state.mark_dirty("a/1")  # a write failing on another thread while a/1 is dropped
    state.cleaned("a/2", 3)
    state.cleaned("a/1", 2)
    assert state.is_dirty("a/1") and not state.is_dirty("a/2")  # a/1 stays dirty
    assert seen == ["a/1", "a/1", "a/2", "a/1"]  # the listener hears every skipped update


def test_a_drop_planned_before_a_mark_never_clears_it_even_after_another_drop() -> None:
    """Two threads plan a drop of the same dirty app; the first drop clears it; the app's
    writer then fails as often again before the second thread reports its drop (which may
    have run before those writes committed). The app stays dirty: a count of marks would be
    back to the value the second plan saw and would clear it."""
    state = CacheState(1.0)
    append = cache_plan.append_call("a/1", POLICY, [], 0, 1)
    for _ in range(3):
        state.mark_dirty("a/1")
    first = state.begin(append, "a", 0.0, route_of)
    second = state.begin(append, "a", 0.0, route_of)
    assert first is not None and second is not None and first.replay == second.replay
    [(app, mark)] = first.replay
    state.cleaned(app, mark)  # the first thread's drop ran
    assert not state.is_dirty("a/1")
    for _ in range(3):  # three writes of the app fail meanwhile
        state.mark_dirty("a/1")
    [(app, mark)] = second.replay
    state.cleaned(app, mark)  # the second thread's drop, maybe before those writes
    assert state.is_dirty("a/1")
    third = state.begin(append, "a", 0.0, route_of)
    assert third is not None and [app for app, _ in third.replay] == ["a/1"]
    state.cleaned(*third.replay[0])
    assert not state.is_dirty("a/1")


def test_a_read_is_never_dirtying_and_a_failed_read_has_no_version() -> None:
    state = CacheState(1.0)
    moved = redis.ResponseError("MOVED 1 x:1")
    state.failed(cache_plan.read_call("a", POLICY), "", moved, 0, cluster=False)
    assert state.dirty_apps() == []
    assert cache_plan.read_outcome(None).version == cache_plan.UNAVAILABLE
    assert cache_plan.store_call("a", POLICY, cache_plan.UNAVAILABLE, [], []) is None
    hint = cache_plan.failure_hint(redis.ResponseError("MOVED 1 x:1"), cluster=False)
    assert "redis+cluster://" in hint


def test_an_append_carries_its_generation_step_or_drops_the_window() -> None:
    guarded = cache_plan.append_call("a", POLICY, [], 4, 5)
    assert guarded.script == "append" and guarded.args[4:6] == [4, 5]
    assert guarded.dirties
    unguarded = cache_plan.append_call("a", POLICY, [])  # a writer without its step
    assert unguarded == cache_plan.invalidate_call("a", POLICY)
    stored = cache_plan.store_call("a", POLICY, "r/1", [entry_for(UserMessage(text="x"))], [], 7)
    assert stored is not None and stored.args[2] == 7
    unknown = cache_plan.store_call("a", POLICY, "r/1", [entry_for(UserMessage(text="x"))], [])
    assert unknown is not None and unknown.args[2] == ""


def test_the_redis_window_follows_the_generation_steps() -> None:
    """On fakeredis: appends apply only at their ``before``; others drop the window."""
    cache = RedisWindowCache(fakeredis.FakeRedis(), POLICY)
    one, two = entry_for(UserMessage(text="one")), entry_for(UserMessage(text="two"))
    assert cache.store("g", [one], [], cache.read("g").version, 3)
    cache.append("g", [], before=3, after=4)  # display-only: the window stays current
    cache.append("g", [two], before=4, after=5)
    assert cache.read("g").messages == [one.message, two.message]
    cache.append("g", [two], before=4, after=5)  # a late repeat: dropped, never doubled
    assert cache.read("g").messages is None
    assert cache.store("g", [one], [], cache.read("g").version, 5)
    cache.append("g", [two], before=6, after=7)  # an earlier write's append is still due
    assert cache.read("g").messages is None
    assert cache.store("g", [one], [], cache.read("g").version)  # generation unknown
    cache.append("g", [two], before=0, after=1)
    assert cache.read("g").messages is None


def test_a_read_of_an_unchanged_window_gets_no_entries_and_serves_the_decoded_copy() -> None:
    """On fakeredis: the READ reply carries entries only when the window's stamp moved."""
    client = fakeredis.FakeRedis()
    cache = RedisWindowCache(client, POLICY)
    one, two = entry_for(UserMessage(text="one")), entry_for(UserMessage(text="two"))
    assert cache.store("m", [one], [], cache.read("m").version, 3)
    first = cache.read("m")
    assert first.messages == [one.message] and first.stamp
    replies = []
    script = cache._scripts["read"]
    cache._scripts["read"] = lambda **kw: replies.append(script(**kw)) or replies[-1]
    again = cache.read("m")
    assert again.messages == [one.message] and len(replies[-1]) == 2  # no entries sent
    again.messages.append(two.message)  # the caller's list: the copy is not changed
    assert cache.read("m").messages == [one.message]
    cache.append("m", [two], before=3, after=4)  # a new stamp: the next read decodes
    moved = cache.read("m")
    assert moved.messages == [one.message, two.message] and len(replies[-1]) == 3
    assert moved.stamp != first.stamp
    cache.append("m", [], before=4, after=5)  # display-only: same content, same stamp
    assert cache.read("m").stamp == moved.stamp and len(replies[-1]) == 2


def test_a_window_gone_or_stored_by_an_older_memstore_is_never_served_from_the_copy() -> None:
    client = fakeredis.FakeRedis()
    cache = RedisWindowCache(client, POLICY)
    one = entry_for(UserMessage(text="one"))
    assert cache.store("o", [one], [], cache.read("o").version, 1)
    assert cache.read("o").messages == [one.message]
    window, _, _, origin, _, _ = keys.app_keys("o")
    client.delete(window)  # expired a moment before its origin key
    assert cache.read("o").messages is None
    assert cache.store("o", [one], [], cache.read("o").version, 1)
    stamped = client.get(origin)
    assert stamped is not None and b"|" in stamped
    client.set(origin, stamped.split(b"|")[0])  # an older memstore's STORE: a bare id
    older = cache.read("o")
    assert older.messages == [one.message] and older.stamp == ""
    assert cache.memo.stamp("o") == ""  # served, never remembered
    cache.purge("o")
    assert cache.read("o").messages is None


def test_the_memo_keeps_the_most_recently_used_windows() -> None:
    from memstore.cache.base import WindowMemo

    memo = WindowMemo(max_apps=2)
    message = UserMessage(text="x")
    memo.put("a", "s1", [message])
    memo.put("b", "s2", [message])
    assert memo.get("a", "s1") == [message]  # a is now the most recent
    memo.put("c", "s3", [message])
    assert memo.stamp("b") == "" and memo.stamp("a") == "s1" and memo.stamp("c") == "s3"
    assert memo.get("a", "other") is None
    memo.put("a", "", [message])
    assert memo.stamp("a") == ""
