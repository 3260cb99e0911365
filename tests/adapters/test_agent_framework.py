"""The Agent Framework history provider: a differential suite (the same scenarios through the
framework's ``InMemoryHistoryProvider`` and ``FileHistoryProvider`` and through
``MemstoreHistoryProvider``, the same messages back, by ``to_dict()``) on every backend of
``tests/adapters/conftest.py`` (SQLite always, PostgreSQL and MariaDB when their URLs are set;
sync and async stores), an agent with a scripted chat client that calls a tool and keeps it
across a restart, the window, canonical rows, unicode and large tool results."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent_framework")

import agent_framework
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    HistoryProvider,
    InMemoryHistoryProvider,
    Message,
    tool,
)

from memstore.adapters.agent_framework import (
    CONTENT_KEY,
    MESSAGE_KEY,
    MemstoreHistoryProvider,
    messages_to_rows,
    rows_to_messages,
)
from memstore.errors import InvalidAppIdError, InvalidInputError
from memstore.messages import AiMessage, SystemMessage, ToolRequest, ToolResult, UserMessage
from tests.adapters.conftest import AdapterEnv

pytestmark = pytest.mark.filterwarnings(
    r"ignore:\[FILE_HISTORY\] FileHistoryProvider is experimental"
)

BIG = "a line of a file, é and 🌍\n" * 12_000  # ~330 KB, over the 64 KiB metadata limit
UNICODE = "héllo 🌍 中文 עברית \u200d\U0001f469\u200d\U0001f4bb \\ \" '"


def user(text: str, **kwargs: Any) -> Message:
    return Message("user", [text], **kwargs)


def call(call_id: str, name: str = "add", arguments: Any = '{"a": 1, "b": 2}') -> Content:
    return Content.from_function_call(call_id=call_id, name=name, arguments=arguments)


def result(call_id: str, value: Any = "3", **kwargs: Any) -> Content:
    return Content.from_function_result(call_id=call_id, result=value, **kwargs)


def thinking(text: str, signature: str | None = "sig") -> Content:
    return Content.from_text_reasoning(text=text, protected_data=signature)


SCENARIOS: dict[str, list[list[Message]]] = {
    "chat": [[user("hi"), Message("assistant", ["hello"])], [user("bye")]],
    "tool round": [
        [
            user("Add 1 and 2"),
            Message("assistant", [thinking("add them"), call("c1")], author_name="calc"),
            Message("tool", [result("c1")]),
            Message("assistant", ["It is 3."], message_id="m-4"),
        ]
    ],
    "parallel calls and reasoning between them": [
        [
            user("Add and multiply"),
            Message(
                "assistant",
                [
                    thinking("first"),
                    Content.from_text("Let me see. "),
                    thinking("second", None),
                    call("c1", arguments={"a": 1, "b": 2}),
                    thinking("third"),
                    call("c2", "mul"),
                ],
            ),
            Message("tool", [result("c1"), result("c2", {"product": 2})]),
            Message("assistant", ["3 and 2"]),
        ]
    ],
    "results in a later batch": [
        [user("Add"), Message("assistant", [call("c1")])],
        [Message("tool", [result("c1", "3")]), Message("assistant", ["3"])],
    ],
    "an error result and a result of no call": [
        [
            user("go"),
            Message("assistant", [call("c1")]),
            Message("tool", [result("c1", "boom", exception="ValueError: boom")]),
            Message("tool", [result("nowhere", "orphan")]),
            Message("assistant", ["failed"]),
        ]
    ],
    "system, data, reasoning only, additional properties": [
        [
            Message("system", ["You are terse."]),
            Message(
                "user",
                [
                    Content.from_text("look"),
                    Content.from_uri("data:image/png;base64,iVBORw0KGgo=", media_type="image/png"),
                ],
                additional_properties={"k": [1, {"x": None}]},
            ),
            Message("assistant", [thinking("only thoughts")]),
            Message("assistant", ["seen"]),
        ]
    ],
    "unicode": [
        [
            user(UNICODE),
            Message("assistant", [call("c-é", "echo", {"text": UNICODE})]),
            Message("tool", [result("c-é", UNICODE)]),
            Message("assistant", [UNICODE]),
        ]
    ],
    "large tool result": [
        [
            user("read the file"),
            Message("assistant", [call("c1", "read", {"path": "big.txt"})]),
            Message("tool", [result("c1", BIG)]),
            Message("assistant", ["read"]),
        ],
        [
            Message(
                "assistant", [call("c2", "read", {"path": "a"}), call("c3", "read", {"path": "b"})]
            ),
            Message("tool", [result("c2", BIG), result("c3", BIG)]),
        ],
        [Message("assistant", [call("c4", "read", {"path": "c"})])],
        [Message("tool", [result("c4", BIG)]), Message("tool", [result("orphan", BIG[:30_000])])],
    ],
}


def dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [message.to_dict() for message in messages]


def references(tmp_path: Path) -> list[HistoryProvider]:
    """The framework's providers: in memory, and on files where the release has them
    (``FileHistoryProvider`` came after 1.0)."""
    files = getattr(agent_framework, "FileHistoryProvider", None)
    return [InMemoryHistoryProvider(), *([] if files is None else [files(tmp_path / "files")])]


async def history(provider: HistoryProvider, session_id: str, state: dict[str, Any]) -> Any:
    return dicts(await provider.get_messages(session_id, state=state))


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_same_messages_as_the_frameworks_providers(
    env: AdapterEnv, tmp_path: Path, scenario: str
) -> None:
    providers = [*references(tmp_path), MemstoreHistoryProvider(env.store())]

    async def run() -> None:
        session_id = f"s-{uuid.uuid4()}"
        states: list[dict[str, Any]] = [{} for _ in providers]
        for batch in SCENARIOS[scenario]:
            for provider, state in zip(providers, states, strict=True):
                await provider.save_messages(session_id, batch, state=state)
            seen = [await history(p, session_id, s) for p, s in zip(providers, states, strict=True)]
            assert all(got == seen[0] for got in seen)
        expected = [m.to_dict() for batch in SCENARIOS[scenario] for m in batch]
        assert seen[-1] == expected

    env.run(run())


def test_known_difference_a_replayed_transcript_is_stored_again(
    env: AdapterEnv, tmp_path: Path
) -> None:
    first = [user("hi", message_id="u1"), Message("assistant", ["hello"], message_id="a1")]
    replay = [*first, user("again", message_id="u2")]
    memstore = MemstoreHistoryProvider(env.store())

    async def run() -> None:
        session_id = f"s-{uuid.uuid4()}"
        for provider in [*references(tmp_path), memstore]:
            state: dict[str, Any] = {}
            await provider.save_messages(session_id, first, state=state)
            await provider.save_messages(session_id, replay, state=state)
            got = await history(provider, session_id, state)
            if provider is memstore:
                assert got == dicts([*first, *replay])
            else:  # older releases (1.10 tried) append it whole too
                assert got in (dicts(replay), dicts([*first, *replay]))

    env.run(run())


def test_rows_are_canonical_and_the_app_is_the_session(env: AdapterEnv) -> None:
    store = env.store()
    provider = MemstoreHistoryProvider(store, user_id="u-1")
    batch = SCENARIOS["parallel calls and reasoning between them"][0]
    session_id = f"s-{uuid.uuid4()}"
    env.run(provider.save_messages(session_id, batch))
    rows = env.sync_store().load_window(session_id)
    kinds = ["UserMessage", "AiMessage", "ToolResult", "ToolResult", "AiMessage"]
    assert [type(row).__name__ for row in rows] == kinds
    reply = rows[1]
    assert isinstance(reply, AiMessage)
    assert reply.text == "Let me see. "
    assert reply.tool_requests == [
        ToolRequest(id="c1", name="add", arguments='{"a": 1, "b": 2}'),
        ToolRequest(id="c2", name="mul", arguments='{"a": 1, "b": 2}'),
    ]
    assert [(p.text, p.signature, p.before_call) for p in reply.reasoning] == [
        ("first", "sig", None),
        ("second", None, "c1"),
        ("third", "sig", "c2"),
    ]
    assert {p.provider for p in reply.reasoning} == {"agent_framework"}
    assert [(r.id, r.tool_name, r.text) for r in rows[2:4] if isinstance(r, ToolResult)] == [
        ("c1", "add", "3"),
        ("c2", "mul", '{"product": 2}'),
    ]
    assert MESSAGE_KEY in rows[2].metadata and MESSAGE_KEY not in rows[3].metadata
    assert CONTENT_KEY in rows[3].metadata
    assert MemstoreHistoryProvider.app_id(None) == "default"
    with pytest.raises(InvalidAppIdError):
        MemstoreHistoryProvider.app_id("x" * 200)


def test_rows_written_by_other_means_are_read_as_messages(env: AdapterEnv) -> None:
    store = env.sync_store()
    session_id = f"s-{uuid.uuid4()}"
    store.append(
        session_id,
        [
            SystemMessage(text="be brief"),
            UserMessage(text="Add 1 and 2"),
            AiMessage(text=None, tool_requests=[ToolRequest(id="c9", name="add", arguments="{}")]),
            ToolResult(id="c9", tool_name="add", text="3"),
            AiMessage(text="3"),
        ],
    )
    got = env.run(MemstoreHistoryProvider(env.store()).get_messages(session_id))
    assert [m.role for m in got] == ["system", "user", "assistant", "tool", "assistant"]
    assert got[2].contents[0].call_id == "c9" and got[2].contents[0].name == "add"
    assert got[3].contents[0].call_id == "c9" and got[3].contents[0].result == "3"
    assert got[4].text == "3"


def test_the_window_never_starts_inside_a_tool_exchange(env: AdapterEnv) -> None:
    session_id = f"s-{uuid.uuid4()}"
    batch = [user("start")]
    for n in range(3):
        batch += [
            Message("assistant", [call(f"c{n}"), call(f"d{n}")]),
            Message("tool", [result(f"c{n}"), result(f"d{n}")]),
            Message("assistant", [f"done {n}"]),
        ]
    provider = MemstoreHistoryProvider(env.store(), max_messages=1)
    env.run(provider.save_messages(session_id, batch))
    assert dicts(env.run(provider.get_messages(session_id))) == dicts(batch[-1:])
    # the newest 2 rows start at a result: the window keeps the whole exchange (4 rows)
    provider = MemstoreHistoryProvider(env.store(), max_messages=2)
    assert dicts(env.run(provider.get_messages(session_id))) == dicts(batch[-3:])
    tight = MemstoreHistoryProvider(env.store(), max_tokens=1)
    assert dicts(env.run(tight.get_messages(session_id))) == dicts(batch[-1:])
    with pytest.raises(InvalidInputError):
        MemstoreHistoryProvider(env.store(), max_messages=0)


# -- an agent with a scripted chat client ---------------------------------------------------------


class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A chat client that answers with the next scripted message and records what it was
    sent (no network)."""

    def __init__(self, replies: Sequence[Message]) -> None:
        super().__init__()
        self.replies = list(replies)
        self.sent: list[list[dict[str, Any]]] = []

    async def _inner_get_response(
        self, *, messages: Any, stream: bool, options: Any, **_: Any
    ) -> Any:
        self.sent.append(dicts(messages))
        return ChatResponse(messages=[self.replies.pop(0)])


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def script() -> list[Message]:
    return [
        Message("assistant", [thinking("use the tool"), call("call-1", "add", '{"a": 1, "b": 2}')]),
        Message("assistant", ["1 + 2 = 3"]),
        Message("assistant", ["You're welcome."]),
    ]


