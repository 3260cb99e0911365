"""Stream assembly for one agent turn, as pure code (no I/O).

:class:`StreamAssembler` takes the pieces a streaming model and a tool-running service produce
(text deltas, tool-call fragments, tool results) and turns them into canonical messages, in
batches that a writer flushes at well-defined points:

* **Assembly.** Fragments are accumulated per call index; a fragment carrying a new id at an
  index already in use starts a new call (it never glues onto the old one). Names and
  arguments are concatenated verbatim; :meth:`StreamAssembler.tool_calls` parses each call's
  arguments strictly as a JSON object and raises :class:`~memstore.errors.IncompleteToolCallError`
  naming the index and id otherwise. Nothing is repaired.
* **Message boundaries.** One *model call* is the text and tool requests of one model response.
  Its text becomes the text of its :class:`~memstore.messages.AiMessage`. The first tool result
  seals the model call's requests and makes the AI message and that result *ready*; every
  further result is ready on its own (each is a flush point, so a tool that ran is durable
  before anything else happens). Once every request has a result, the next text or fragment
  starts a new model call. The final text becomes the last AI message
  (:meth:`StreamAssembler.end_turn`).
* **Atomic calls.** Every public call either succeeds or raises a
  :class:`~memstore.errors.StreamProtocolError` (or subclass) leaving the state unchanged.

>>> a = StreamAssembler()
>>> a.on_text("Let me look.")
>>> a.on_tool_call_delta(0, id="call_1", name="read", arguments='{"pa')
>>> a.on_tool_call_delta(0, arguments='th": "a.txt"}')
>>> [r.arguments for r in a.tool_calls()]
['{"path": "a.txt"}']
>>> a.on_tool_executed("call_1", "hello")  # a tool ran: a flush point
True
>>> [m.type for m in a.ready]
['ai', 'tool_result']
>>> a.mark_flushed(len(a.ready))
>>> a.on_text("It says hello.")
>>> [m.text for m in a.end_turn()]
['It says hello.']
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.core.display import DisplayDraft, ToolFormatter, tool_summary
from memstore.errors import IncompleteToolCallError, StreamProtocolError
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult

LANGCHAIN4J_TYPES = frozenset({"ai_response", "tool_request", "tool_executed"})
ANTHROPIC_TYPES = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    }
)
_ANTHROPIC_IGNORED_DELTAS = frozenset({"thinking_delta", "signature_delta", "citations_delta"})
_CHUNK_REPR_CHARS = 200
FAILED_MARK = "[failed]"


def _join(parts: Sequence[str]) -> str:
    """Concatenate verbatim; UTF-16 surrogate halves split across deltas are re-paired."""
    text = "".join(parts)
    if any("\ud800" <= char <= "\udfff" for char in text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def _has_lone_surrogate(text: str) -> bool:
    return any("\ud800" <= char <= "\udfff" for char in text)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _describe_chunk(chunk: object) -> str:
    text = repr(chunk)
    return text if len(text) <= _CHUNK_REPR_CHARS else text[: _CHUNK_REPR_CHARS - 1] + "…"


def _get(obj: object, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` for SDK objects; ``None`` when absent."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


@dataclass(slots=True)
class _Call:
    index: int
    id: str | None
    name_parts: list[str] = field(default_factory=list)
    argument_parts: list[str] = field(default_factory=list)
    default_arguments: str | None = None
    """Anthropic: the block's ``input`` as JSON, used when no ``input_json_delta`` arrived."""

    def arguments(self) -> str:
        if not self.argument_parts and self.default_arguments is not None:
            return self.default_arguments
        return _join(self.argument_parts)

    def request(self) -> ToolRequest:
        """The assembled request, or ``IncompleteToolCallError`` naming index and id."""
        where = f"tool call at index {self.index} (id {self.id!r})"
        if self.id is None:
            raise IncompleteToolCallError(
                f"{where} has no id yet", index=self.index, call_id=self.id
            )
        name = _join(self.name_parts)
        if not name:
            raise IncompleteToolCallError(
                f"{where} has no name yet", index=self.index, call_id=self.id
            )
        arguments = self.arguments()
        if _has_lone_surrogate(arguments):
            raise IncompleteToolCallError(
                f"arguments of {where} end inside a split character",
                index=self.index,
                call_id=self.id,
            )
        try:
            value = json.loads(arguments, parse_constant=_reject_constant)
        except ValueError as error:
            raise IncompleteToolCallError(
                f"arguments of {where} are incomplete or not valid JSON ({error}): "
                f"{arguments[:80]!r}",
                index=self.index,
                call_id=self.id,
            ) from error
        if not isinstance(value, dict):
            raise IncompleteToolCallError(
                f"arguments of {where} are JSON but not an object: {arguments[:80]!r}",
                index=self.index,
                call_id=self.id,
            )
        return ToolRequest(id=self.id, name=name, arguments=arguments)


