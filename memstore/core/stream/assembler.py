"""The stream assembler: one turn's text deltas, tool call fragments, reasoning parts and tool
results, taken by method or as provider chunks, turned into the messages to flush (see
:mod:`memstore.core.stream` for the rules)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from memstore.core.inputs import check_messages
from memstore.core.stream.anthropic_chunks import ANTHROPIC_TYPES, anthropic_ops
from memstore.core.stream.chunks import (
    Op,
    describe_chunk,
    describe_kind,
    get,
    got,
    is_record,
    malformed,
)
from memstore.core.stream.langchain4j_chunks import LANGCHAIN4J_TYPES, langchain4j_ops
from memstore.core.stream.openai_chunks import RESPONSES_PREFIX, chat_completions_ops, responses_ops
from memstore.core.stream.state import Call, ModelCall, State, ai_message
from memstore.core.stream.text import check_fragment, check_result, fit_tool_result, join_parts
from memstore.errors import InvalidMessageError, StreamProtocolError
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest, ToolResult


class StreamAssembler:
    """Accumulates one turn's stream and hands out the batches to flush. Not thread-safe.

    ``max_text_bytes`` is the store's limit for one text field (``None``: no size limit; NUL
    characters and lone surrogates are refused either way).
    """

    def __init__(self, max_text_bytes: int | None = None) -> None:
        self._s = State()
        self._limit = sys.maxsize if max_text_bytes is None else max_text_bytes
        self._undo: list[Callable[[], None]] | None = None
        """While a multi-operation chunk is applied: how to take back each change."""

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
    def flushed_messages(self) -> list[Message]:
        """The messages of the turn the writer reported durable (``turn_messages`` minus
        ``ready``), in order (a copy)."""
        return self._s.turn[: len(self._s.turn) - len(self._s.ready)]

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

    # -- the undo log of a multi-operation chunk -----------------------------------------------

    def _log(self, undo: Callable[[], None]) -> None:
        if self._undo is not None:
            self._undo.append(undo)

    def _set_slot(self, mapping: dict[Any, Any], key: Any, value: Any) -> None:
        missing = key not in mapping
        previous = mapping.get(key)
        mapping[key] = value
        if missing:
            self._log(lambda: mapping.pop(key))
        else:
            self._log(lambda: mapping.__setitem__(key, previous))

    def _append(self, items: list[Any], value: Any) -> None:
        items.append(value)
        self._log(items.pop)

    def _extend(self, items: list[Any], values: Sequence[Any]) -> None:
        items.extend(values)
        count = len(values)
        self._log(lambda: items.__delitem__(slice(len(items) - count, None)))

    def _set_attr(self, obj: object, name: str, value: Any) -> None:
        previous = getattr(obj, name)
        setattr(obj, name, value)
        self._log(lambda: setattr(obj, name, previous))

    # -- limits --------------------------------------------------------------------------------

    def _check_storable(self, messages: Sequence[Message]) -> None:
        """What the store's write would refuse, refused now (same checks, same errors)."""
        check_messages(messages, self._limit)

    def _check_reasoning(self, part: Reasoning) -> None:
        self._check_storable([AiMessage(text="", reasoning=[part])])

    # -- the method protocol -------------------------------------------------------------------

    def _open(self) -> ModelCall:
        if self._s.closed:
            raise StreamProtocolError("the turn is closed; start a new collector")
        return self._s.current

    def _streaming(self, what: str) -> ModelCall:
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
        check_fragment("a text delta", delta)
        if delta:
            self._append(current.text_parts, delta)

    def on_tool_call_delta(
        self,
        index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
    ) -> None:
        """One fragment of a streamed tool call. A new id at a used index starts a new call."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise StreamProtocolError(f"a tool call index must be an int >= 0, got {got(index)}")
        if id is not None and (not isinstance(id, str) or not id):
            raise StreamProtocolError(f"a tool call id must be a non-empty str, got {got(id)}")
        for label, value in (("name", name), ("arguments", arguments)):
            if value is not None and not isinstance(value, str):
                raise StreamProtocolError(
                    f"tool call {label} at index {index} must be a str, got {type(value).__name__}"
                )
        current = self._streaming(f"a fragment of tool call {id or index!r}")
        for label, value in (("id", id), ("name", name), ("arguments", arguments)):
            check_fragment(f"the {label} of the tool call at index {index}", value)
        call = current.slots.get(index)
        starts_new = call is None or (id is not None and call.id is not None and call.id != id)
        if id is not None and (starts_new or (call is not None and call.id is None)):
            other = current.by_id.get(id)
            if other is not None:
                raise StreamProtocolError(
                    f"tool call id {id!r} at index {index} is already used by the call at "
                    f"index {other.index} of this model call"
                )
        # -- no failure past this line --
        if starts_new or call is None:
            call = Call(index=index, id=id)
            self._append(current.calls, call)
            self._set_slot(current.slots, index, call)
            if index >= current.next_index:
                self._set_attr(current, "next_index", index + 1)
            if id is not None:
                self._set_slot(current.by_id, id, call)
        elif id is not None and call.id is None:
            self._set_attr(call, "id", id)
            self._set_slot(current.by_id, id, call)
        if name:
            self._append(call.name_parts, name)
        if arguments:
            self._append(call.argument_parts, arguments)

    def tool_calls(self) -> list[ToolRequest]:
        """The assembled requests of the current model call, arguments parsed strictly.

        Raises :class:`~memstore.errors.IncompleteToolCallError` for the first call whose id or
        name is missing or whose arguments are not a complete JSON object, and
        :class:`~memstore.errors.InvalidMessageError` /
        :class:`~memstore.errors.MessageTooLargeError` when the model call's AI message could
        not be stored (so the app learns it before it runs any tool).
        """
        current = self._open()
        if current.requests is not None:
            return list(current.requests)
        requests = [call.request() for call in current.calls]
        message = ai_message(current, requests)
        if message is not None:
            self._check_storable([message])
        return requests

    def on_reasoning(self, part: Reasoning) -> None:
        """A whole reasoning part of the current model call (a thinking block, a Responses
        reasoning item, a thought signature), for apps that assemble reasoning themselves.
        It joins the model call's AI message where it arrives (after text or a call, it is
        placed before the next call); the provider needs it back byte for byte with the calls
        it led to. A part the store would refuse
        raises :class:`~memstore.errors.InvalidMessageError` /
        :class:`~memstore.errors.MessageTooLargeError` and changes nothing."""
        if not isinstance(part, Reasoning):
            raise StreamProtocolError(f"a reasoning part must be a Reasoning, got {got(part)}")
        if part.before_call is not None:
            raise StreamProtocolError(
                "a streamed reasoning part takes its place from when it arrives; pass it "
                "without before_call"
            )
        current = self._streaming("reasoning")
        self._check_reasoning(part)
        self._append(current.thoughts, current.thought(part.provider, part.kind, part))

    def on_tool_executed(
        self, id: str, result: str, is_error: bool = False, *, truncate: bool = False
    ) -> bool:
        """Record a tool's result. Always a flush point: the result becomes :attr:`ready`
        (with the model call's AI message, when it is the call's first result), so a tool that
        ran is durable as soon as the writer flushes, whatever happens next.

        The first result of a model call seals its requests, so every call of it must be
        complete (else :class:`~memstore.errors.IncompleteToolCallError`). Once every request
        has its result, the next text or fragment starts a new model call.

        A result the store would refuse (a NUL character, a lone surrogate, more than
        ``max_text_bytes`` UTF-8 bytes) raises :class:`~memstore.errors.InvalidMessageError`
        or :class:`~memstore.errors.MessageTooLargeError` and changes nothing: the call can be
        reported again. With ``truncate=True`` such a result is stored as
        :func:`fit_tool_result` makes it (marked; never a silent change).
        """
        if not isinstance(id, str) or not id:
            raise StreamProtocolError(f"a tool call id must be a non-empty str, got {got(id)}")
        if not isinstance(result, str):
            raise StreamProtocolError(
                f"the result of tool call {id!r} must be a str, got {type(result).__name__}"
            )
        if not isinstance(is_error, bool):
            raise StreamProtocolError(f"is_error must be a bool, got {got(is_error)}")
        if not isinstance(truncate, bool):
            raise StreamProtocolError(f"truncate must be a bool, got {got(truncate)}")
        current = self._open()
        if id in self._s.answered:
            raise StreamProtocolError(f"the result of tool call {id!r} was already reported")
        call = current.by_id.get(id)
        if call is None:
            raise StreamProtocolError(
                f"tool call {id!r} was never requested in the current model call"
            )
        sealing = current.requests is None
        requests = current.requests
        if requests is None:
            own = call.request()  # the executed call first: its error names it
            requests = [own if c is call else c.request() for c in current.calls]
        if truncate:
            result = fit_tool_result(result, self._limit)
        check_result(id, result, self._limit)
        tool_result = ToolResult(
            id=id, tool_name=join_parts(call.name_parts), text=result, is_error=is_error
        )
        batch: list[Message] = []
        if sealing:
            message = ai_message(current, requests)
            if message is not None:
                batch.append(message)
        batch.append(tool_result)
        self._check_storable(batch)
        # -- no failure past this line: commit the change --
        if sealing:
            self._set_attr(current, "requests", requests)
        self._append(current.results, tool_result)
        self._s.answered.add(id)
        self._log(lambda: self._s.answered.discard(id))
        self._extend(self._s.ready, batch)
        self._extend(self._s.turn, batch)
        if not current.awaiting():
            self._set_attr(self._s, "current", ModelCall())
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
        last model call is incomplete, and :class:`~memstore.errors.InvalidMessageError` /
        :class:`~memstore.errors.MessageTooLargeError` (state unchanged) when the last AI
        message could not be stored.
        """
        current = self._open()
        requests = current.requests
        if requests is None:
            requests = [call.request() for call in current.calls]
            message = ai_message(current, requests)
            if message is not None:
                self._check_storable([message])
        self._close_current(requests, current)
        return self.ready

    def fail_turn(self) -> list[Message]:
        """Close the turn after a failure; return everything still to flush. Never raises.

        Completed model calls stay as they are. Of the current model call, its text is kept;
        its requests only if they were sealed (a tool may have run), with the results reported
        so far; unsealed fragments are dropped. Nothing is invented. Text the store would
        refuse (over the limit) is dropped too, so it cannot take the tools that ran with it;
        the failure that ends the turn says why.
        """
        if self._s.closed:
            return self.ready
        current = self._s.current
        if current.requests is None:
            message = ai_message(current, [], reasoning=False)
            try:
                if message is not None:
                    self._check_storable([message])
            except InvalidMessageError:
                current = ModelCall()
        self._close_current(current.requests or [], current, reasoning=False)
        return self.ready

    def _close_current(
        self, requests: Sequence[ToolRequest], current: ModelCall, *, reasoning: bool = True
    ) -> None:
        batch: list[Message] = []
        if current.requests is None:  # sealed model calls were handed out result by result
            message = ai_message(current, requests, reasoning=reasoning)
            if message is not None:
                batch.append(message)
        self._s.ready.extend(batch)
        self._s.turn.extend(batch)
        self._s.current = ModelCall()
        self._s.closed = True

    # -- chunk protocols -----------------------------------------------------------------------

    def feed(self, chunk: object) -> bool:
        """Take one stream chunk: LangChain4j-style JSON (str or dict), an OpenAI Chat
        Completions chunk, an OpenAI Responses event or an Anthropic Messages event (each a
        dict or an SDK object). Returns ``True`` at a flush point.

        Reasoning is kept with the model call it came with: Anthropic ``thinking`` /
        ``redacted_thinking`` blocks (text and signature deltas, complete at the block's stop;
        a thinking block without a signature is not kept, since it could not be sent back),
        Chat Completions ``reasoning_content`` deltas, and Responses ``reasoning`` items as
        ``response.output_item.done`` sends them (with the ``function_call`` item ids). A
        stream cut inside a reasoning part leaves nothing of that part.

        An unknown or malformed chunk (a missing field, a field of the wrong type anywhere)
        raises
        :class:`~memstore.errors.StreamProtocolError` naming it; the state is unchanged.
        """
        self._open()
        if isinstance(chunk, (str, bytes, bytearray)):
            try:
                chunk = json.loads(chunk)
            except (ValueError, RecursionError) as error:
                raise StreamProtocolError(
                    f"chunk is not valid JSON ({type(error).__name__}): {describe_chunk(chunk)}"
                ) from None
            if not isinstance(chunk, dict):
                raise StreamProtocolError(f"chunk is not a JSON object: {describe_chunk(chunk)}")
        if chunk is None:
            raise StreamProtocolError("chunk is None")
        if not is_record(chunk):
            raise StreamProtocolError(f"chunk is not an object: {describe_chunk(chunk)}")
        kind = get(chunk, "type")
        if kind is not None and not isinstance(kind, str):
            raise malformed(chunk, f"type must be a string, got {type(kind).__name__}")
        if kind is None and get(chunk, "choices") is not None:
            ops = chat_completions_ops(chunk, self._s.current)
        elif kind in LANGCHAIN4J_TYPES:
            ops = langchain4j_ops(chunk, kind, self._s)
        elif kind in ANTHROPIC_TYPES:
            ops = anthropic_ops(chunk, kind, self._s.current)
        elif kind is not None and kind.startswith(RESPONSES_PREFIX):
            ops = responses_ops(chunk, kind, self._s.current)
        else:
            raise StreamProtocolError(
                f"unknown chunk (type {describe_kind(kind)}): {describe_chunk(chunk)}"
            )
        if len(ops) <= 1:
            return any([self._apply(op) for op in ops])
        # all or nothing, at the chunk's cost: each change logs its undo step
        self._undo = []
        try:
            return any([self._apply(op) for op in ops])
        except BaseException:
            for undo in reversed(self._undo):
                undo()
            raise
        finally:
            self._undo = None

    def _apply(self, op: Op) -> bool:
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
            self._set_slot(self._s.current.anthropic_blocks, op[1], op[2])
            return False
        if name == "block_default":  # anthropic, responses: (index, default arguments)
            self._set_attr(self._s.current.slots[op[1]], "default_arguments", op[2])
            return False
        if name == "item_id":  # responses: (call id, function_call item id)
            current = self._streaming("a function_call item")
            check_fragment("a function_call item id", op[2])
            self._set_slot(current.item_ids, op[1], op[2])
            return False
        self._apply_thought(op)
        return False

    def _apply_thought(self, op: Op) -> None:
        """The reasoning operations of a chunk; ``op[1]`` keys the part being streamed."""
        name, key = op[0], op[1]
        current = self._streaming("reasoning")
        if name == "thought_open":  # (key, provider, kind)
            thought = current.thought(op[2], op[3])
            self._append(current.thoughts, thought)
            self._set_slot(current.thought_slots, key, thought)
            return
        thought = current.thought_slots[key]
        if name == "thought_done":  # (key, the whole part as the provider sent it, or None)
            if op[2] is not None:
                self._check_reasoning(op[2])
                self._set_attr(thought, "whole", op[2])
            self._set_attr(thought, "done", True)
            return
        check_fragment("a reasoning delta", op[2])
        if name == "thought_text":  # (key, delta)
            self._append(thought.text_parts, op[2])
        elif name == "thought_signature":  # (key, delta)
            self._append(thought.signature_parts, op[2])
        else:
            raise AssertionError(name)  # pragma: no cover
