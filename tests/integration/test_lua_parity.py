"""The Redis Lua scripts and the in-process cache implement one set of window rules.

Random operation sequences run against a ``RedisWindowCache`` (the APPEND and STORE scripts)
and an ``InProcessWindowCache`` with the same random ``WindowPolicy``:

* store a window built by ``select_window`` from random rows (with synthetic answers for
  interrupted calls), guarded by the version read on the miss, sometimes with a write racing
  the rebuild (both caches must then refuse it);
* append batches of realistic messages: tool groups whose results arrive in any order, split
  over several appends, twice, or never (so later messages arrive while the tail group is
  unanswered), stray results for requested-before or never-requested ids;
* a late result, or a new request, for a call id the window holds (answered, answered by a
  synthetic result, still open) or does not hold;
* invalidate;
* lose the window's heads (as a window stored or extended by a memstore that did not keep
  them: the key gone, or another window's stamp), so APPEND reads the whole window instead.

After every step both caches must read the same window (or both none), and a window's heads
must be exactly its entries' headers under its stamp (unless they were just lost). Always on
fakeredis (which runs the scripts in a real Lua runtime), and on the real Redis too when
``MEMSTORE_TEST_REDIS_URL`` is set (unique app ids, their keys deleted at the end).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.cache import keys
from memstore.cache.base import WindowPolicy
from memstore.cache.memory_cache import InProcessWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.tokens import approximate_tokens
from memstore.core.window import (
    StoredMessage,
    WindowEntry,
    entry_for,
    is_synthetic,
    select_window,
)
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from tests.conftest import redis_client

texts = st.text(max_size=6)
ID_PREFIXES = ["call_", "é🌍", "%a.[-]"]  # multi-byte characters and Lua pattern characters
FATES = ["answered"] * 5 + ["twice", "missing"]


class CallIds:
    """Call ids of one example: mostly fresh, sometimes one used before (a reused id)."""

    def __init__(self) -> None:
        self.used: list[str] = []

    def draw(self, draw: st.DrawFn) -> str:
        if self.used and draw(st.integers(0, 7)) == 0:
            return draw(st.sampled_from(self.used))
        call_id = f"{draw(st.sampled_from(ID_PREFIXES))}{len(self.used)}"
        self.used.append(call_id)
        return call_id


@st.composite
def chunks(draw: st.DrawFn, ids: CallIds) -> list[Message]:
    """A few consecutive messages: a plain message, a stray result (for an id requested
    before, or never), or a tool group whose results come in any order, twice, or never
    (tools still running, or a crash)."""
    kind = draw(
        st.sampled_from(["user", "user", "ai", "system", "tools", "tools", "tools", "stray"])
    )
    if kind == "user":
        return [UserMessage(text=draw(texts))]
    if kind == "ai":
        return [AiMessage(text=draw(texts))]
    if kind == "system":
        return [SystemMessage(text=draw(texts))]
    if kind == "stray":
        call_id = draw(st.sampled_from([*ids.used, "never-requested"]))
        return [ToolResult(id=call_id, tool_name="read", text=draw(texts))]
    calls: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        call_id = ids.draw(draw)
        if call_id not in calls:
            calls.append(call_id)
    request = AiMessage(
        text=draw(st.one_of(st.none(), texts)),
        tool_requests=[
            ToolRequest(id=i, name="read", arguments=json.dumps({"i": i})) for i in calls
        ],
    )
    answers: list[Message] = []
    for call_id in calls:
        fate = draw(st.sampled_from(FATES))
        for _ in range({"answered": 1, "twice": 2, "missing": 0}[fate]):
            failed = draw(st.booleans())
            answers.append(
                ToolResult(id=call_id, tool_name="read", text=draw(texts), is_error=failed)
            )
    return [request, *draw(st.permutations(answers))]


def histories(ids: CallIds) -> st.SearchStrategy[list[Message]]:
    return st.lists(chunks(ids), min_size=1, max_size=8).map(
        lambda parts: [m for p in parts for m in p]
    )


policies = st.builds(
    WindowPolicy,
    max_messages=st.integers(1, 3) | st.integers(1, 8),  # small windows trim more
    ttl_seconds=st.just(3600),
    start_at_user=st.booleans(),
    max_tokens=st.none() | st.integers(1, 60),
)


def counted(message: Message) -> WindowEntry:
    """An entry with its token count, as a store with a token budget makes it."""
    return entry_for(message, approximate_tokens(message))


OPERATIONS = (
    ["append"] * 4 + ["late_result", "reused_id", "store", "invalidate"] + ["lose_heads"] * 2
)
WHEN_MISSING = ["store"] * 3 + ["append", "late_result", "invalidate"]


def heads_in_step(client: redis.Redis, app_id: str) -> bool:
    """Whether the app's heads key holds its window's stamp and entry headers (or the app has
    no window and no heads)."""
    window_key, _, _, origin_key, _, heads_key = keys.app_keys(app_id)
    entries: list[bytes] = client.lrange(window_key, 0, -1)  # type: ignore[assignment]
    heads = client.get(heads_key)
    if not entries:
        return heads is None
    origin: bytes = client.get(origin_key) or b""  # type: ignore[assignment]
    stamp = origin.split(b"|", 1)[1] if b"|" in origin else b""
    return heads == stamp + b"|" + b"".join(e[: e.index(b"\x1e") + 1] for e in entries)


@pytest.fixture(scope="module", params=["fakeredis", "redis"])
def redis_server(request: pytest.FixtureRequest) -> Iterator[tuple[redis.Redis, list[str]]]:
    """A Redis client plus the app ids used on it; their keys are deleted at the end."""
    client = fakeredis.FakeRedis() if request.param == "fakeredis" else redis_client()
    used: list[str] = []
    yield client, used
    for app_id in used:
        client.delete(*keys.app_keys(app_id))
    client.close()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(policy=policies, data=st.data())
def test_lua_scripts_and_in_process_cache_agree(
    redis_server: tuple[redis.Redis, list[str]], policy: WindowPolicy, data: st.DataObject
) -> None:
    client, used = redis_server
    app_id = f"parity-{uuid.uuid4().hex}"
    used.append(app_id)
    in_redis = RedisWindowCache(client, policy)
    in_process = InProcessWindowCache(policy)

    ids = CallIds()
    generation = 0  # the app's SQL generation: every write moves it on by one
    pending: list[Message] = []  # the rest of the last chunk, appended over the next steps
    for step in range(data.draw(st.integers(1, 30), label="steps")):
        cached = in_process.read(app_id).messages is not None
        operations = OPERATIONS if cached else WHEN_MISSING  # mostly rebuild a missing window
        operation = data.draw(st.sampled_from(operations), label=f"{step}: operation")
        if operation == "append":
            count = data.draw(st.integers(1, 3), label=f"{step}: batch size")
            while len(pending) < count:  # a batch may span chunks
                pending += data.draw(chunks(ids), label=f"{step}: next chunk")
            batch, pending = pending[:count], pending[count:]
            entries = [counted(message) for message in batch]
            in_redis.append(app_id, entries, before=generation, after=generation + 1)
            in_process.append(app_id, entries, before=generation, after=generation + 1)
            generation += 1
        elif operation in ("late_result", "reused_id"):
            # A result, or a new request, for a call id the window holds (answered, answered by
            # a synthetic interrupted result, or still open), or for any other id.
            window = in_process.read(app_id).messages or []
            held = [c.id for m in window if isinstance(m, AiMessage) for c in m.tool_requests]
            synthetic = [m.id for m in window if is_synthetic(m)]
            choices = st.sampled_from([*ids.used, "never-requested"])
            for preferred in (held, synthetic):
                if preferred:
                    choices = st.sampled_from(preferred) | choices
            call_id = data.draw(choices, label=f"{step}: call id")
            if operation == "late_result":
                message: Message = ToolResult(id=call_id, tool_name="read", text="late")
            else:
                calls = [call_id]
                if data.draw(st.booleans(), label=f"{step}: with a second call"):
                    calls = list(dict.fromkeys([call_id, ids.draw(data.draw)]))
                message = AiMessage(
                    text=None,
                    tool_requests=[ToolRequest(id=i, name="read", arguments="{}") for i in calls],
                )
            entries = [counted(message)]
            in_redis.append(app_id, entries, before=generation, after=generation + 1)
            in_process.append(app_id, entries, before=generation, after=generation + 1)
            generation += 1
        elif operation == "store":
            # The rebuild flow of MemoryStore: on a hit, drop the window first (as reload()
            # does); read the version on the miss, build the window from rows, store it guarded
            # by that version. Sometimes a write races the rebuild: then both must refuse it.
            if in_process.read(app_id).messages is not None:
                in_redis.invalidate(app_id)
                in_process.invalidate(app_id)
            redis_read, process_read = in_redis.read(app_id), in_process.read(app_id)
            assert redis_read.messages is None and process_read.messages is None
            rows = data.draw(histories(ids), label=f"{step}: rows")
            if data.draw(st.integers(0, 2), label=f"{step}: crashed mid-tool") == 0:
                calls = list(dict.fromkeys(ids.draw(data.draw) for _ in range(2)))
                rows.append(
                    AiMessage(
                        text=None,
                        tool_requests=[
                            ToolRequest(id=i, name="read", arguments="{}") for i in calls
                        ],
                    )
                )
            size = data.draw(st.integers(1, policy.max_messages + 4), label=f"{step}: size")
            window = select_window(
                [StoredMessage(i + 1, m) for i, m in enumerate(rows)],
                size,
                start_at_user=policy.start_at_user,
            )
            raced = data.draw(st.integers(0, 3), label=f"{step}: a write races it") == 0
            if raced:
                racing = [counted(m) for m in data.draw(chunks(ids), label=f"{step}: write")]
                in_redis.append(app_id, racing, before=generation, after=generation + 1)
                in_process.append(app_id, racing, before=generation, after=generation + 1)
                generation += 1
            entries = [counted(message) for message in window.messages]
            stored = in_redis.store(
                app_id, entries, window.synthetic_call_ids, redis_read.version, generation
            )
            assert stored == in_process.store(
                app_id, entries, window.synthetic_call_ids, process_read.version, generation
            )
            assert stored == (bool(window.messages) and not raced)
            # What follows builds on the window just stored: often the late results of calls it
            # answers as interrupted (the tool finished after the crash-recovery rebuild).
            late = data.draw(st.permutations(window.synthetic_call_ids), label=f"{step}: late")
            count = data.draw(st.integers(-1, len(late)), label=f"{step}: late results")
            count = max(count, 1)
            pending = [ToolResult(id=i, tool_name="read", text="late") for i in late[:count]]
        elif operation == "lose_heads":
            how = data.draw(st.sampled_from(["deleted", "stamp", "short"]), label=f"{step}: lost")
            lose_heads(client, app_id, how)
        else:
            in_redis.invalidate(app_id)
            in_process.invalidate(app_id)
        if operation != "lose_heads":
            assert heads_in_step(client, app_id), f"heads after step {step} ({operation})"

        expected = in_process.read(app_id).messages
        assert in_redis.read(app_id).messages == expected, f"after step {step} ({operation})"
        if expected is not None:
            assert expected and not isinstance(expected[0], ToolResult)
            if policy.start_at_user:
                assert isinstance(expected[0], UserMessage)


def lose_heads(client: redis.Redis, app_id: str, how: str) -> None:
    """Make the app's heads untrustworthy, as a memstore that did not keep them would leave
    them: ``deleted``, another window's (``stamp``), or one header ``short``; or leave them
    (``kept``)."""
    heads_key = keys.heads_key(app_id)
    value: bytes = client.get(heads_key) or b"|"  # type: ignore[assignment]
    stamp, _, body = value.partition(b"|")
    if how == "deleted":
        client.delete(heads_key)
    elif how == "stamp":  # as many headers, all of plain user messages
        client.set(heads_key, b"0ther|" + b"U\x1e" * body.count(b"\x1e"))
    elif how == "short":
        client.set(heads_key, stamp + b"|" + body[: body.rfind(b"\x1e", 0, -1) + 1])


@pytest.mark.parametrize("how", ["kept", "deleted", "stamp", "short"])
@pytest.mark.parametrize("summary", [False, True])
def test_an_append_without_trustworthy_heads_reads_the_window_and_writes_them_anew(
    redis_server: tuple[redis.Redis, list[str]], how: str, summary: bool
) -> None:
    client, used = redis_server
    app_id = f"heads-{uuid.uuid4().hex}"
    used.append(app_id)
    policy = WindowPolicy(max_messages=4, ttl_seconds=60)
    in_redis, in_process = RedisWindowCache(client, policy), InProcessWindowCache(policy)
    opening: list[Message] = [SystemMessage(text="summary")] if summary else []
    rows: list[Message] = [
        *opening,
        UserMessage(text="q"),
        AiMessage(text=None, tool_requests=[ToolRequest(id="c1", name="t", arguments="{}")]),
    ]
    entries = [counted(m) for m in rows]
    if summary:  # a compaction's summary opens the window (kind M: never evicted)
        entries[0] = entries[0]._replace(kind="M")
    for cache in (in_redis, in_process):
        assert cache.store(app_id, entries, [], cache.read(app_id).version, 0)
    steps: list[list[Message]] = [
        [ToolResult(id="c1", tool_name="t", text="r")],  # answers the open request
        [  # evicts the front
            AiMessage(text="a"),
            UserMessage(text="q2"),
            AiMessage(text=None, tool_requests=[ToolRequest(id="c2", name="t", arguments="{}")]),
        ],
        [AiMessage(text=None, tool_requests=[ToolRequest(id="c2", name="t", arguments="{}")])],
    ]
    for generation, batch in enumerate(steps):
        lose_heads(client, app_id, how)
        appended = [counted(m) for m in batch]
        in_redis.append(app_id, appended, before=generation, after=generation + 1)
        in_process.append(app_id, appended, before=generation, after=generation + 1)
        assert in_redis.read(app_id).messages == in_process.read(app_id).messages
        assert heads_in_step(client, app_id)
    # the last step reused a call id the window holds: both dropped the window
    assert in_redis.read(app_id).messages is None


@pytest.mark.parametrize("how", ["kept", "deleted"])
def test_a_new_request_reusing_a_held_call_id_is_told_from_ids_that_only_contain_it(
    redis_server: tuple[redis.Redis, list[str]], how: str
) -> None:
    """Call ids that are prefixes, suffixes or digits of others (and of the token counts in
    the headers) are not held; an id the window holds is, whether APPEND reads the heads or
    the whole window."""
    client, used = redis_server
    app_id = f"held-{uuid.uuid4().hex}"
    used.append(app_id)
    policy = WindowPolicy(max_messages=50, ttl_seconds=60, max_tokens=10_000)
    in_redis, in_process = RedisWindowCache(client, policy), InProcessWindowCache(policy)

    def request(*ids: str) -> AiMessage:
        return AiMessage(
            text=None, tool_requests=[ToolRequest(id=i, name="t", arguments="{}") for i in ids]
        )

    def result(call_id: str) -> ToolResult:
        return ToolResult(id=call_id, tool_name="t", text="r")

    rows: list[Message] = [
        UserMessage(text="q"),
        request("c12", "xc1", "Rc"),
        result("c12"),
        result("xc1"),
        result("Rc"),
        AiMessage(text="a"),
    ]
    entries = [counted(m) for m in rows]
    assert all(e.tokens for e in entries)  # the headers carry token counts (digits)
    for cache in (in_redis, in_process):
        assert cache.store(app_id, entries, [], cache.read(app_id).version, 0)
    generation = 0
    for call_id in ["c1", "c", "1", "2", "12", "x", "R", "c12x", str(entries[1].tokens)]:
        lose_heads(client, app_id, how)
        batch = [counted(request(call_id)), counted(result(call_id))]
        for cache in (in_redis, in_process):
            cache.append(app_id, batch, before=generation, after=generation + 1)
        generation += 1
        window = in_redis.read(app_id).messages
        assert window == in_process.read(app_id).messages
        assert window is not None and window[-1] == result(call_id), call_id
    lose_heads(client, app_id, how)
    for cache in (in_redis, in_process):  # held: the window is dropped
        cache.append(app_id, [counted(request("xc1"))], before=generation, after=generation + 1)
    assert in_redis.read(app_id).messages is None
    assert in_process.read(app_id).messages is None
