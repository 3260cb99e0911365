"""OpenAI Agents SDK: the same scenarios on ``SQLiteSession``, ``SQLAlchemySession`` and memstore.

Each scenario is written once, as a coroutine that drives a :class:`Backend` and returns what a
caller can observe (the items, counts, outcomes). The test runs it on the SDK's
``SQLiteSession`` (a database file) and ``SQLAlchemySession`` (``sqlite+aiosqlite``), which
must agree, and on :class:`~memstore.adapters.openai_agents.MemstoreSession` (every database,
both store flavours, Redis where cached), which must observe the same. Where memstore differs
on purpose, the difference is declared once in :data:`KNOWN_DIFFERENCES` (the same list as
"Known differences" in docs/integrations/openai-agents.md): the raw results must differ, and
must be equal once the difference's normaliser is applied to memstore's result.

A "restart" is a new session object (memstore: on a new store object, a new engine) reading
what an earlier one wrote.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("agents")
pytest.importorskip("aiosqlite")

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings, SQLiteSession
from packaging.version import Version
from sqlalchemy.ext.asyncio import create_async_engine

from memstore.adapters.openai_agents import MemstoreSession
from memstore.errors import InvalidInputError
from tests.adapters.conftest import AdapterEnv
from tests.adapters.test_openai_agents import EVERY_ITEM_TYPE, ScriptedModel, _call, _say

set_tracing_disabled(True)
os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-used")


class Backend:
    """One side of the comparison: ``open(name)`` gives a new session object on the backend's
    storage for the scenario's session ``name`` (made unique per run)."""

    def __init__(self, make: Callable[..., Session], run_id: str) -> None:
        self._make = make
        self.run_id = run_id

    def open(self, name: str = "s", **kwargs: Any) -> Session:
        return self._make(f"{self.run_id}-{name}", **kwargs)


def item(text: str, role: str = "user") -> TResponseInputItem:
    return cast(TResponseInputItem, {"role": role, "content": text})


def texts(items: list[TResponseInputItem]) -> list[Any]:
    return [cast(dict[str, Any], i).get("content") for i in items]


async def outcome(action: Awaitable[Any]) -> Any:
    """What a caller sees of an operation that may be refused: its result or the refusal."""
    try:
        return ("ok", await action)
    except (TypeError, ValueError, InvalidInputError) as error:
        return ("rejected", type(error).__name__)


Scenario = Callable[[Backend], Coroutine[Any, Any, Any]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__] = function
    return function


# -- the scenarios ---------------------------------------------------------------------------------


@scenario
async def empty_session(backend: Backend) -> Any:
    session = backend.open()
    return {
        "items": await session.get_items(),
        "limited": await session.get_items(limit=3),
        "pop": await session.pop_item(),
    }


@scenario
async def every_item_type_across_a_restart(backend: Backend) -> Any:
    await backend.open().add_items(copy.deepcopy(EVERY_ITEM_TYPE))  # type: ignore[arg-type]
    return await backend.open().get_items()


@scenario
async def ordering_across_batches(backend: Backend) -> Any:
    """Batches from several session objects, one item and many, in the order added."""
    for n in range(4):
        batch = [item(f"{n}.{i}", "user" if i % 2 == 0 else "assistant") for i in range(n + 1)]
        await backend.open().add_items(batch)
    await backend.open().add_items([])
    return texts(await backend.open().get_items())


@scenario
async def limits(backend: Backend) -> Any:
    session = backend.open()
    await session.add_items([item(str(i)) for i in range(6)])
    windows = {k: texts(await session.get_items(limit=k)) for k in (-1, 0, 1, 2, 5, 6, 7, 100)}
    default = backend.open(session_settings=SessionSettings(limit=2))
    return {
        "windows": windows,
        "default limit": texts(await default.get_items()),
        "explicit over default": texts(await default.get_items(limit=4)),
    }


@scenario
async def limit_inside_a_tool_exchange(backend: Backend) -> Any:
    """A limit whose oldest item is a call output, or a call after its reasoning: the plain
    count (the SDK's)."""
    items = [i for i in EVERY_ITEM_TYPE if i.get("type") in ("reasoning", "function_call")]
    items += [i for i in EVERY_ITEM_TYPE if i.get("type") == "function_call_output"]
    session = backend.open()
    await session.add_items([item("go"), *copy.deepcopy(items), item("done", "assistant")])  # type: ignore[list-item]
    return {k: await session.get_items(limit=k) for k in range(1, len(items) + 3)}


@scenario
async def pop_until_empty(backend: Backend) -> Any:
    await backend.open().add_items([item(str(i)) for i in range(3)])
    popped = []
    for _ in range(4):
        found = await backend.open().pop_item()  # each pop by a new session object
        popped.append(None if found is None else texts([found])[0])
    await backend.open().add_items([item("after")])
    return {"popped": popped, "after": texts(await backend.open().get_items())}


