"""pydantic-ai: the same scenarios on ``InMemoryConversationStore`` and on memstore.

Each scenario is written once, as a coroutine that drives a :class:`Backend` and returns what a
caller can observe (plain data: messages dumped to JSON without the fields a run stamps, counts,
outcomes). The test runs it on pydantic-ai's in-memory store and on
:class:`~memstore.adapters.pydantic_ai.MemstoreConversationStore` (every database, both store
flavours, Redis where cached) and asserts equal results. Where memstore differs on purpose, the
difference is declared once in :data:`KNOWN_DIFFERENCES` (the same list as "Known differences" in
docs/integrations/pydantic-ai.md): the raw results must differ, and must be equal once the
difference's normaliser is applied to memstore's result.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RunUsage

from memstore.adapters.pydantic_ai import MemstoreConversationStore
from memstore.core.window import INTERRUPTED_TEXT
from tests.adapters.conftest import AdapterEnv

STAMP = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
VOLATILE = {"timestamp", "request_timestamp", "run_id", "conversation_id", "duration"}
"""Fields a run stamps differently on each backend's run (the scenarios compare the rest)."""


@dataclass
class Backend:
    """One side of the comparison: ``open()`` gives a store object on the backend's storage
    (memstore: a new store object and engine each time, a restart; the reference keeps
    everything in one process object, so it hands out that object), ``cid`` a conversation id
    of this run."""

    open: Callable[[], ConversationStore]
    run_id: str

    def cid(self, name: str = "c") -> str:
        return f"{self.run_id}-{name}"

    def relative(self, conversation_id: str | None) -> str | None:
        """A conversation id as the scenario named it (results never hold a run's ids)."""
        if conversation_id is None:
            return None
        return conversation_id.removeprefix(f"{self.run_id}-")


