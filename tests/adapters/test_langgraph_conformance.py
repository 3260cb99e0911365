"""``MemstoreMirrorSaver`` under LangGraph's own checkpointer conformance kit.

The kit (``langgraph-checkpoint-conformance``) detects a saver's capabilities by comparing its
class's methods with :class:`BaseCheckpointSaver`'s, then runs each detected capability's
spec tests (async methods only). The mirror saver must get the rating of the saver it wraps:
around ``InMemorySaver`` and ``AsyncSqliteSaver`` (both FULL, base capabilities only), around
the sync ``SqliteSaver`` (whose async methods refuse), and around a saver with the extended
capabilities (``copy_thread``, ``delete_for_runs``, ``prune``), which is defined here.

The second half checks that the mirrored apps follow the inner saver's threads through those
extended methods, on every adapter backend (SQLite always, PostgreSQL and MariaDB when their
URLs are set), sync and async.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any

import pytest
import sqlalchemy as sa

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.checkpoint.memory import InMemorySaver

from memstore import MemoryStore, Settings
from memstore.adapters.langgraph import MemstoreMirrorSaver
from memstore.aio import AsyncMemoryStore
from memstore.sql.schema import original
from tests.adapters.conftest import WORKER_ID, AdapterEnv
from tests.adapters.lc_agents import ProviderLikeModel, lc_ids, rows
from tests.adapters.test_langgraph_mirror import PARALLEL, build, types
from tests.conftest import migrated_engine

EXTENDED = ("copy_thread", "delete_for_runs", "prune")


class ExtendedInMemorySaver(InMemorySaver):
    """``InMemorySaver`` with ``copy_thread``, ``delete_for_runs`` and ``prune``."""

    def _drop(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        del self.storage[thread_id][ns][checkpoint_id]
        self.writes.pop((thread_id, ns, checkpoint_id), None)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        for ns, saved in self.storage.get(source_thread_id, {}).items():
            self.storage[target_thread_id][ns].update(saved)
        for (thread_id, ns, checkpoint_id), writes in list(self.writes.items()):
            if thread_id == source_thread_id:
                self.writes[(target_thread_id, ns, checkpoint_id)] = dict(writes)
        for (thread_id, ns, channel, version), blob in list(self.blobs.items()):
            if thread_id == source_thread_id:
                self.blobs[(target_thread_id, ns, channel, version)] = blob

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        for thread_id, namespaces in list(self.storage.items()):
            for ns, saved in list(namespaces.items()):
                for checkpoint_id, (_, metadata, _) in list(saved.items()):
                    if self.serde.loads_typed(metadata).get("run_id") in runs:
                        self._drop(thread_id, ns, checkpoint_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for ns, saved in list(self.storage.get(thread_id, {}).items()):
                for checkpoint_id in sorted(saved)[:-1]:
                    self._drop(thread_id, ns, checkpoint_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


# -- the kit ---------------------------------------------------------------------------------------

InnerFactory = Callable[[], Any]
"""``() -> context manager (sync or async) entering a fresh inner saver``."""


def _memory() -> Any:
    return nullcontext(InMemorySaver())


def _extended() -> Any:
    return nullcontext(ExtendedInMemorySaver())


def _async_sqlite() -> Any:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    return AsyncSqliteSaver.from_conn_string(":memory:")


def _sync_sqlite() -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver.from_conn_string(":memory:")


INNER: dict[str, tuple[InnerFactory, str | None]] = {
    "InMemorySaver": (_memory, "FULL"),
    "AsyncSqliteSaver": (_async_sqlite, "FULL"),
    "SqliteSaver": (_sync_sqlite, None),  # async-only kit, sync-only saver: rated as it is
    "ExtendedInMemorySaver": (_extended, "FULL"),
}
NEEDS_SQLITE_SAVER = {"AsyncSqliteSaver", "SqliteSaver"}


async def _entered(make: InnerFactory, stack: list[Any]) -> BaseCheckpointSaver[Any]:
    manager = make()
    stack.append(manager)
    if isinstance(manager, AbstractAsyncContextManager):
        return await manager.__aenter__()  # type: ignore[no-any-return]
    assert isinstance(manager, AbstractContextManager)
    return manager.__enter__()  # type: ignore[no-any-return]


async def _exit(stack: list[Any]) -> None:
    while stack:
        manager = stack.pop()
        if isinstance(manager, AbstractAsyncContextManager):
            await manager.__aexit__(None, None, None)
        else:
            manager.__exit__(None, None, None)


def rate(name: str, make: InnerFactory, mirror_store: Callable[[], Any] | None) -> CapabilityReport:
    """The kit's report on the inner saver (``mirror_store`` None) or on the mirror saver
    around it, with a new store from ``mirror_store()`` for each capability suite."""

    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        stack: list[Any] = []
        inner = await _entered(make, stack)
        store = None if mirror_store is None else mirror_store()
        try:
            yield inner if store is None else MemstoreMirrorSaver(inner, store)
        finally:
            if isinstance(store, AsyncMemoryStore):
                await store.close()
            elif store is not None:
                store.close()
            await _exit(stack)

    label = name if mirror_store is None else f"MemstoreMirrorSaver({name})"
    return asyncio.run(validate(checkpointer_test(name=label)(factory)))


def summary(report: CapabilityReport) -> dict[str, tuple[bool, bool | None, int, int]]:
    return {
        capability: (r.detected, r.passed, r.tests_passed, r.tests_failed)
        for capability, r in report.results.items()
    }


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return migrated_engine("sqlite", tmp_path_factory).url.render_as_string(hide_password=False)


@pytest.mark.parametrize("flavor", ["async", "sync"])
@pytest.mark.parametrize("inner", list(INNER))
def test_the_kit_rates_the_mirror_saver_as_the_saver_it_wraps(
    inner: str, flavor: str, sqlite_url: str
) -> None:
    if inner in NEEDS_SQLITE_SAVER:
        pytest.importorskip("langgraph.checkpoint.sqlite")
    make, expected = INNER[inner]
    settings = Settings(database_url=sqlite_url, worker_id=WORKER_ID)

    def store() -> Any:
        return AsyncMemoryStore(settings) if flavor == "async" else MemoryStore(settings)

    alone = rate(inner, make, None)
    mirrored = rate(inner, make, store)
    assert summary(mirrored) == summary(alone)
    assert mirrored.conformance_level() == alone.conformance_level()
    if expected is not None:
        assert alone.conformance_level() == expected
    for failures in (r.failures for r in mirrored.results.values()):
        assert failures == [] or expected is None, failures
    detected = {c for c, r in mirrored.results.items() if r.detected}
    assert detected.issuperset(EXTENDED) == (inner == "ExtendedInMemorySaver")


def test_the_mirror_saver_has_only_the_inner_savers_methods() -> None:
    store = MemoryStore(Settings(database_url="sqlite://", worker_id=WORKER_ID))
    try:
        plain = MemstoreMirrorSaver(InMemorySaver(), store)
        extended = MemstoreMirrorSaver(ExtendedInMemorySaver(), store)
        assert isinstance(plain, MemstoreMirrorSaver)
        assert type(plain) is type(MemstoreMirrorSaver(InMemorySaver(), store))  # made once
        for name in EXTENDED:
            for method in (name, f"a{name}"):
                assert getattr(type(plain), method) is getattr(BaseCheckpointSaver, method)
                assert getattr(type(extended), method) is MemstoreMirrorSaver.__dict__[method]
        with pytest.raises(NotImplementedError):
            plain.copy_thread("a", "b")
        assert type(plain.with_allowlist([("x",)])) is type(plain)
    finally:
        store.close()


# -- mirrored apps through the extended methods ----------------------------------------------------


def run_config(thread_id: str, run_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id}
    if run_id is not None:
        configurable["run_id"] = run_id
    return {"configurable": configurable}


def user_ids(env: AdapterEnv, app_id: str) -> set[str | None]:
    with env.sync_store().engine.connect() as conn:
        query = sa.select(original.c.user_id).where(original.c.app_id == app_id)
        return set(conn.execute(query).scalars())


def turn(env: AdapterEnv, graph: Any, text: str, cfg: Any) -> None:
    payload = {"messages": [{"role": "user", "content": text}]}
    if env.is_async:
        env.run(graph.ainvoke(payload, cfg))
    else:
        graph.invoke(payload, cfg)


def do(env: AdapterEnv, saver: MemstoreMirrorSaver, name: str, *args: Any, **kwargs: Any) -> None:
    if env.is_async:
        env.run(getattr(saver, f"a{name}")(*args, **kwargs))
    else:
        getattr(saver, name)(*args, **kwargs)


@pytest.fixture
def mirrored(env: AdapterEnv) -> Iterator[tuple[ExtendedInMemorySaver, MemstoreMirrorSaver]]:
    inner = ExtendedInMemorySaver()
    yield inner, MemstoreMirrorSaver(inner, env.store())


def test_copy_thread_gives_the_target_app_the_source_messages(
    env: AdapterEnv, app_id: str, mirrored: tuple[ExtendedInMemorySaver, MemstoreMirrorSaver]
) -> None:
    _, saver = mirrored
    target = f"{app_id}-copy"
    model = ProviderLikeModel([PARALLEL, "3 and 12", "copied"])
    graph = build(model, saver)
    turn(env, graph, "go", {"configurable": {"thread_id": app_id, "user_id": "u-7"}})
    source = rows(env.sync_store(), app_id)
    do(env, saver, "copy_thread", app_id, target)
    copied = rows(env.sync_store(), target)
    assert types(env, target) == types(env, app_id)
    assert lc_ids(copied) == lc_ids(source)
    assert user_ids(env, target) == {"u-7"}

    turn(env, graph, "and the copy?", run_config(target))  # continues from the copied state
    after = rows(env.sync_store(), target)
    assert len(after) == len(source) + 2
    assert len(set(lc_ids(after))) == len(after)
    assert len(rows(env.sync_store(), app_id)) == len(source)  # the source is untouched


def test_delete_for_runs_leaves_the_app_with_what_remains(
    env: AdapterEnv, app_id: str, mirrored: tuple[ExtendedInMemorySaver, MemstoreMirrorSaver]
) -> None:
    inner, saver = mirrored
    other = f"{app_id}-other"
    graph = build(ProviderLikeModel(["one", "two", "elsewhere", "three"]), saver)
    turn(env, graph, "first", run_config(app_id, "run-1"))
    turn(env, graph, "second", run_config(app_id, "run-2"))
    turn(env, graph, "hi", run_config(other, "run-3"))
    assert len(types(env, app_id)) == 4

    do(env, saver, "delete_for_runs", ["run-2"])
    assert types(env, app_id) == ["UserMessage", "AiMessage"]
    assert [r.message.text for r in rows(env.sync_store(), app_id)] == ["first", "one"]
    assert len(types(env, other)) == 2  # a thread the runs did not touch

    turn(env, graph, "again", run_config(app_id, "run-4"))  # mirrored on from the remaining state
    assert types(env, app_id) == ["UserMessage", "AiMessage"] * 2

    do(env, saver, "delete_for_runs", ["run-1", "run-4"])
    assert inner.get_tuple(run_config(app_id)) is None
    assert types(env, app_id) == []
    assert env.sync_store().history(app_id) == []
    assert len(types(env, other)) == 2


def test_prune_keeps_the_latest_state_and_purges_deleted_threads(
    env: AdapterEnv, app_id: str, mirrored: tuple[ExtendedInMemorySaver, MemstoreMirrorSaver]
) -> None:
    inner, saver = mirrored
    other = f"{app_id}-other"
    graph = build(ProviderLikeModel(["one", "two", "elsewhere", "again"]), saver)
    turn(env, graph, "first", run_config(app_id))
    turn(env, graph, "second", run_config(app_id))
    turn(env, graph, "hi", run_config(other))

    do(env, saver, "prune", [app_id, other], strategy="keep_latest")
    assert len(list(inner.list(run_config(app_id)))) == 1
    assert len(types(env, app_id)) == 4  # the latest state holds every message
    assert len(types(env, other)) == 2

    do(env, saver, "prune", [other], strategy="delete")
    assert inner.get_tuple(run_config(other)) is None
    assert types(env, other) == []
    assert len(types(env, app_id)) == 4

    turn(env, graph, "hi again", run_config(other))  # mirrored again from scratch
    assert types(env, other) == ["UserMessage", "AiMessage"]