@scenario
async def pop_then_limit(backend: Backend) -> Any:
    session = backend.open()
    await session.add_items([item(str(i)) for i in range(5)])
    await session.pop_item()
    await session.add_items([item("new")])
    return texts(await session.get_items(limit=3))


@scenario
async def clear(backend: Backend) -> Any:
    session = backend.open()
    await session.clear_session()  # nothing there yet
    await session.add_items([item("a"), item("b")])
    await backend.open("other").add_items([item("kept")])
    await session.clear_session()
    trace = {
        "after clear": await backend.open().get_items(),
        "pop": await backend.open().pop_item(),
        "other": texts(await backend.open("other").get_items()),
    }
    await session.add_items([item("again")])
    trace["added after clear"] = texts(await backend.open().get_items())
    return trace


@scenario
async def isolation_and_case(backend: Backend) -> Any:
    names = ["tenant", "Tenant", "ten ant", "tenant-2", "日本"]
    for name in names:
        await backend.open(name).add_items([item(name)])
    return {name: texts(await backend.open(name).get_items()) for name in names}


@scenario
async def session_ids_at_the_edges(backend: Backend) -> Any:
    """An empty id, a long one, one ending in a space: what each session accepts."""
    found: dict[str, Any] = {}
    for label, name in [("long", "x" * 200), ("trailing space", "tenant "), ("ok", "tenant")]:
        try:
            session = backend.open(name)
        except (ValueError, InvalidInputError) as error:
            found[label] = ("rejected", type(error).__name__)
            continue
        await session.add_items([item(label)])
        found[label] = texts(await backend.open(name).get_items())
    return found


@scenario
async def concurrent_adds(backend: Backend) -> Any:
    """Batches added at once by several session objects: each batch whole and in order."""
    sessions = [backend.open() for _ in range(4)]
    batches = [[item(f"{n}.{i}") for i in range(5)] for n in range(4)]
    await asyncio.gather(*(s.add_items(b) for s, b in zip(sessions, batches, strict=True)))
    found = texts(await backend.open().get_items())
    chunks = sorted(found[i : i + 5] for i in range(0, len(found), 5))
    return {"count": len(found), "batches whole": chunks == [texts(b) for b in batches]}


@scenario
async def concurrent_pops(backend: Backend) -> Any:
    await backend.open().add_items([item(str(i)) for i in range(6)])
    sessions = [backend.open() for _ in range(3)]
    popped = await asyncio.gather(*(s.pop_item() for s in sessions for _ in range(2)))
    found = sorted(str(texts([p])[0]) for p in popped if p is not None)
    return {"popped": found, "left": await backend.open().get_items()}


@scenario
async def large_and_unicode_payloads(backend: Backend) -> Any:
    big = "".join(f"line {i}: {'x' * 90}\n" for i in range(10000))  # about 1 MB
    unicode = 'naïve café — 日本語 — עברית — 🦜🧪 — e\u0301 — \u2028 — \\u00e9 — "quoted"'
    items = [
        item(big),
        item(unicode, "assistant"),
        cast(
            TResponseInputItem,
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "f",
                "arguments": json.dumps({"text": unicode, "n": [1, 2.5, None, True]}),
            },
        ),
        cast(TResponseInputItem, {"type": "function_call_output", "call_id": "c1", "output": big}),
        cast(TResponseInputItem, {"role": "user", "content": unicode, "extra": {"deep": [{}]}}),
    ]
    await backend.open().add_items(copy.deepcopy(items))
    stored = await backend.open().get_items()
    return {"equal": stored == items, "sizes": [len(json.dumps(i)) for i in stored]}


@scenario
async def payloads_that_are_not_json(backend: Backend) -> Any:
    """An item JSON cannot hold (bytes inside it): refused, nothing of the batch stored. (One
    refused batch only: SDK releases before 0.24 leave the SQLite file locked after one.)"""
    given = cast(TResponseInputItem, {"role": "user", "content": [b"\xff", object()]})
    trace = await outcome(backend.open().add_items([item("ok"), given]))
    return {"trace": trace, "items": await backend.open().get_items()}


@scenario
async def numbers_json_does_not_have(backend: Backend) -> Any:
    """NaN and infinity: Python's json writes them as bare tokens no JSON parser accepts."""
    session = backend.open()
    given = cast(TResponseInputItem, {"role": "user", "content": "x", "score": float("inf")})
    trace = await outcome(session.add_items([item("ok"), given]))
    return {"trace": trace, "items": texts(await backend.open().get_items())}


