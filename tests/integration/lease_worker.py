"""Processes that lease worker ids, for the lease tests (spawned: each is its own process)."""

from __future__ import annotations

from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from typing import Any

from memstore import MemoryStore, MemstoreError, Settings, UserMessage


def _store(url: str, ttl: int) -> MemoryStore:
    return MemoryStore(Settings(database_url=url, redis_url=None, worker_lease_seconds=ttl))


def _held(store: MemoryStore) -> tuple[int, int]:
    lease = store._lease
    assert lease is not None
    return lease.worker_id, lease.epoch


def churn(url: str, ttl: int, app_id: str, barrier: Barrier, rounds: int, out: Any) -> None:
    """Lease an id, report it while every process holds one, then write with reopened stores
    (each reopen releases the id and claims one again); report every claim and every id."""
    claims: list[tuple[int, int]] = []
    ids: list[int] = []
    store = _store(url, ttl)
    ids += store.append(app_id, [UserMessage(text="first")])
    claims.append(_held(store))
    barrier.wait(timeout=60)  # everybody holds a lease now
    out.put(("held", store.worker_id))
    barrier.wait(timeout=60)
    for round_ in range(rounds):
        ids += store.append(app_id, [UserMessage(text=f"r{round_}")])
        if round_ % 3 == 2:
            store.close()
            store = _store(url, ttl)
            ids += store.append(app_id, [UserMessage(text="reopened")])
            claims.append(_held(store))
    store.close()
    out.put(("done", claims, ids))


def holder(conn: Connection, url: str, ttl: int, app_id: str) -> None:
    """Lease an id with the first write, then append on every ``append`` until ``close``."""
    store = _store(url, ttl)
    try:
        conn.send(("held", store.append(app_id, [UserMessage(text="first")]), store.worker_id))
        while conn.recv() == "append":
            try:
                ids = store.append(app_id, [UserMessage(text="after")])
                conn.send(("ok", ids, store.worker_id))
            except MemstoreError as error:
                conn.send(("error", type(error).__name__, store.worker_id, str(error)))
    finally:
        store.close()