def plain(messages: list[ModelMessage]) -> list[Any]:
    """Messages as JSON data, without the fields a run stamps."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(m) for m in ModelMessagesTypeAdapter.dump_python(messages, mode="json")]


def user(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text, timestamp=STAMP)], timestamp=STAMP)


def reply(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], timestamp=STAMP)


def calls(*ids: str) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart("lookup", {"q": i}, tool_call_id=i) for i in ids], timestamp=STAMP
    )


def returns(*ids: str) -> ModelRequest:
    return ModelRequest(
        parts=[
            ToolReturnPart("lookup", f"found {i}", tool_call_id=i, timestamp=STAMP) for i in ids
        ],
        timestamp=STAMP,
    )


def turn(n: int) -> list[ModelMessage]:
    """A user turn with two parallel tool calls answered, then a text answer: 4 messages."""
    a, b = f"t{n}a", f"t{n}b"
    return [user(f"question {n}"), calls(a, b), returns(a, b), reply(f"answer {n}")]


def tool_turns(count: int) -> list[ModelMessage]:
    return [message for n in range(count) for message in turn(n)]


async def outcome(action: Awaitable[Any]) -> str:
    """What a caller sees of an operation that may be refused."""
    try:
        await action
    except ConversationConflict:
        return "conflict"
    except UserError as error:
        return f"user error: {type(error).__name__}"
    except NotImplementedError:
        return "not implemented"
    return "ok"


Scenario = Callable[[Backend], Coroutine[Any, Any, Any]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(function: Scenario) -> Scenario:
    SCENARIOS[function.__name__] = function
    return function


# -- the scenarios ---------------------------------------------------------------------------------


@scenario
async def ordering_across_restarts(backend: Backend) -> Any:
    """Turns saved one at a time, each by a new store object; usage and deferred requests
    ride on the record."""
    cid = backend.cid()
    saved_counts = []
    for n in range(3):
        store = backend.open()
        loaded = await store.load(cid) or Conversation(conversation_id=cid)
        loaded.messages.extend(turn(n))
        loaded.usage = RunUsage(requests=n + 1, input_tokens=10 * (n + 1))
        saved_counts.append(len(await store.save(loaded)))
    final = await backend.open().load(cid)
    assert final is not None
    entries = await backend.open().load_entries(cid)
    assert entries is not None
    chained = all(e.parent_id == p.id for p, e in itertools.pairwise(entries))
    return {
        "saved": saved_counts,
        "messages": plain(final.messages),
        "usage": (final.usage.requests, final.usage.input_tokens),
        "chained": chained and entries[0].parent_id is None,
        "entries": [plain([e.message]) for e in entries] == plain(final.messages),
    }


@scenario
async def limits(backend: Backend) -> Any:
    """``load(limit=k)`` for every k: the last k messages (and how many came back)."""
    cid = backend.cid()
    history = tool_turns(3)
    await backend.open().save(Conversation(conversation_id=cid, messages=history))
    store = backend.open()
    windows = {}
    for k in range(len(history) + 2):
        window = await store.load(cid, limit=k)
        assert window is not None
        windows[k] = plain(window.messages)
    negative = await outcome(store.load(cid, limit=-1))
    return {"windows": windows, "negative": negative}


@scenario
async def interrupted_call(backend: Backend) -> Any:
    """A call a run never answered (it died mid-tool), then more turns; and an open call in the
    newest response (a paused run waits on it)."""
    cid = backend.cid()
    history: list[ModelMessage] = [user("one"), calls("lost"), user("two"), reply("two done")]
    history += [user("three"), calls("waiting")]
    await backend.open().save(Conversation(conversation_id=cid, messages=history))
    whole = await backend.open().load(cid)
    window = await backend.open().load(cid, limit=5)
    assert whole is not None and window is not None
    return {"whole": plain(whole.messages), "window": plain(window.messages)}


@scenario
async def stale_revision(backend: Backend) -> Any:
    cid = backend.cid()
    store = backend.open()
    await store.save(Conversation(conversation_id=cid, messages=turn(0)))
    first = await backend.open().load(cid)
    second = await backend.open().load(cid)
    assert first is not None and second is not None
    first.messages.extend(turn(1))
    second.messages.extend(turn(2))
    trace = [await outcome(backend.open().save(first))]
    trace.append(await outcome(backend.open().save(second)))
    trace.append(await outcome(store.save(Conversation(conversation_id=cid, messages=turn(3)))))
    trace.append(
        await outcome(store.branch(cid, at=1, expected_revision=second.revision))  # stale too
    )
    final = await backend.open().load(cid)
    assert final is not None
    return {"trace": trace, "messages": plain(final.messages)}


@scenario
async def concurrent_saves(backend: Backend) -> Any:
    """Saves of one revision from several store objects at once: exactly one wins."""
    cid = backend.cid()
    await backend.open().save(Conversation(conversation_id=cid, messages=turn(0)))
    stores = [backend.open() for _ in range(4)]
    loaded = [await store.load(cid) for store in stores]
    for n, conversation in enumerate(loaded):
        assert conversation is not None
        conversation.messages.extend(turn(n + 1))
    outcomes = await asyncio.gather(
        *(store.save(c) for store, c in zip(stores, loaded, strict=True) if c is not None),
        return_exceptions=True,
    )
    winners = [c for c, o in zip(loaded, outcomes, strict=True) if isinstance(o, list)]
    final = await backend.open().load(cid)
    assert final is not None and len(winners) == 1 and winners[0] is not None
    return {
        "conflicts": sum(isinstance(o, ConversationConflict) for o in outcomes),
        "winner stored": plain(final.messages) == plain(winners[0].messages),
        "length": len(final.messages),
    }


@scenario
async def concurrent_new_conversations(backend: Backend) -> Any:
    """First saves of one conversation id from several store objects at once."""
    cid = backend.cid()
    stores = [backend.open() for _ in range(3)]
    outcomes = await asyncio.gather(
        *(
            store.save(Conversation(conversation_id=cid, messages=turn(n)))
            for n, store in enumerate(stores)
        ),
        return_exceptions=True,
    )
    final = await backend.open().load(cid)
    assert final is not None
    return {
        "conflicts": sum(isinstance(o, ConversationConflict) for o in outcomes),
        "length": len(final.messages),
    }


@scenario
async def scopes(backend: Backend) -> Any:
    cid, alice, bob = backend.cid(), backend.cid("alice"), backend.cid("bob")
    store = backend.open()
    await store.save(Conversation(conversation_id=cid, messages=turn(0)), scope=alice)
    trace: dict[str, Any] = {
        "as bob": await store.load(cid, scope=bob),
        "as alice": len((await store.load(cid, scope=alice) or Conversation()).messages),
        "bob lists": [r.conversation_id for r in await store.list_conversations(scope=bob)],
        "alice lists": [
            backend.relative(r.conversation_id) for r in await store.list_conversations(scope=alice)
        ],
    }
    await store.delete(cid, scope=bob)  # not bob's: left alone
    loaded = await store.load(cid)
    assert loaded is not None
    trace["after bob's delete"] = len(loaded.messages)
    loaded.messages.extend(turn(1))
    trace["save as bob"] = await outcome(store.save(loaded, scope=bob))
    trace["fork as bob"] = await outcome(store.fork(cid, source_scope=bob))
    trace["branch as bob"] = await outcome(
        store.branch(cid, at=1, expected_revision=loaded.revision, scope=bob)
    )
    record = await backend.open().read_record(cid)
    assert record is not None
    trace["scope"] = backend.relative(record.scope)
    return trace


@scenario
async def delete_then_start_again(backend: Backend) -> Any:
    cid = backend.cid()
    store = backend.open()
    await store.save(Conversation(conversation_id=cid, messages=turn(0)))
    loaded = await store.load(cid)
    assert loaded is not None
    await store.delete(cid)
    trace: dict[str, Any] = {"after delete": await backend.open().load(cid)}
    trace["entries"] = await backend.open().load_entries(cid)
    loaded.messages.extend(turn(1))
    trace["stale save"] = await outcome(backend.open().save(loaded))
    await store.delete(cid)  # nothing there: no error
    fresh = Conversation(conversation_id=cid, messages=turn(2))
    trace["new save"] = len(await backend.open().save(fresh))
    again = await backend.open().load(cid)
    assert again is not None
    trace["messages"] = plain(again.messages)
    if hasattr(ConversationStore, "update"):  # pydantic-ai-slim >= 2.78
        missing = backend.open().update(backend.cid("none"), title="t")
        trace["update missing"] = await outcome(missing)
    return trace


@scenario
async def rewrite_and_branches(backend: Backend) -> Any:
    """A rewritten history branches; ``branch`` cuts and switches back."""
    cid = backend.cid()
    history = tool_turns(3)
    store = backend.open()
    await store.save(Conversation(conversation_id=cid, messages=history[:8]))
    loaded = await backend.open().load(cid)
    assert loaded is not None
    loaded.messages = [*history[:4], *history[8:]]  # the second turn replaced
    trace: dict[str, Any] = {"rewritten": len(await backend.open().save(loaded))}
    record = await backend.open().read_record(cid)
    assert record is not None
    trace["branches"] = len(record.branches)
    trace["left"] = plain([e.message for e in await store.read_history(record.branches[0])])
    now = await backend.open().load(cid)
    assert now is not None
    trace["now"] = plain(now.messages)
    cut = await backend.open().branch(cid, at=2, expected_revision=now.revision)
    trace["cut"] = plain(cut.messages)
    trace["bad at"] = await outcome(
        backend.open().branch(cid, at=99, expected_revision=cut.revision)
    )
    cut.messages.extend([user("other"), reply("other answer")])
    trace["after cut"] = len(await backend.open().save(cut))
    record = await backend.open().read_record(cid)
    assert record is not None
    trace["branch count"] = len(record.branches)
    back = await backend.open().branch(
        cid, from_entry=record.branches[0], expected_revision=record.revision
    )
    trace["back"] = plain(back.messages)
    trace["stored"] = plain((await backend.open().load(cid) or Conversation()).messages)
    trace["unknown entry"] = await outcome(
        backend.open().branch(cid, from_entry="no-such-entry", expected_revision=back.revision)
    )
    return trace


@scenario
async def forks(backend: Backend) -> Any:
    cid, fork_id = backend.cid(), backend.cid("fork")
    history = tool_turns(2)
    await backend.open().save(Conversation(conversation_id=cid, messages=history))
    fork = await backend.open().fork(cid, at=4, new_conversation_id=fork_id)
    fork.messages.extend([user("forked"), reply("forked answer")])
    await backend.open().save(fork)
    whole = await backend.open().fork(cid, new_conversation_id=backend.cid("whole"))
    record = await backend.open().read_record(fork_id)
    assert record is not None
    original = await backend.open().load(cid)
    forked = await backend.open().load(fork_id)
    assert original is not None and forked is not None
    again = await outcome(backend.open().fork(cid, new_conversation_id=fork_id))
    await backend.open().delete(cid)
    kept = await backend.open().load(fork_id)
    assert kept is not None
    return {
        "original": plain(original.messages),
        "forked": plain(forked.messages),
        "whole": plain(whole.messages),
        "forked_from": backend.relative(record.forked_from),
        "again": again,
        "kept after delete": plain(kept.messages),
    }


@scenario
async def listing(backend: Backend) -> Any:
    scope = backend.cid("scope")
    for name in ("a", "b", "c"):
        await backend.open().save(
            Conversation(conversation_id=backend.cid(name), messages=turn(0)), scope=scope
        )
    loaded = await backend.open().load(backend.cid("a"))
    assert loaded is not None
    loaded.messages.extend(turn(1))
    await backend.open().save(loaded)  # "a" is now the most recently saved
    store = backend.open()
    return {
        "all": [
            backend.relative(r.conversation_id) for r in await store.list_conversations(scope=scope)
        ],
        "limited": [
            backend.relative(r.conversation_id)
            for r in await store.list_conversations(scope=scope, limit=2)
        ],
        "negative": await outcome(store.list_conversations(scope=scope, limit=-1)),
    }


async def titles_and_metadata(backend: Backend) -> Any:
    cid = backend.cid()
    await backend.open().save(Conversation(conversation_id=cid, messages=turn(0)))
    loaded = await backend.open().load(cid)
    assert loaded is not None
    trace: dict[str, Any] = {
        "titled": await outcome(backend.open().update(cid, title="First", expected_title=None))
    }
    trace["retitle guarded"] = await outcome(
        backend.open().update(cid, title="Second", expected_title=None)
    )
    trace["metadata"] = await outcome(backend.open().update(cid, metadata={"model": "m"}))
    loaded.messages.extend(turn(1))
    trace["save after update"] = await outcome(backend.open().save(loaded))  # not a conflict
    record = await backend.open().read_record(cid)
    assert record is not None
    trace["record"] = (record.title, record.metadata, record.revision == loaded.revision)
    return trace


if hasattr(ConversationStore, "update"):  # pydantic-ai-slim >= 2.78
    scenario(titles_and_metadata)


@scenario
async def payloads(backend: Backend) -> Any:
    """Large, binary, unicode and not-JSON contents, as a restart reads them back."""
    cid = backend.cid()
    big = "".join(f"line {i}: {'x' * 90}\n" for i in range(5000))  # about 0.5 MB
    unicode = (
        "naïve café — 日本語 — עברית — 🦜🧪 — e\u0301 — \u2028 — \U0001d518\U0001d52b\U0001d526"
    )
    image = BinaryContent(bytes(range(256)) * 4, media_type="image/png")
    history: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart("be brief " + unicode, timestamp=STAMP),
                UserPromptPart(["look:", image, unicode], timestamp=STAMP),
            ],
            timestamp=STAMP,
        ),
        ModelResponse(
            parts=[
                TextPart(unicode),
                ToolCallPart("raw", "not json {", tool_call_id="raw"),
                ToolCallPart(
                    "nested",
                    {"deep": [{"a": [1, 2.5, None, True]}], "u": unicode},
                    tool_call_id="n",
                ),
            ],
            timestamp=STAMP,
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("raw", big, tool_call_id="raw", timestamp=STAMP),
                ToolReturnPart(
                    "nested",
                    {"rows": [[1, "two"], {"three": 3}]},
                    tool_call_id="n",
                    timestamp=STAMP,
                ),
            ],
            timestamp=STAMP,
        ),
        ModelResponse(parts=[ToolCallPart("retry", {}, tool_call_id="r")], timestamp=STAMP),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "retry",
                    "try again: " + unicode,
                    tool_call_id="r",
                    outcome="retried",
                    timestamp=STAMP,
                )
            ],
            timestamp=STAMP,
        ),
        reply(big[:1000]),
    ]
    await backend.open().save(Conversation(conversation_id=cid, messages=history))
    loaded = await backend.open().load(cid)
    assert loaded is not None
    first = loaded.messages[0]
    assert isinstance(first, ModelRequest) and isinstance(first.parts[1], UserPromptPart)
    return {
        "messages": plain(loaded.messages),
        "equal": loaded.messages[1:] == history[1:],
        "prompt items": [type(item).__name__ for item in first.parts[1].content],
    }


@scenario
async def agent_runs_across_restarts(backend: Backend) -> Any:
    """Real agent runs (with a tool) continuing a conversation each from a new store object;
    the model gets the history as stored."""
    cid = backend.cid()
    received: list[list[Any]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(plain(messages))
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(
            isinstance(p, UserPromptPart) for p in last.parts
        ):
            return ModelResponse(
                parts=[
                    ToolCallPart("double", {"n": len(messages)}, tool_call_id=f"d{len(messages)}")
                ]
            )
        return ModelResponse(parts=[TextPart(f"done after {len(messages)}")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def double(n: int) -> int:
        return 2 * n

    for prompt in ("one", "two", "three"):
        store = backend.open()
        conversation = await store.load(cid) or Conversation(conversation_id=cid)
        result = await agent.run(prompt, conversation=conversation)
        await store.save(result)
    final = await backend.open().load(cid)
    assert final is not None
    return {"received": received, "stored": plain(final.messages)}


# -- the one place memstore differs on purpose ----------------------------------------------------


def _is_interrupted_return(message: dict[str, Any]) -> bool:
    parts = message.get("parts", [])
    return bool(parts) and all(
        p.get("part_kind") == "tool-return" and p.get("content") == INTERRUPTED_TEXT for p in parts
    )


def _without_interrupted_returns(result: Any) -> Any:
    return {
        **result,
        "window": [m for m in result["window"] if not _is_interrupted_return(m)],
    }


def _last_k_of_each_window(result: Any) -> Any:
    windows = {k: (w[-k:] if k else []) for k, w in result["windows"].items()}
    return {**result, "windows": windows}


def _binary_as_given(result: Any) -> Any:
    items = ["BinaryContent" if n == "BinaryImage" else n for n in result["prompt items"]]
    return {**result, "prompt items": items}


KNOWN_DIFFERENCES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "limits": (
        "load(limit=k) never starts inside a tool exchange: a window whose k-th newest message "
        "is a tool return also holds the response with its call, so it may hold more than k",
        _last_k_of_each_window,
    ),
    "interrupted_call": (
        "load(limit=k) answers a call whose return was never stored (not the newest "
        "response's) with a synthetic error return, a ModelRequest of its own that is not stored",
        _without_interrupted_returns,
    ),
    "payloads": (
        "messages are stored as JSON and read back with pydantic-ai's own validator, which "
        "returns a BinaryContent of an image type as its subclass BinaryImage (same data and "
        "media type); the in-memory store returns a copy of the object it was given",
        _binary_as_given,
    ),
}


# -- the test ----------------------------------------------------------------------------------


def run_on_memstore(env: AdapterEnv, name: str) -> Any:
    backend = Backend(lambda: MemstoreConversationStore(env.store()), uuid.uuid4().hex[:12])
    return env.run(SCENARIOS[name](backend))


def run_on_reference(env: AdapterEnv, name: str) -> Any:
    reference = InMemoryConversationStore()
    backend = Backend(lambda: reference, uuid.uuid4().hex[:12])
    return env.run(SCENARIOS[name](backend))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_memstore_observes_what_the_in_memory_store_observes(env: AdapterEnv, name: str) -> None:
    expected = run_on_reference(env, name)
    found = run_on_memstore(env, name)
    if name in KNOWN_DIFFERENCES:
        reason, normalise = KNOWN_DIFFERENCES[name]
        assert found != expected, f"no longer differs ({reason}): drop it from KNOWN_DIFFERENCES"
        assert normalise(found) == expected, reason
    else:
        assert found == expected