@scenario
async def long_lived_handles(backend: Backend) -> Any:
    """Two session objects kept open, each seeing what the other wrote and popped."""
    first, second = backend.open(), backend.open()
    await first.add_items([item("1")])
    trace: list[Any] = [texts(await second.get_items())]
    await second.add_items([item("2"), item("3")])
    trace.append(texts(await first.get_items(limit=2)))
    popped = await first.pop_item()
    trace.append(texts([popped]) if popped is not None else None)
    trace.append(texts(await second.get_items()))
    await second.clear_session()
    trace.append(texts(await first.get_items()))
    return trace


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@scenario
async def runner_turns_across_restarts(backend: Backend) -> Any:
    """Real Runner turns, each on a new session object: the model gets the stored history."""
    model = ScriptedModel([_call("call_1", 1, 2)], [_say("3")], [_say("again 3")])
    agent = Agent(name="calculator", instructions="Use the add tool.", model=model, tools=[add])
    await Runner.run(agent, "add 1 and 2", session=backend.open())
    await Runner.run(agent, "and again?", session=backend.open())
    return {"inputs": model.inputs, "stored": await backend.open().get_items()}


# -- the one place memstore differs on purpose ----------------------------------------------------


def _refusal_class_of_the_sdk(result: Any) -> Any:
    assert result["trace"] == ("rejected", "InvalidMessageError")
    return {**result, "trace": ("rejected", "TypeError")}


def _stored_as_the_sdk_does(result: Any) -> Any:
    assert result == {"trace": ("rejected", "InvalidMessageError"), "items": []}
    return {"trace": ("ok", None), "items": ["ok", "x"]}


def _long_id_accepted(result: Any) -> Any:
    assert result["long"] == ("rejected", "InvalidAppIdError")
    return {**result, "long": ["long"]}


KNOWN_DIFFERENCES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "session_ids_at_the_edges": (
        "a session id is a memstore app id, 1 to 128 characters: a longer one raises "
        "InvalidAppIdError when the session is built; the SDK sessions take any string",
        _long_id_accepted,
    ),
    "numbers_json_does_not_have": (
        "memstore stores items as strict JSON and refuses NaN and infinity (InvalidMessageError, "
        "nothing of the batch stored); the SDK sessions write them with json.dumps as the "
        "non-standard tokens NaN and Infinity and read them back",
        _stored_as_the_sdk_does,
    ),
    "payloads_that_are_not_json": (
        "memstore checks every item of a batch before writing and refuses one JSON cannot hold "
        "with InvalidMessageError (a ValueError); the SDK sessions fail in json.dumps with "
        "TypeError. Neither stores any item of the batch",
        _refusal_class_of_the_sdk,
    ),
}


# -- the backends and the test ---------------------------------------------------------------------

CONCURRENT = {"concurrent_adds", "concurrent_pops"}
SQLALCHEMY_SESSION_IS_ATOMIC = Version(version("openai-agents")) >= Version("0.24")
"""Before 0.24 (memstore's floor is 0.19) ``SQLAlchemySession`` could pop one item twice from
concurrent handles: those scenarios compare with ``SQLiteSession`` alone there."""


async def run_on_sqlite(name: str, directory: Path) -> Any:
    opened: list[SQLiteSession] = []

    def make(session_id: str, **kwargs: Any) -> Session:
        session = SQLiteSession(session_id, directory / "sqlite-session.db", **kwargs)
        opened.append(session)
        return session

    try:
        return await SCENARIOS[name](Backend(make, uuid.uuid4().hex[:12]))
    finally:
        for session in opened:
            session.close()


async def run_on_sqlalchemy(name: str, directory: Path) -> Any:
    engine = create_async_engine(
        f"sqlite+aiosqlite:///{directory / 'sqlalchemy-session.db'}",
        connect_args={"timeout": 30},  # SDK releases before 0.24 do not wait on a locked file
    )

    def make(session_id: str, **kwargs: Any) -> Session:
        return SQLAlchemySession(session_id, engine=engine, create_tables=True, **kwargs)

    try:
        return await SCENARIOS[name](Backend(make, uuid.uuid4().hex[:12]))
    finally:
        await engine.dispose()


def run_on_memstore(env: AdapterEnv, name: str) -> Any:
    def make(session_id: str, **kwargs: Any) -> Session:
        return MemstoreSession(session_id, env.store(), **kwargs)

    return env.run(SCENARIOS[name](Backend(make, uuid.uuid4().hex[:12])))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_memstore_observes_what_the_sdk_sessions_observe(
    env: AdapterEnv, name: str, tmp_path: Path
) -> None:
    on_sqlite = env.run(run_on_sqlite(name, tmp_path))
    if name not in CONCURRENT or SQLALCHEMY_SESSION_IS_ATOMIC:
        on_sqlalchemy = env.run(run_on_sqlalchemy(name, tmp_path))
        assert on_sqlalchemy == on_sqlite  # the two references agree
    found = run_on_memstore(env, name)
    if name in KNOWN_DIFFERENCES:
        reason, normalise = KNOWN_DIFFERENCES[name]
        assert found != on_sqlite, f"no longer differs ({reason}): drop it from KNOWN_DIFFERENCES"
        assert normalise(found) == on_sqlite, reason
    else:
        assert found == on_sqlite