@dataclass(slots=True)
class _ModelCall:
    text_parts: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    slots: dict[int, _Call] = field(default_factory=dict)
    requests: list[ToolRequest] | None = None
    """Set when the first result arrives: the requests are sealed."""
    results: list[ToolResult] = field(default_factory=list)
    anthropic_blocks: dict[int, str] = field(default_factory=dict)

    def text(self) -> str:
        return _join(self.text_parts)

    def pending(self) -> list[str]:
        answered = {result.id for result in self.results}
        return [r.id for r in self.requests or [] if r.id not in answered]

    def call_with_id(self, call_id: str) -> _Call | None:
        for call in self.calls:
            if call.id == call_id:
                return call
        return None


@dataclass(slots=True)
class _State:
    current: _ModelCall = field(default_factory=_ModelCall)
    ready: list[Message] = field(default_factory=list)
    turn: list[Message] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    closed: bool = False


def _ai(text: str, requests: Sequence[ToolRequest]) -> AiMessage | None:
    """The AI message of a model call; ``None`` when it has no requests and only blank text."""
    if requests:
        return AiMessage(text=text or None, tool_requests=list(requests))
    if text.strip():
        return AiMessage(text=text)
    return None


class StreamAssembler:
    """Accumulates one turn's stream and hands out the batches to flush. Not thread-safe."""

    def __init__(self) -> None:
        self._s = _State()

    # -- inspection ----------------------------------------------------------------------------

    @property
    def ready(self) -> list[Message]:
        """Messages complete and not yet flushed, in order (a copy)."""
        return list(self._s.ready)

    @property
    def turn_messages(self) -> list[Message]:
        """Every message of the turn made so far (flushed or ready), in order (a copy)."""
        return list(self._s.turn)

    @property
    def closed(self) -> bool:
        return self._s.closed

    def text(self) -> str:
        """The text streamed so far in the current model call."""
        return self._s.current.text()

    def unanswered_call_ids(self) -> list[str]:
        """Call ids requested in the turn's messages that have no result among them."""
        answered = {m.id for m in self._s.turn if isinstance(m, ToolResult)}
        return [
            call.id
            for m in self._s.turn
            if isinstance(m, AiMessage)
            for call in m.tool_requests
            if call.id not in answered
        ]

    # -- the method protocol -------------------------------------------------------------------

    def _open(self) -> _ModelCall:
        if self._s.closed:
            raise StreamProtocolError("the turn is closed; start a new collector")
        return self._s.current

    def _streaming(self, what: str) -> _ModelCall:
        current = self._open()
        if current.requests is not None:
            raise StreamProtocolError(
                f"{what} arrived while tool call(s) {current.pending()} still await their "
                "results; report every result of a model call before the next model call"
            )
        return current

    def on_text(self, delta: str) -> None:
        """A streamed text delta of the current model call (concatenated verbatim)."""
        if not isinstance(delta, str):
            raise StreamProtocolError(f"a text delta must be a str, got {type(delta).__name__}")
        current = self._streaming("text")
        if delta:
            current.text_parts.append(delta)

    def on_tool_call_delta(
        self,
        index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
    ) -> None:
        """One fragment of a streamed tool call. A new id at a used index starts a new call."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise StreamProtocolError(f"a tool call index must be an int >= 0, got {index!r}")
        if id is not None and (not isinstance(id, str) or not id):
            raise StreamProtocolError(f"a tool call id must be a non-empty str, got {id!r}")
        for label, value in (("name", name), ("arguments", arguments)):
            if value is not None and not isinstance(value, str):
                raise StreamProtocolError(
                    f"tool call {label} at index {index} must be a str, got {type(value).__name__}"
                )
        current = self._streaming(f"a fragment of tool call {id or index!r}")
        call = current.slots.get(index)
        starts_new = call is None or (id is not None and call.id is not None and call.id != id)
        if id is not None and (starts_new or (call is not None and call.id is None)):
            other = current.call_with_id(id)
            if other is not None:
                raise StreamProtocolError(
                    f"tool call id {id!r} at index {index} is already used by the call at "
                    f"index {other.index} of this model call"
                )
        if starts_new or call is None:
            call = _Call(index=index, id=id)
            current.calls.append(call)
            current.slots[index] = call
        elif id is not None:
            call.id = id
        if name:
            call.name_parts.append(name)
        if arguments:
            call.argument_parts.append(arguments)

    def tool_calls(self) -> list[ToolRequest]:
        """The assembled requests of the current model call, arguments parsed strictly.

        Raises :class:`~memstore.errors.IncompleteToolCallError` for the first call whose id or
        name is missing or whose arguments are not a complete JSON object.
        """
        current = self._open()
        if current.requests is not None:
            return list(current.requests)
        return [call.request() for call in current.calls]

    def on_tool_executed(self, id: str, result: str, is_error: bool = False) -> bool:
        """Record a tool's result. Always a flush point: the result becomes :attr:`ready`
        (with the model call's AI message, when it is the call's first result), so a tool that
        ran is durable as soon as the writer flushes, whatever happens next.

        The first result of a model call seals its requests, so every call of it must be
        complete (else :class:`~memstore.errors.IncompleteToolCallError`). Once every request
        has its result, the next text or fragment starts a new model call.
        """
        if not isinstance(id, str) or not id:
            raise StreamProtocolError(f"a tool call id must be a non-empty str, got {id!r}")
        if not isinstance(result, str):
            raise StreamProtocolError(
                f"the result of tool call {id!r} must be a str, got {type(result).__name__}"
            )
        if not isinstance(is_error, bool):
            raise StreamProtocolError(f"is_error must be a bool, got {is_error!r}")
        current = self._open()
        if id in self._s.answered:
            raise StreamProtocolError(f"the result of tool call {id!r} was already reported")
        call = current.call_with_id(id)
        if call is None:
            raise StreamProtocolError(
                f"tool call {id!r} was never requested in the current model call"
            )
        sealing = current.requests is None
        requests = current.requests
        if requests is None:
            own = call.request()  # the executed call first: its error names it
            requests = [own if c is call else c.request() for c in current.calls]
        name = next(r.name for r in requests if r.id == id)
        tool_result = ToolResult(id=id, tool_name=name, text=result, is_error=is_error)
        # -- no failure past this line: commit the change --
        current.requests = requests
        current.results.append(tool_result)
        self._s.answered.add(id)
        batch: list[Message] = []
        if sealing:
            message = _ai(current.text(), requests)
            if message is not None:
                batch.append(message)
        batch.append(tool_result)
        self._s.ready.extend(batch)
        self._s.turn.extend(batch)
        if not current.pending():
            self._s.current = _ModelCall()
        return True

    # -- flushing and the end of the turn ------------------------------------------------------

    def mark_flushed(self, count: int) -> None:
        """The writer durably wrote the first ``count`` ready messages."""
        if not 0 <= count <= len(self._s.ready):
            raise StreamProtocolError(f"cannot mark {count} of {len(self._s.ready)} as flushed")
        del self._s.ready[:count]

    def end_turn(self) -> list[Message]:
        """Close the turn normally; return everything still to flush (ready + final text).

        Requests the service never executed are kept (their arguments must be complete): the
        loader answers them with an interrupted-call result. Raises
        :class:`~memstore.errors.IncompleteToolCallError` (state unchanged) when a call of the
        last model call is incomplete.
        """
        current = self._open()
        requests = current.requests
        if requests is None:
            requests = [call.request() for call in current.calls]
        self._close_current(requests, current)
        return self.ready

    def fail_turn(self) -> list[Message]:
        """Close the turn after a failure; return everything still to flush. Never raises.

        Completed model calls stay as they are. Of the current model call, its text is kept;
        its requests only if they were sealed (a tool may have run), with the results reported
        so far; unsealed fragments are dropped. Nothing is invented.
        """
        if self._s.closed:
            return self.ready
        current = self._s.current
        self._close_current(current.requests or [], current)
        return self.ready

    def _close_current(self, requests: Sequence[ToolRequest], current: _ModelCall) -> None:
        batch: list[Message] = []
        if current.requests is None:  # sealed model calls were handed out result by result
            message = _ai(current.text(), requests)
            if message is not None:
                batch.append(message)
        self._s.ready.extend(batch)
        self._s.turn.extend(batch)
        self._s.current = _ModelCall()
        self._s.closed = True

    # -- chunk protocols -----------------------------------------------------------------------

    def feed(self, chunk: object) -> bool:
        """Take one stream chunk: LangChain4j-style JSON (str or dict), an OpenAI Chat
        Completions chunk (dict or SDK object) or an Anthropic Messages event (dict or SDK
        object). Returns ``True`` at a flush point. An unknown or malformed chunk raises
        :class:`~memstore.errors.StreamProtocolError` naming it; the state is unchanged.
        """
        self._open()
        if isinstance(chunk, (str, bytes, bytearray)):
            try:
                chunk = json.loads(chunk)
            except ValueError as error:
                raise StreamProtocolError(
                    f"chunk is not valid JSON ({error}): {_describe_chunk(chunk)}"
                ) from error
            if not isinstance(chunk, dict):
                raise StreamProtocolError(f"chunk is not a JSON object: {_describe_chunk(chunk)}")
        if chunk is None:
            raise StreamProtocolError("chunk is None")
        kind = _get(chunk, "type")
        if kind is None and _get(chunk, "choices") is not None:
            ops = self._openai_ops(chunk)
        elif kind in LANGCHAIN4J_TYPES:
            ops = self._langchain4j_ops(chunk, kind)
        elif kind in ANTHROPIC_TYPES:
            ops = self._anthropic_ops(chunk, kind)
        else:
            raise StreamProtocolError(f"unknown chunk (type {kind!r}): {_describe_chunk(chunk)}")
        if len(ops) <= 1:
            return any([self._apply(op) for op in ops])
        saved = copy.deepcopy(self._s)
        try:
            return any([self._apply(op) for op in ops])
        except BaseException:
            self._s = saved
            raise

    def _apply(self, op: tuple[Any, ...]) -> bool:
        name = op[0]
        if name == "text":
            self.on_text(op[1])
            return False
        if name == "delta":
            self.on_tool_call_delta(op[1], id=op[2], name=op[3], arguments=op[4])
            return False
        if name == "executed":
            return self.on_tool_executed(op[1], op[2], is_error=op[3])
        if name == "block":  # anthropic content_block_start: (block index, type)
            self._s.current.anthropic_blocks[op[1]] = op[2]
            return False
        if name == "block_default":  # anthropic: (index, default arguments)
            call = self._s.current.slots[op[1]]
            call.default_arguments = op[2]
            return False
        raise AssertionError(name)  # pragma: no cover

    @staticmethod
    def _malformed(chunk: object, why: str) -> StreamProtocolError:
        return StreamProtocolError(f"malformed chunk ({why}): {_describe_chunk(chunk)}")

    def _str_field(self, chunk: object, obj: object, key: str, *, required: bool) -> str | None:
        value = _get(obj, key)
        if value is None and not required:
            return None
        if not isinstance(value, str):
            raise self._malformed(chunk, f"{key} must be a string, got {type(value).__name__}")
        return value

    def _openai_ops(self, chunk: object) -> list[tuple[Any, ...]]:
        choices = _get(chunk, "choices")
        if not isinstance(choices, Sequence) or isinstance(choices, str):
            raise self._malformed(chunk, "choices is not a list")
        ops: list[tuple[Any, ...]] = []
        for choice in choices:
            if (_get(choice, "index") or 0) != 0:
                continue  # n > 1: only the first choice is the reply
            delta = _get(choice, "delta")
            if delta is None:
                continue
            content = self._str_field(chunk, delta, "content", required=False)
            if content:
                ops.append(("text", content))
            tool_calls = _get(delta, "tool_calls")
            if tool_calls is None:
                continue
            if not isinstance(tool_calls, Sequence) or isinstance(tool_calls, str):
                raise self._malformed(chunk, "delta.tool_calls is not a list")
            for call in tool_calls:
                index = _get(call, "index")
                if isinstance(index, bool) or not isinstance(index, int):
                    raise self._malformed(chunk, "a tool call delta has no int index")
                function = _get(call, "function")
                ops.append(
                    (
                        "delta",
                        index,
                        self._str_field(chunk, call, "id", required=False) or None,
                        None
                        if function is None
                        else self._str_field(chunk, function, "name", required=False),
                        None
                        if function is None
                        else self._str_field(chunk, function, "arguments", required=False),
                    )
                )
        return ops

    def _langchain4j_ops(self, chunk: object, kind: str) -> list[tuple[Any, ...]]:
        if kind == "ai_response":
            data = self._str_field(chunk, chunk, "data", required=True)
            return [("text", data)]
        call_id = self._str_field(chunk, chunk, "id", required=True)
        name = self._str_field(chunk, chunk, "name", required=False)
        arguments = self._str_field(chunk, chunk, "arguments", required=False)
        current = self._s.current
        existing = current.call_with_id(call_id) if call_id else None
        if kind == "tool_request":
            if existing is not None:
                known = _join(existing.name_parts)
                if name and known and name != known:
                    raise self._malformed(chunk, f"call {call_id!r} was named {known!r} before")
                return [
                    ("delta", existing.index, call_id, None if known else name, arguments or None)
                ]
            index = _get(chunk, "index")
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                index = max(current.slots, default=-1) + 1
            return [("delta", index, call_id, name, arguments)]
        # tool_executed
        result = self._str_field(chunk, chunk, "result", required=True)
        is_error = _get(chunk, "is_error")
        is_error = bool(is_error) if isinstance(is_error, bool) else False
        ops: list[tuple[Any, ...]] = []
        if (
            existing is None
            and call_id not in self._s.answered
            and name
            and arguments is not None
            and current.requests is None
        ):
            # the app did not stream the request: the executed chunk carries it whole
            ops.append(("delta", max(current.slots, default=-1) + 1, call_id, name, arguments))
        ops.append(("executed", call_id, result, is_error))
        return ops

    def _anthropic_ops(self, chunk: object, kind: str) -> list[tuple[Any, ...]]:
        if kind in ("message_start", "message_delta", "message_stop", "ping"):
            return []
        if kind == "error":
            error = _get(chunk, "error")
            raise StreamProtocolError(
                f"the provider reported an error: {_describe_chunk(_get(error, 'message'))}"
            )
        index = _get(chunk, "index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise self._malformed(chunk, "index must be an int >= 0")
        blocks = self._s.current.anthropic_blocks
        if kind == "content_block_start":
            block = _get(chunk, "content_block")
            block_type = _get(block, "type")
            if block_type == "text":
                text = self._str_field(chunk, block, "text", required=False)
                return [("block", index, "text")] + ([("text", text)] if text else [])
            if block_type == "tool_use":
                call_id = self._str_field(chunk, block, "id", required=True)
                name = self._str_field(chunk, block, "name", required=True)
                return [("block", index, "tool_use"), ("delta", index, call_id, name, None)]
            if block_type in ("thinking", "redacted_thinking"):
                return [("block", index, str(block_type))]
            raise self._malformed(chunk, f"unknown content block type {block_type!r}")
        if kind == "content_block_delta":
            delta = _get(chunk, "delta")
            delta_type = _get(delta, "type")
            if delta_type == "text_delta":
                return [("text", self._str_field(chunk, delta, "text", required=True))]
            if delta_type == "input_json_delta":
                if blocks.get(index) != "tool_use":
                    raise self._malformed(chunk, f"input_json_delta for non-tool block {index}")
                partial = self._str_field(chunk, delta, "partial_json", required=True)
                return [("delta", index, None, None, partial)]
            if delta_type in _ANTHROPIC_IGNORED_DELTAS:
                return []
            raise self._malformed(chunk, f"unknown delta type {delta_type!r}")
        # content_block_stop: a tool_use block without input deltas has the input {}
        if blocks.get(index) == "tool_use":
            call = self._s.current.slots.get(index)
            if call is not None and not call.argument_parts and call.default_arguments is None:
                return [("block_default", index, "{}")]
        return []


def turn_display(
    messages: Sequence[Message],
    formatters: Mapping[str, ToolFormatter],
    failure: str | None = None,
) -> DisplayDraft | None:
    """The turn's one display row: reply text plus one summary line per tool call; with
    ``failure`` the row has status ``failed`` and ends with ``[failed] <reason>``.
    ``None`` when a turn that did not fail produced nothing to show."""
    results = {m.id: m for m in messages if isinstance(m, ToolResult)}
    lines: list[str] = []
    for message in messages:
        if isinstance(message, AiMessage):
            if message.text:
                lines.append(message.text)
            lines.extend(
                tool_summary(call, results.get(call.id), formatters)
                for call in message.tool_requests
            )
    if failure is not None:
        lines.append(f"{FAILED_MARK} {failure}")
        return DisplayDraft("ai", "\n".join(lines), status="failed")
    if not lines:
        return None
    return DisplayDraft("ai", "\n".join(lines))
