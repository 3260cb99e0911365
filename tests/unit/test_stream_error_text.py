"""Stream errors name the problem, never the chat text: a rejected chunk, an incomplete tool
call or a provider error must not echo what the chunk carried (the project's rule: errors and
logs never carry message text)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memstore.core.stream import StreamAssembler
from memstore.errors import StreamProtocolError

SECRET = "zq SECRET 7 patient-record"
SECRET_WORD = "SECRET"


def _rejected(feed: Any) -> StreamProtocolError:
    with pytest.raises(StreamProtocolError) as caught:
        feed()
    return caught.value


def _assert_clean(error: BaseException) -> None:
    for text in (str(error), repr(error), repr(error.args)):
        assert SECRET_WORD not in text, text


MALFORMED_CHUNKS: list[Any] = [
    SECRET,  # not JSON
    json.dumps([SECRET]),  # JSON, not an object
    json.dumps(SECRET),
    [SECRET],
    42.5,
    {"type": SECRET, "text": SECRET},  # unknown kind with text in it
    {SECRET: SECRET},
    {"choices": [{"delta": {"content": [SECRET]}, "index": 0}]},  # wrong field type
    {"choices": [{"delta": {"tool_calls": [{"index": SECRET}]}, "index": 0}]},
    {"type": "content_block_start", "index": 0, "content_block": {"type": SECRET}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": SECRET, "text": SECRET}},
    {"type": "error", "error": {"type": "overloaded_error", "message": SECRET}},
    {"type": "error", "error": {"type": SECRET, "message": SECRET}},
    {"type": "AI", "text": SECRET, "toolExecutionRequests": SECRET},
    {"type": "TOOL_EXECUTION_RESULT", "id": "c1", "toolName": "t", "text": "x", "isError": SECRET},
]


@pytest.mark.parametrize("chunk", MALFORMED_CHUNKS, ids=range(len(MALFORMED_CHUNKS)))
def test_rejected_chunk_errors_carry_no_chunk_text(chunk: Any) -> None:
    assembler = StreamAssembler()
    _assert_clean(_rejected(lambda: assembler.feed(chunk)))


@pytest.mark.parametrize("arguments", [f'{{"path": "{SECRET}', f'["{SECRET}"]', f'"{SECRET}"'])
def test_incomplete_tool_call_errors_carry_no_arguments(arguments: str) -> None:
    assembler = StreamAssembler()
    assembler.on_tool_call_delta(0, id="call_1", name="write_file", arguments=arguments)
    error = _rejected(lambda: assembler.on_tool_executed("call_1", "done"))
    _assert_clean(error)
    assert "call_1" in str(error)  # the call is still named


@pytest.mark.parametrize(
    "call", [lambda a: a.on_tool_call_delta(SECRET, id="c"), lambda a: a.on_text([SECRET])]
)
def test_wrong_argument_types_are_named_not_echoed(call: Any) -> None:
    assembler = StreamAssembler()
    _assert_clean(_rejected(lambda: call(assembler)))


def test_an_unknown_protocol_name_is_named() -> None:
    """A ``type`` that looks like a protocol name (an identifier) is shown; it helps debugging
    and is not chat text. Anything else is described by its length."""
    error = _rejected(lambda: StreamAssembler().feed({"type": "tool_result_v9", "text": SECRET}))
    assert "'tool_result_v9'" in str(error)
    _assert_clean(error)