def plain(sent: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """What a client was sent on each call, without what differs between two runs: the
    attribution each provider stamps on its messages and the framework's call ids."""

    def one(message: dict[str, Any]) -> dict[str, Any]:
        extra = {k: v for k, v in message["additional_properties"].items() if k != "_attribution"}
        contents = [{k: v for k, v in c.items() if k != "id"} for c in message["contents"]]
        return {**message, "additional_properties": extra, "contents": contents}

    return [[one(message) for message in request] for request in sent]


async def conversation(
    make: Callable[[], HistoryProvider], restart: bool = True
) -> list[list[dict[str, Any]]]:
    """Two runs of an agent on one session, the second with a new provider (a restart)."""
    replies = script()
    client = ScriptedClient(replies)
    agent = Agent(client, tools=[add], context_providers=[make()])
    session = agent.create_session()
    state = session.state
    first = await agent.run("Add 1 and 2", session=session)
    assert first.text == "1 + 2 = 3"
    if restart:
        agent = Agent(client, tools=[add], context_providers=[make()])
        session = agent.create_session(session_id=session.session_id)
        session.state.update(state)  # the framework's providers keep history in the state
    await agent.run("Thanks!", session=session)
    return client.sent


@pytest.mark.parametrize(
    "flags",
    [{}, {"store_outputs": False}, {"store_inputs": False}, {"load_messages": False}],
    ids=["default", "no-outputs", "no-inputs", "no-load"],
)
def test_an_agent_sends_the_same_as_with_the_in_memory_provider(
    env: AdapterEnv, flags: dict[str, Any]
) -> None:
    reference = env.run(conversation(lambda: InMemoryHistoryProvider(**flags)))
    url_store = env.store()
    got = env.run(conversation(lambda: MemstoreHistoryProvider(url_store, **flags)))
    assert plain(got) == plain(reference)


def test_a_restarted_agent_keeps_its_tool_call(env: AdapterEnv) -> None:
    def make() -> HistoryProvider:
        return MemstoreHistoryProvider(env.store(), "history")  # a new store: a restart

    sent = env.run(conversation(make))
    last = sent[-1]
    kinds = [c["type"] for m in last for c in m["contents"]]
    assert kinds == ["text", "text_reasoning", "function_call", "function_result", "text", "text"]
    calls = [
        c for m in last for c in m["contents"] if c["type"] in ("function_call", "function_result")
    ]
    assert {c["call_id"] for c in calls} == {"call-1"}
    assert calls[1]["result"] == "3"


def test_conversion_round_trips_without_a_store() -> None:
    for scenario, batches in SCENARIOS.items():
        batch = [message for messages in batches for message in messages]
        rows = messages_to_rows(batch)
        assert dicts(rows_to_messages(rows)) == dicts(batch), scenario


def test_a_window_starting_inside_a_tool_message_reads_its_rows_alone() -> None:
    rows = messages_to_rows(
        [
            Message("assistant", [call("c1"), call("c2")]),
            Message("tool", [result("c1"), result("c2", "4")]),
        ]
    )
    got = rows_to_messages(rows[2:])
    assert [(m.role, m.contents[0].call_id, m.contents[0].result) for m in got] == [
        ("tool", "c2", "4")
    ]


def test_concurrent_saves_to_one_session_keep_each_batch_whole(env: AdapterEnv) -> None:
    provider = MemstoreHistoryProvider(env.store(), max_messages=1000)
    session_id = f"s-{uuid.uuid4()}"

    def batch(n: int) -> list[Message]:
        return [
            user(f"task {n}"),
            Message("assistant", [call(f"c{n}")]),
            Message("tool", [result(f"c{n}", str(n))]),
            Message("assistant", [f"done {n}"]),
        ]

    async def run() -> list[dict[str, Any]]:
        await asyncio.gather(*(provider.save_messages(session_id, batch(n)) for n in range(8)))
        return dicts(await provider.get_messages(session_id))

    got = env.run(run())
    assert len(got) == 32
    starts = [got[k]["contents"][0]["text"] for k in range(0, 32, 4)]
    assert sorted(starts) == sorted(f"task {n}" for n in range(8))
    for k in range(0, 32, 4):
        n = int(got[k]["contents"][0]["text"].split()[1])
        assert got[k : k + 4] == dicts(batch(n))
