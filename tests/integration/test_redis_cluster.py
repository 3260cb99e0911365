"""The window cache on a Redis Cluster (3 masters + 3 replicas) and behind Sentinel (1 master,
1 replica, 3 sentinels), all private ``redis-server`` processes on free loopback ports.

Sync and async stores on a SQLite file. What must hold: app ids with braces hash to one slot
and hit; a killed master is replaced and the cache recovers by itself within seconds with no
caller error; a frozen shard leaves the other shards' apps hitting; a window that lost
acknowledged writes in a failover is never served; afterwards every window is SQL's newest
messages.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore import AiMessage, MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from memstore.cache import keys
from memstore.cache.base import decode_entries
from memstore.errors import ConfigurationError
from memstore.sql.engine import make_engine
from tests.async_facade import SyncFacade
from tests.integration.redis_topologies import Cluster, Node, SentinelSetup, wait_until

TIMEOUT = 0.25
RECOVERY_SECONDS = 10.0  # node timeout 1 s + election + our 1 s rest, with room for a loaded CI


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    topology = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


@pytest.fixture
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    topology = SentinelSetup(tmp_path_factory.mktemp("sentinel"))
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


class Stores:
    """Builds a sync store or an async one behind the test facade, on one SQLite file."""

    def __init__(self, flavor: str, tmp_path: Path) -> None:
        self.flavor = flavor
        self.database_url = f"sqlite:///{tmp_path / 'memstore.db'}"
        self._open: list[Any] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, redis_url: str) -> Any:
        settings = Settings(
            database_url=self.database_url, redis_url=redis_url, redis_timeout_seconds=TIMEOUT
        )
        if self.flavor == "sync":
            store = MemoryStore(settings)
            store.migrate()
            self._open.append(store)
            return store
        with MemoryStore(settings.model_copy(update={"redis_url": None})) as migrator:
            migrator.migrate()
        self._loop = self._loop or asyncio.new_event_loop()
        facade = SyncFacade(AsyncMemoryStore(settings), self._loop, make_engine(self.database_url))
        self._open.append(facade)
        return facade

    def close(self) -> None:
        for store in self._open:
            store.close()
        if self._loop is not None:
            self._loop.close()


@pytest.fixture(params=["sync", "async"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    factory = Stores(request.param, tmp_path)
    yield factory
    factory.close()


def hits(store: Any, app_id: str) -> bool:
    return store.cache.read(app_id).messages is not None


def sql_window(store: Any, app_id: str) -> list[Any]:
    return list(store.load_window(app_id, store.settings.reload_max))


def turn(n: int) -> list[Any]:
    return [UserMessage(text=f"question {n}"), AiMessage(text=f"answer {n}")]


def apps_per_master(cluster: Cluster, count: int = 2) -> dict[int, list[str]]:
    """``count`` app ids on each master (by port)."""
    found: dict[int, list[str]] = {}
    while any(len(found.get(n.port, [])) < count for n in cluster.nodes[:3]) or len(found) < 3:
        app_id = f"cl-{uuid.uuid4().hex[:10]}"
        port = cluster.master_of(keys.window_key(app_id)).port
        if len(found.setdefault(port, [])) < count:
            found[port].append(app_id)
    return found


def cache(store: Any, app_ids: list[str]) -> None:
    for app_id in app_ids:
        store.memory(app_id).add_all(turn(0))
        store.memory(app_id).messages()  # rebuilds and stores the window
        assert hits(store, app_id), app_id


def test_app_ids_with_braces_share_one_slot_and_hit(cluster: Cluster, stores: Stores) -> None:
    store = stores(cluster.url)
    suffix = uuid.uuid4().hex[:6]
    app_ids = [f"}}x{suffix}", "{", "}", "{}", f"a{{b}}c{suffix}", f"={suffix}", f"{{{suffix}"]
    for app_id in app_ids:
        tags = {keys.hash_tag(app_id)}
        assert tags and "" not in tags and not any(c in t for t in tags for c in "{}")
        memory = store.memory(app_id)
        memory.add_all(turn(1))
        assert memory.messages() == turn(1)
        assert hits(store, app_id), app_id
        memory.add(UserMessage(text="appended"))  # appended in place by the script
        assert hits(store, app_id)
        assert memory.messages() == [*turn(1), UserMessage(text="appended")]
    assert store.metrics()["cache_errors"] == 0


def test_a_plain_url_to_a_cluster_node_fails_at_start(cluster: Cluster, tmp_path: Path) -> None:
    plain = f"redis://127.0.0.1:{cluster.nodes[0].port}/0"
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}", redis_url=plain)
    with pytest.raises(ConfigurationError, match=r"redis\+cluster://"):
        MemoryStore(settings)
    with pytest.raises(ConfigurationError, match=r"redis\+cluster://"):
        AsyncMemoryStore(settings)


def test_a_killed_master_is_replaced_and_the_cache_recovers(
    cluster: Cluster, stores: Stores
) -> None:
    store = stores(cluster.url)
    by_master = apps_per_master(cluster)
    every = [app for apps in by_master.values() for app in apps]
    cache(store, every)
    victim_port = next(iter(by_master))
    victim_apps = by_master[victim_port]
    replica = cluster.replica_of(cluster.node(victim_port))

    cluster.node(victim_port).kill()
    started = time.monotonic()
    recovered_after: float | None = None
    step = 0
    while time.monotonic() - started < RECOVERY_SECONDS * 2:
        step += 1
        for app_id in every:  # no caller error, ever
            store.memory(app_id).add(UserMessage(text=f"during failover {step}"))
            assert store.memory(app_id).messages() == sql_window(store, app_id)
        if all(hits(store, app_id) for app_id in victim_apps):
            recovered_after = time.monotonic() - started
            break
        time.sleep(0.1)
    assert recovered_after is not None and recovered_after < RECOVERY_SECONDS, recovered_after
    assert cluster.master_of(keys.window_key(victim_apps[0])).port == replica.port
    for app_id in every:
        store.memory(app_id).add(AiMessage(text="after"))
        assert hits(store, app_id)
        assert store.cache.read(app_id).messages == sql_window(store, app_id)


def test_a_frozen_shard_leaves_the_other_shards_hitting(cluster: Cluster, stores: Stores) -> None:
    store = stores(cluster.url)
    by_master = apps_per_master(cluster)
    cache(store, [app for apps in by_master.values() for app in apps])
    frozen_port, frozen_apps = next(iter(by_master.items()))
    others = [app for port, apps in by_master.items() if port != frozen_port for app in apps]

    cluster.node(frozen_port).pause()
    try:
        started = time.monotonic()
        for step in range(15):
            for app_id in frozen_apps:  # served from SQL, no error
                store.memory(app_id).add(UserMessage(text=f"frozen {step}"))
                assert store.memory(app_id).messages() == sql_window(store, app_id)
            for app_id in others:
                store.memory(app_id).add(UserMessage(text=f"thawed {step}"))
                assert hits(store, app_id), (step, app_id)  # hits never stop
                assert store.cache.read(app_id).messages == sql_window(store, app_id)
        # the frozen shard costs at most one timeout per rest period, not one per call
        assert time.monotonic() - started < 15 * 0.2 + 8 * TIMEOUT * 4
    finally:
        cluster.node(frozen_port).resume()
    assert store.metrics()["cache_errors"] >= 1
    wait_until(
        lambda: all(store.memory(a).messages() and hits(store, a) for a in frozen_apps),
        RECOVERY_SECONDS,
        "the thawed shard to serve hits again",
    )
    for app_id in [*frozen_apps, *others]:
        assert store.cache.read(app_id).messages == sql_window(store, app_id)


def raw_window(node: Node, app_id: str) -> list[Any] | None:
    with node.client() as client:
        raw = client.lrange(keys.window_key(app_id), 0, -1)
    return decode_entries(raw) if raw else None


def cut_replica_link(master: Node, replica: Node) -> None:
    """Freeze the replica, then have the master drop its link: the master's next writes are
    acknowledged to clients and reach no replica (the frozen one cannot reconnect)."""
    replica.pause()
    with master.client() as client:
        assert client.client_kill_filter(_type="replica") == 1
        assert client.info("replication")["connected_slaves"] == 0


def test_a_failover_that_lost_acknowledged_writes_serves_no_stale_window(
    cluster: Cluster, stores: Stores
) -> None:
    store = stores(cluster.url)
    app_id = f"lost-{uuid.uuid4().hex[:10]}"
    master = cluster.master_of(keys.window_key(app_id))
    replica = cluster.replica_of(master)
    cache(store, [app_id])
    with master.client() as client:
        assert client.wait(1, 2000) == 1  # the replica holds the cached window

    cut_replica_link(master, replica)
    lost = UserMessage(text="acknowledged by the old master only")
    store.memory(app_id).add(lost)  # committed in SQL, appended on the master: acknowledged
    assert raw_window(master, app_id) == [*turn(0), lost]
    master.kill()
    replica.resume()
    with replica.client() as client:
        client.cluster("failover", "takeover")
    cluster.wait_healthy()

    stale = raw_window(replica, app_id)
    assert stale == turn(0)  # the promoted replica holds the window without the lost write
    expected = [*turn(0), lost]
    wait_until(lambda: store.memory(app_id).messages() == expected, 1, "a first answer")
    deadline = time.monotonic() + RECOVERY_SECONDS
    while time.monotonic() < deadline:  # never the stale window, and cached again soon
        assert store.memory(app_id).messages() == expected
        assert store.cache.read(app_id).messages in (None, expected)
        if raw_window(replica, app_id) == expected:
            break
        time.sleep(0.1)
    assert raw_window(replica, app_id) == expected
    assert hits(store, app_id)


def test_sentinel_failover_recovers(sentinel: SentinelSetup, stores: Stores) -> None:
    store = stores(sentinel.url)
    app_ids = [f"sn-{uuid.uuid4().hex[:10]}" for _ in range(3)]
    cache(store, app_ids)
    with sentinel.master.client() as client:
        assert client.wait(1, 2000) == 1

    sentinel.master.kill()
    started = time.monotonic()
    step = 0
    while True:
        step += 1
        for app_id in app_ids:
            store.memory(app_id).add(UserMessage(text=f"during failover {step}"))
            assert store.memory(app_id).messages() == sql_window(store, app_id)
        if sentinel.current_master_port() == sentinel.replica.port and all(
            hits(store, app_id) for app_id in app_ids
        ):
            break
        assert time.monotonic() - started < RECOVERY_SECONDS * 2, "no recovery"
        time.sleep(0.1)
    for app_id in app_ids:
        assert store.cache.read(app_id).messages == sql_window(store, app_id)


def test_sentinel_failover_that_lost_acknowledged_writes_serves_no_stale_window(
    sentinel: SentinelSetup, stores: Stores
) -> None:
    store = stores(sentinel.url)
    app_id = f"sl-{uuid.uuid4().hex[:10]}"
    cache(store, [app_id])
    with sentinel.master.client() as client:
        assert client.wait(1, 2000) == 1

    cut_replica_link(sentinel.master, sentinel.replica)
    lost = UserMessage(text="acknowledged by the old master only")
    store.memory(app_id).add(lost)
    assert raw_window(sentinel.master, app_id) == [*turn(0), lost]
    sentinel.master.kill()
    sentinel.replica.resume()
    wait_until(
        lambda: sentinel.current_master_port() == sentinel.replica.port,
        RECOVERY_SECONDS * 2,
        "the sentinels to promote the replica",
    )
    assert raw_window(sentinel.replica, app_id) == turn(0)  # the write is lost there
    expected = [*turn(0), lost]
    deadline = time.monotonic() + RECOVERY_SECONDS
    while time.monotonic() < deadline:
        assert store.memory(app_id).messages() == expected
        assert store.cache.read(app_id).messages in (None, expected)
        if raw_window(sentinel.replica, app_id) == expected:
            break
        time.sleep(0.1)
    assert raw_window(sentinel.replica, app_id) == expected


def test_cli_counts_the_windows_of_every_shard(cluster: Cluster, tmp_path: Path) -> None:
    from memstore.cli import _count_windows

    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'm.db'}",
        redis_url=cluster.url,
        redis_timeout_seconds=TIMEOUT,
    )
    with MemoryStore(settings) as store:
        store.migrate()
        app_ids = [app for apps in apps_per_master(cluster, 1).values() for app in apps]
        cache(store, app_ids)
        assert _count_windows(store) == len(app_ids)


def test_the_final_check_takes_a_rebuilt_window_that_appends_grew(tmp_path: Path) -> None:
    """The interleaving behind the multi-instance test's old "stale windows" (issue 13): near
    the end of a run a window is rebuilt (``reload_max`` = 50 newest messages) and then takes
    a few appends, so it holds 53 while ``load_window(window_size)`` holds 60. That window is
    SQL's newest 53, not stale; the check takes it, and still finds a window that lacks the
    app's newest write (an append skipped with no stamp) or that was cut short."""
    import fakeredis
    import redis

    from memstore.cache.base import WindowPolicy
    from memstore.cache.redis_window import RedisWindowCache, client_options
    from tests.integration.cluster_worker import window_mismatch
    from tests.integration.conftest import free_port

    url = f"sqlite:///{tmp_path / 'm.db'}"
    settings = Settings(database_url=url, worker_id=21)
    policy = WindowPolicy.from_settings(settings)
    server = fakeredis.FakeServer()
    store = MemoryStore(
        settings, cache=RedisWindowCache(fakeredis.FakeRedis(server=server), policy)
    )
    cut_off = MemoryStore(  # a writer that cannot reach Redis and stamps nothing
        settings.model_copy(update={"worker_id": 22, "stale_window_max_seconds": 0}),
        cache=RedisWindowCache(redis.Redis(port=free_port(), **client_options(0.2)), policy),
    )
    try:
        store.migrate()
        app_id = "final-check"
        store.append(app_id, [UserMessage(text=f"m{n}") for n in range(70)])
        store.memory(app_id).messages()  # the rebuild caches the newest reload_max
        for n in range(70, 73):
            store.append(app_id, [UserMessage(text=f"m{n}")])  # appended in place

        def texts(messages: list[Any] | None) -> list[str] | None:
            return None if messages is None else [m.text for m in messages]

        cached = texts(store.cache.read(app_id).messages)
        newest = texts(store.load_window(app_id, settings.window_size))
        assert cached is not None and newest is not None
        assert len(cached) == settings.reload_max + 3 and len(newest) == settings.window_size
        assert cached != newest  # what the old check reported as a stale window
        assert cached == newest[-len(cached) :]
        assert window_mismatch(cached, newest, settings.reload_max) is None

        cut_off.append(app_id, [UserMessage(text="m73")])  # committed, the window misses it
        cached = texts(store.cache.read(app_id).messages)
        newest = texts(store.load_window(app_id, settings.window_size))
        assert cached is not None and newest is not None and "m73" not in cached
        problem = window_mismatch(cached, newest, settings.reload_max)
        assert problem is not None and "'m73'" in problem
        assert window_mismatch(newest[-10:], newest, settings.reload_max) is not None
        assert window_mismatch(None, newest, settings.reload_max) == "no window cached"
    finally:
        cut_off.close()
        store.close()


