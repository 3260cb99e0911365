"""Fuzzing ``StreamAssembler.feed`` with random and mutated chunk sequences of the protocols
it accepts (LangChain4j-style JSON, OpenAI Chat Completions chunks, Anthropic Messages events,
thinking included, OpenAI Responses events), as dicts, JSON text, bytes and SDK-like objects.

For every sequence:

* a chunk either succeeds or raises a :class:`~memstore.errors.MemstoreError` subclass
  (never ``KeyError``, ``TypeError``, ``RecursionError``...);
* a rejected chunk leaves the assembler's state exactly as it was (deep snapshot before and
  after), and replaying only the accepted chunks on a fresh assembler accepts them all and
  ends in the same state (so nothing hidden changed either);
* no quadratic case: every chunk does the same Python-level work (trace events, counted, not
  timed) on a fresh assembler and on one that already holds a long turn (caches such as ABC
  ``isinstance`` results are warmed on a throwaway twin first, so only the turn differs).

``MEMSTORE_TEST_FUZZ_EXAMPLES`` raises the example count (default 60, a few seconds).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.core.stream import StreamAssembler
from memstore.errors import MemstoreError
from tests.unit.test_stream import (
    ANTHROPIC_STREAM,
    OPENAI_STREAM,
    as_objects,
    grow_turn,
    traced_steps,
)
from tests.unit.test_stream_reasoning import SIG, responses_turn, thinking_then_tool_use

EXAMPLES = int(os.environ.get("MEMSTORE_TEST_FUZZ_EXAMPLES", "60"))
GROWN_ROUNDS = 40

LANGCHAIN4J_STREAM: list[dict[str, Any]] = [
    {"type": "ai_response", "data": "Running "},
    {"type": "tool_request", "id": "t1", "name": "ls", "arguments": '{"d":'},
    {"type": "tool_request", "id": "t2", "name": "cat", "index": 1, "arguments": "{}"},
    {"type": "tool_request", "id": "t1", "name": "ls", "arguments": ' "."}'},
    {"type": "tool_executed", "id": "t1", "result": "a b"},
    {"type": "tool_executed", "id": "t2", "result": "boom", "is_error": True},
    {"type": "tool_executed", "id": "t3", "name": "pwd", "arguments": "{}", "result": "/"},
    {"type": "ai_response", "data": "done."},
]

ids = st.sampled_from(["c1", "c2", "c3", "t1", "t2", "toolu_1", "", "c\x00"])
fragments = st.sampled_from(
    ["", "{", "}", '{"a": 1}', '"x"', "\x00", "\ud83c", "\udf0d", "é", "🌍", "[1]", "null", "ok"]
) | st.text(max_size=4)
small_ints = st.integers(min_value=-2, max_value=3)
junk = st.recursive(
    st.none()
    | st.booleans()
    | small_ints
    | st.floats(allow_nan=False, width=16)
    | st.text(max_size=3)
    | st.sampled_from(["true", "0", "text", "tool_use", "text_delta"]),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2)
    ),
    max_leaves=4,
)


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | value


@st.composite
def openai_chunks(draw: st.DrawFn) -> dict[str, Any]:
    calls = draw(
        st.lists(
            st.fixed_dictionaries(
                {"index": st.integers(0, 2)},
                optional={
                    "id": ids,
                    "type": st.just("function"),
                    "function": st.fixed_dictionaries(
                        {}, optional={"name": maybe(fragments), "arguments": maybe(fragments)}
                    ),
                },
            ),
            max_size=3,
        )
    )
    delta: dict[str, Any] = {"role": "assistant", "content": draw(maybe(fragments))}
    if calls or draw(st.booleans()):
        delta["tool_calls"] = calls
    choice = {"index": draw(st.sampled_from([0, 0, 0, 1])), "delta": delta}
    return {"object": "chat.completion.chunk", "choices": [choice]}


@st.composite
def anthropic_chunks(draw: st.DrawFn) -> dict[str, Any]:
    index = draw(st.integers(0, 3))
    kind = draw(
        st.sampled_from(
            [
                *("start_text", "start_tool", "start_thinking", "text", "json", "thinking"),
                *("stop", "message_start", "message_delta", "message_stop", "ping", "error"),
            ]
        )
    )
    if kind == "start_text":
        block: dict[str, Any] = {"type": "text", "text": draw(fragments)}
        return {"type": "content_block_start", "index": index, "content_block": block}
    if kind == "start_tool":
        block = {"type": "tool_use", "id": draw(ids), "name": draw(fragments), "input": {}}
        return {"type": "content_block_start", "index": index, "content_block": block}
    if kind == "start_thinking":
        block = {"type": "thinking", "thinking": ""}
        return {"type": "content_block_start", "index": index, "content_block": block}
    if kind == "text":
        delta = {"type": "text_delta", "text": draw(fragments)}
        return {"type": "content_block_delta", "index": index, "delta": delta}
    if kind == "json":
        delta = {"type": "input_json_delta", "partial_json": draw(fragments)}
        return {"type": "content_block_delta", "index": index, "delta": delta}
    if kind == "thinking":
        delta = {"type": "thinking_delta", "thinking": draw(fragments)}
        return {"type": "content_block_delta", "index": index, "delta": delta}
    if kind == "stop":
        return {"type": "content_block_stop", "index": index}
    if kind == "error":
        return {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    return {"type": kind}


@st.composite
def langchain4j_chunks(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["ai_response", "tool_request", "tool_executed"]))
    if kind == "ai_response":
        return {"type": kind, "data": draw(fragments)}
    chunk: dict[str, Any] = {"type": kind, "id": draw(ids)}
    for key, values in (("name", fragments), ("arguments", fragments), ("index", small_ints)):
        if draw(st.booleans()):
            chunk[key] = draw(values)
    if kind == "tool_executed":
        chunk["result"] = draw(fragments)
        if draw(st.booleans()):
            chunk["is_error"] = draw(st.booleans() | junk)
    return chunk


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a chunk (dict keys, list positions), the chunk itself first."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            found.extend(paths(item, (*prefix, position)))
    return found


@st.composite
def mutated(draw: st.DrawFn, chunk: dict[str, Any]) -> Any:
    """The chunk with one field replaced by junk, deleted, or a junk field added."""
    chunk = copy.deepcopy(chunk)
    where = draw(st.sampled_from(paths(chunk)))
    if not where:
        return draw(junk) if draw(st.booleans()) else chunk
    parent: Any = chunk
    for step in where[:-1]:
        parent = parent[step]
    action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
    if action == "replace":
        parent[where[-1]] = draw(junk)
    elif action == "delete":
        del parent[where[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.text(max_size=3))] = draw(junk)
    return chunk


@st.composite
def wrapped(draw: st.DrawFn, chunk: Any) -> Any:
    """As given (dict), as JSON text or bytes, or as SDK-like attribute objects."""
    form = draw(st.sampled_from(["dict", "dict", "json", "bytes", "objects"]))
    if form == "json":
        return json.dumps(chunk)
    if form == "bytes":
        return json.dumps(chunk).encode("utf-8", "surrogatepass")
    if form == "objects":
        return as_objects(chunk)
    return chunk


generated = st.one_of(openai_chunks(), anthropic_chunks(), langchain4j_chunks())
THINKING_STREAM = thinking_then_tool_use([SIG[:16], SIG[16:]])
RESPONSES_STREAM = responses_turn()
recorded = st.sampled_from(
    [*OPENAI_STREAM, *ANTHROPIC_STREAM, *LANGCHAIN4J_STREAM, *THINKING_STREAM, *RESPONSES_STREAM]
)


@st.composite
def chunk_sequences(draw: st.DrawFn) -> list[Any]:
    """A recorded stream, cut and spliced with generated chunks, some of them mutated."""
    base = draw(
        st.sampled_from(
            [
                OPENAI_STREAM,
                ANTHROPIC_STREAM,
                LANGCHAIN4J_STREAM,
                THINKING_STREAM,
                RESPONSES_STREAM,
                [],
            ]
        )
    )
    chunks: list[Any] = list(base)
    for _ in range(draw(st.integers(0, 12))):
        source = draw(st.sampled_from(["generated", "recorded"]))
        chunk = draw(generated if source == "generated" else recorded)
        if draw(st.integers(0, 3)) == 0:
            chunk = draw(mutated(chunk))
        chunks.insert(draw(st.integers(0, len(chunks))), chunk)
    if chunks and draw(st.booleans()):
        position = draw(st.integers(0, len(chunks) - 1))
        chunks[position] = draw(mutated(chunks[position]))
    return [draw(wrapped(chunk)) for chunk in chunks]


def feed(a: StreamAssembler, chunk: Any) -> bool | MemstoreError:
    """Feed one chunk; the typed error when it is rejected (anything else fails the test)."""
    try:
        flushed = a.feed(chunk)
    except MemstoreError as error:
        return error
    if flushed:
        a.mark_flushed(len(a.ready))  # the writer wrote the batch
    return flushed


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(chunks=chunk_sequences(), limit=st.sampled_from([None, 40, 1000]))
def test_feed_fuzz(chunks: list[Any], limit: int | None) -> None:
    a = StreamAssembler(max_text_bytes=limit)
    grown = StreamAssembler(max_text_bytes=limit)
    grow_turn(grown, GROWN_ROUNDS)
    grown.mark_flushed(len(grown.ready))
    accepted: list[Any] = []
    for chunk in chunks:
        before = copy.deepcopy(a._s)
        feed(copy.deepcopy(a), chunk)  # warm caches (ABC isinstance checks) on a twin first
        outcome: list[bool | MemstoreError] = []
        steps = traced_steps(lambda: outcome.append(feed(a, chunk)))  # noqa: B023
        if isinstance(outcome[0], MemstoreError):
            assert a._s == before, f"rejected chunk changed the state: {chunk!r}"
        else:
            accepted.append(chunk)
        # the same chunk after a long turn: the same outcome, the same work
        grown_outcome: list[bool | MemstoreError] = []
        grown_steps = traced_steps(lambda: grown_outcome.append(feed(grown, chunk)))  # noqa: B023
        assert type(grown_outcome[0]) is type(outcome[0])
        assert grown_steps == steps, f"work depends on the turn length: {chunk!r}"
    replay = StreamAssembler(max_text_bytes=limit)
    for chunk in accepted:
        assert not isinstance(feed(replay, chunk), MemstoreError)
    assert replay._s == a._s