PROCESSES = 4
THREADS = 4


@pytest.mark.slow
@pytest.mark.parametrize("scratch_database_url", ["sqlite", "postgres", "mysql"], indirect=True)
def test_many_instances_through_a_failover_and_a_frozen_shard(
    cluster: Cluster, scratch_database_url: str
) -> None:
    """4 processes x 4 threads without worker ids; a master is killed mid-run, later another
    whole shard (master and replica) is frozen. Every id unique, every row present, no caller
    error, every cached window is SQL's newest messages (see ``window_mismatch``), and the
    untouched shard's apps hit throughout."""
    import multiprocessing

    import sqlalchemy as sa

    from memstore.sql.schema import original
    from tests.integration import cluster_worker

    with MemoryStore(Settings(database_url=scratch_database_url)) as migrator:
        migrator.migrate()
    by_master = apps_per_master(cluster, 6)  # 18 apps, one writer thread each (16 threads)
    killed, frozen, untouched = list(by_master)
    apps = [app for group in by_master.values() for app in group]
    context = multiprocessing.get_context("spawn")
    ready, quiet = context.Barrier(PROCESSES + 1), context.Barrier(PROCESSES)
    stop, results = context.Event(), context.Queue()
    workers = [
        context.Process(
            target=cluster_worker.run,
            args=(
                *(scratch_database_url, cluster.url, apps, PROCESSES, THREADS, i),
                *(ready, stop, quiet, results),
            ),
        )
        for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        ready.wait(120)  # spawned interpreters imported memstore, leased ids, cached windows
        time.sleep(1)
        started = time.time()
        cluster.node(killed).kill()
        time.sleep(6)
        shard = [cluster.node(frozen), cluster.replica_of(cluster.node(frozen))]
        for node in shard:  # the whole shard: master and replica (no failover happens)
            node.pause()
        time.sleep(3)
        for node in shard:
            node.resume()
        time.sleep(3)
    finally:
        stop.set()
    reports = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)

    errors = [error for report in reports for error in report["errors"]]
    # no caller error, and every instance's cached window is SQL's newest messages
    assert errors == []
    written = [row for report in reports for row in report["written"]]
    ids = [row_id for _, _, row_id in written]
    assert len(ids) == len(set(ids)) and len(ids) > 100
    engine = make_engine(scratch_database_url)
    try:
        with engine.connect() as conn:
            rows = set(conn.execute(sa.select(original.c.app_id, original.c.id)))
    finally:
        engine.dispose()
    assert {(app, row_id) for app, _, row_id in written} <= rows
    failed = {app for report in reports for app in report["failed_apps"]}
    assert failed and not failed & set(by_master[untouched])  # no cache error there, ever
    hits_at = [
        when - started
        for report in reports
        for when, app, hit in report["reads"]
        if app in by_master[untouched] and hit
    ]
    for start, end in ((0, 6), (6, 9), (9, 12)):  # kill and failover, frozen shard, after
        assert any(start <= when < end for when in hits_at), (start, end)
