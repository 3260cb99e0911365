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
  A multi-operation chunk is applied with an undo log, so it too is all or nothing, at a cost
  proportional to the chunk (never to the turn).
* **Storable or rejected.** With ``max_text_bytes`` set (the collectors pass the store's
  ``MEMSTORE_MAX_TEXT_BYTES``), what the store would refuse is refused here, before any state
  changes: a NUL in a delta, a tool result with a NUL, a lone surrogate or over the limit
  (:class:`~memstore.errors.InvalidMessageError` /
  :class:`~memstore.errors.MessageTooLargeError`), an AI message over the limit. So a batch
  handed out as :attr:`~StreamAssembler.ready` is always writable, and a rejected result can
  be reported again, cleaned up (or with ``truncate=True``: :func:`fit_tool_result`).

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

import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.core.display import DisplayDraft, ToolFormatter, tool_summary
from memstore.core.inputs import check_messages
from memstore.core.reasoning import (
    ANTHROPIC,
    OPENAI,
    REASONING_CONTENT,
    REASONING_LOST_KEY,
    REDACTED_THINKING,
    RESPONSES_ITEM_IDS_KEY,
    RESPONSES_REASONING,
    THINKING,
    placed_before,
    responses_item_part,
)
from memstore.errors import (
    IncompleteToolCallError,
    InvalidMessageError,
    MessageTooLargeError,
    StreamProtocolError,
)
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest, ToolResult

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
_ANTHROPIC_IGNORED_DELTAS = frozenset({"citations_delta"})
_THINKING_DELTAS = {
    "thinking_delta": ("thinking", "thought_text"),
    "signature_delta": ("signature", "thought_signature"),
}
"""Anthropic thinking deltas: the field that carries the fragment, and the operation."""
_RESPONSES_ITEM_EVENTS = frozenset(
    {
        "response.output_item.added",
        "response.output_item.done",
        "response.function_call_arguments.delta",
    }
)
RESPONSES_PREFIX = "response."
"""OpenAI Responses stream events are the chunk types that start with this."""
_SHOWN_FIELDS = 12
_FIELD_NAME_CHARS = 40
FAILED_MARK = "[failed]"
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NOT_RECORDS = (str, bytes, bytearray, int, float, list, tuple, set, frozenset, type(None))


def _join(parts: Sequence[str]) -> str:
    """Concatenate verbatim; UTF-16 surrogate halves split across deltas are re-paired."""
    text = "".join(parts)
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def _has_lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _describe_chunk(chunk: object) -> str:
    """The chunk's shape (its type, its field names, its length), never its values: a chunk
    carries chat text, and errors never do."""
    if isinstance(chunk, (str, bytes, bytearray)):
        return f"a {type(chunk).__name__} of {len(chunk)} characters"
    if isinstance(chunk, Mapping):
        names = [key for key in chunk if _is_field_name(key)]
        shown = ", ".join(sorted(names)[:_SHOWN_FIELDS])
        more = len(chunk) - min(len(names), _SHOWN_FIELDS)
        tail = f" and {more} more" if more > 0 else ""
        return f"a {type(chunk).__name__} with fields [{shown}]{tail}"
    if isinstance(chunk, (list, tuple)):
        return f"a {type(chunk).__name__} of {len(chunk)} items"
    return f"a {type(chunk).__name__}"


def _got(value: object) -> str:
    """A wrong-typed argument for an error message: small scalars as they are, else the type."""
    if value is None or isinstance(value, (bool, int)):
        return repr(value)[:24]
    if isinstance(value, str):
        return "an empty str" if not value else f"a str of {len(value)} characters"
    return f"a {type(value).__name__}"


def _is_field_name(key: object) -> bool:
    return isinstance(key, str) and len(key) <= _FIELD_NAME_CHARS and key.isidentifier()


def _describe_kind(kind: object) -> str:
    """A chunk's ``type`` value when it looks like a protocol name, else only its length."""
    if _is_field_name(kind):
        return repr(kind)
    return f"<a {type(kind).__name__} of {len(kind)} characters>" if isinstance(kind, str) else "?"


def _get(obj: object, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` for SDK objects; ``None`` when absent."""
    if type(obj) is dict or isinstance(obj, Mapping):  # the common case first: no ABC check
        return obj.get(key)
    return getattr(obj, key, None)


def _is_record(obj: object) -> bool:
    """A JSON object or an SDK object: something with named fields, not a scalar or list."""
    return type(obj) is dict or isinstance(obj, Mapping) or not isinstance(obj, _NOT_RECORDS)


def _is_list(obj: object) -> bool:
    if type(obj) is list:
        return True
    return isinstance(obj, Sequence) and not isinstance(obj, (str, bytes, bytearray))


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def storable_text(text: str) -> str:
    """``text`` with every NUL character and lone surrogate (what databases refuse) replaced
    by U+FFFD; a storable text comes back unchanged."""
    return _UNSTORABLE.sub("\ufffd", text)


def fit_tool_result(text: str, limit: int) -> str:
    """``text`` made storable, with visible markers for every change (the ``truncate=True``
    of ``on_tool_executed``).

    NUL characters and lone surrogates (what a binary file read as text leaves) become U+FFFD
    and a line ``[memstore: N NUL or invalid characters replaced with U+FFFD]`` is added; a
    text still over ``limit`` UTF-8 bytes is cut at a character boundary and ends with
    ``[memstore: result truncated from N bytes]``. A text that is already storable comes back
    unchanged. Raises :class:`~memstore.errors.MessageTooLargeError` when ``limit`` cannot
    even hold the markers.

    >>> print(fit_tool_result("abc\\x00", 100))
    abc�
    [memstore: 1 NUL or invalid characters replaced with U+FFFD]
    >>> print(fit_tool_result("x" * 100, 60))
    xxxxxxxxxxxxxxxx
    [memstore: result truncated from 100 bytes]
    """
    cleaned, replaced = _UNSTORABLE.subn("\ufffd", text)
    markers: list[str] = []
    if replaced:
        markers.append(f"[memstore: {replaced} NUL or invalid characters replaced with U+FFFD]")
    data = cleaned.encode("utf-8")
    if len(data) + _utf8_size("".join("\n" + m for m in markers)) > limit:
        markers.append(f"[memstore: result truncated from {len(data)} bytes]")
        suffix = "".join("\n" + m for m in markers)
        room = limit - _utf8_size(suffix)
        if room < 0:
            raise MessageTooLargeError(
                f"a limit of {limit} bytes cannot hold the truncation marker",
                size=len(data),
                limit=limit,
            )
        cleaned = data[:room].decode("utf-8", "ignore")  # drops a character cut in half
    return cleaned + "".join("\n" + m for m in markers)


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
                f"arguments of {where} are incomplete or not valid JSON "
                f"({len(arguments)} characters, {type(error).__name__})",
                index=self.index,
                call_id=self.id,
            ) from error
        if not isinstance(value, dict):
            raise IncompleteToolCallError(
                f"arguments of {where} are JSON but not an object ({type(value).__name__})",
                index=self.index,
                call_id=self.id,
            )
        return ToolRequest(id=self.id, name=name, arguments=arguments)


@dataclass(slots=True)
class _Thought:
    """One reasoning part being streamed. Only a complete one joins its AI message, so a
    stream cut inside a thinking block or a reasoning item leaves nothing of it behind."""

    provider: str
    kind: str
    text_parts: list[str] = field(default_factory=list)
    signature_parts: list[str] = field(default_factory=list)
    done: bool = False
    """The provider closed the part (``reasoning_content`` has no end: it is always whole)."""
    whole: Reasoning | None = None
    """The part as the provider finally sent it (a Responses item, or :meth:`on_reasoning`)."""
    calls_before: int = 0
    """How many calls of the model call had started when the part started."""
    after_output: bool = False
    """Text or a call came before the part (then it is placed before the next call)."""

    def finish(self) -> Reasoning | None:
        """The part to store, or ``None`` while incomplete or when what arrived cannot be sent
        back (a thinking block without its signature)."""
        if self.whole is not None:
            return self.whole
        if not self.done and self.kind != REASONING_CONTENT:
            return None
        signature = _join(self.signature_parts) if self.signature_parts else None
        if self.kind in (THINKING, REDACTED_THINKING) and not signature:
            return None
        text = None if self.kind == REDACTED_THINKING else _join(self.text_parts)
        return Reasoning(provider=self.provider, kind=self.kind, text=text, signature=signature)


@dataclass(slots=True)
class _ModelCall:
    text_parts: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    slots: dict[int, _Call] = field(default_factory=dict)
    """The call each index currently continues."""
    by_id: dict[str, _Call] = field(default_factory=dict)
    next_index: int = 0
    """One past the highest index used (LangChain4j chunks without an index get it)."""
    requests: list[ToolRequest] | None = None
    """Set when the first result arrives: the requests are sealed."""
    results: list[ToolResult] = field(default_factory=list)
    anthropic_blocks: dict[int, str] = field(default_factory=dict)
    thoughts: list[_Thought] = field(default_factory=list)
    """Reasoning parts in the order they started."""
    thought_slots: dict[object, _Thought] = field(default_factory=dict)
    """The part each key (a block or output index, ``reasoning_content``) continues."""
    item_ids: dict[str, str] = field(default_factory=dict)
    """Responses: the ``function_call`` item id of each call id."""

    def text(self) -> str:
        return _join(self.text_parts)

    def reasoning(self, requests: Sequence[ToolRequest]) -> list[Reasoning]:
        """The complete reasoning parts, in order; a part that came after the reply's text or
        a call is placed right before the call that followed it."""
        parts: list[Reasoning] = []
        for thought in self.thoughts:
            part = thought.finish()
            if part is None:
                continue
            if thought.after_output and thought.calls_before < len(requests):
                part = placed_before([part], requests[thought.calls_before].id)[0]
            parts.append(part)
        return parts

    def thought(self, provider: str, kind: str, whole: Reasoning | None = None) -> _Thought:
        """A new reasoning part starting here."""
        return _Thought(
            provider,
            kind,
            done=whole is not None,
            whole=whole,
            calls_before=len(self.calls),
            after_output=bool(self.calls or self.text_parts),
        )

    def metadata(self) -> dict[str, Any]:
        """The AI message's metadata: the Responses item ids of its calls, and how many of
        its reasoning parts were cut off before they were complete (see
        :data:`~memstore.core.reasoning.REASONING_LOST_KEY`)."""
        metadata: dict[str, Any] = {}
        if self.item_ids:
            metadata[RESPONSES_ITEM_IDS_KEY] = dict(self.item_ids)
        lost = sum(1 for thought in self.thoughts if thought.finish() is None)
        if lost:
            metadata[REASONING_LOST_KEY] = lost
        return metadata

    def awaiting(self) -> bool:
        """Sealed, and some request has no result yet."""
        return self.requests is not None and len(self.results) < len(self.requests)

    def pending(self) -> list[str]:
        answered = {result.id for result in self.results}
        return [r.id for r in self.requests or [] if r.id not in answered]

    def call_with_id(self, call_id: str) -> _Call | None:
        return self.by_id.get(call_id)


@dataclass(slots=True)
class _State:
    current: _ModelCall = field(default_factory=_ModelCall)
    ready: list[Message] = field(default_factory=list)
    turn: list[Message] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    closed: bool = False


def _ai(
    current: _ModelCall, requests: Sequence[ToolRequest], *, reasoning: bool = True
) -> AiMessage | None:
    """The AI message of a model call, with its finished reasoning; ``None`` when it has no
    requests and only blank text (reasoning alone is no reply)."""
    text = current.text()
    thoughts = current.reasoning(requests) if reasoning else []
    if requests:
        return AiMessage(
            text=text or None,
            tool_requests=list(requests),
            reasoning=thoughts,
            metadata=current.metadata(),
        )
    if text.strip():
        return AiMessage(text=text, reasoning=thoughts)
    return None


class StreamAssembler:
    """Accumulates one turn's stream and hands out the batches to flush. Not thread-safe.

    ``max_text_bytes`` is the store's limit for one text field (``None``: no size limit; NUL
    characters and lone surrogates are refused either way).
    """

    def __init__(self, max_text_bytes: int | None = None) -> None:
        self._s = _State()
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

    def _check_result(self, id: str, result: str) -> None:
        if "\x00" in result:
            raise InvalidMessageError(
                f"the result of tool call {id!r} contains a NUL character, which databases "
                "reject; report it again cleaned up, or with truncate=True"
            )
        if _has_lone_surrogate(result):
            raise InvalidMessageError(
                f"the result of tool call {id!r} is not valid unicode (a lone surrogate); "
                "report it again cleaned up, or with truncate=True"
            )
        size = len(result.encode("utf-8"))
        if size > self._limit:
            raise MessageTooLargeError(
                f"the result of tool call {id!r} is {size} bytes; the limit is {self._limit} "
                "bytes (MEMSTORE_MAX_TEXT_BYTES); report it again shortened, or with "
                "truncate=True",
                size=size,
                limit=self._limit,
            )

    @staticmethod
    def _check_fragment(what: str, value: str | None) -> None:
        if value is not None and "\x00" in value:
            raise InvalidMessageError(f"{what} contains a NUL character, which databases reject")

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
        self._check_fragment("a text delta", delta)
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
            raise StreamProtocolError(f"a tool call index must be an int >= 0, got {_got(index)}")
        if id is not None and (not isinstance(id, str) or not id):
            raise StreamProtocolError(f"a tool call id must be a non-empty str, got {_got(id)}")
        for label, value in (("name", name), ("arguments", arguments)):
            if value is not None and not isinstance(value, str):
                raise StreamProtocolError(
                    f"tool call {label} at index {index} must be a str, got {type(value).__name__}"
                )
        current = self._streaming(f"a fragment of tool call {id or index!r}")
        for label, value in (("id", id), ("name", name), ("arguments", arguments)):
            self._check_fragment(f"the {label} of the tool call at index {index}", value)
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
            call = _Call(index=index, id=id)
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
        message = _ai(current, requests)
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
            raise StreamProtocolError(f"a reasoning part must be a Reasoning, got {_got(part)}")
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
            raise StreamProtocolError(f"a tool call id must be a non-empty str, got {_got(id)}")
        if not isinstance(result, str):
            raise StreamProtocolError(
                f"the result of tool call {id!r} must be a str, got {type(result).__name__}"
            )
        if not isinstance(is_error, bool):
            raise StreamProtocolError(f"is_error must be a bool, got {_got(is_error)}")
        if not isinstance(truncate, bool):
            raise StreamProtocolError(f"truncate must be a bool, got {_got(truncate)}")
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
        self._check_result(id, result)
        tool_result = ToolResult(
            id=id, tool_name=_join(call.name_parts), text=result, is_error=is_error
        )
        batch: list[Message] = []
        if sealing:
            message = _ai(current, requests)
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
            self._set_attr(self._s, "current", _ModelCall())
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
            message = _ai(current, requests)
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
            message = _ai(current, [], reasoning=False)
            try:
                if message is not None:
                    self._check_storable([message])
            except InvalidMessageError:
                current = _ModelCall()
        self._close_current(current.requests or [], current, reasoning=False)
        return self.ready

    def _close_current(
        self, requests: Sequence[ToolRequest], current: _ModelCall, *, reasoning: bool = True
    ) -> None:
        batch: list[Message] = []
        if current.requests is None:  # sealed model calls were handed out result by result
            message = _ai(current, requests, reasoning=reasoning)
            if message is not None:
                batch.append(message)
        self._s.ready.extend(batch)
        self._s.turn.extend(batch)
        self._s.current = _ModelCall()
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
                    f"chunk is not valid JSON ({type(error).__name__}): {_describe_chunk(chunk)}"
                ) from None
            if not isinstance(chunk, dict):
                raise StreamProtocolError(f"chunk is not a JSON object: {_describe_chunk(chunk)}")
        if chunk is None:
            raise StreamProtocolError("chunk is None")
        if not _is_record(chunk):
            raise StreamProtocolError(f"chunk is not an object: {_describe_chunk(chunk)}")
        kind = _get(chunk, "type")
        if kind is not None and not isinstance(kind, str):
            raise self._malformed(chunk, f"type must be a string, got {type(kind).__name__}")
        if kind is None and _get(chunk, "choices") is not None:
            ops = self._openai_ops(chunk)
        elif kind in LANGCHAIN4J_TYPES:
            ops = self._langchain4j_ops(chunk, kind)
        elif kind in ANTHROPIC_TYPES:
            ops = self._anthropic_ops(chunk, kind)
        elif kind is not None and kind.startswith(RESPONSES_PREFIX):
            ops = self._responses_ops(chunk, kind)
        else:
            raise StreamProtocolError(
                f"unknown chunk (type {_describe_kind(kind)}): {_describe_chunk(chunk)}"
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
            self._set_slot(self._s.current.anthropic_blocks, op[1], op[2])
            return False
        if name == "block_default":  # anthropic, responses: (index, default arguments)
            self._set_attr(self._s.current.slots[op[1]], "default_arguments", op[2])
            return False
        if name == "item_id":  # responses: (call id, function_call item id)
            current = self._streaming("a function_call item")
            self._check_fragment("a function_call item id", op[2])
            self._set_slot(current.item_ids, op[1], op[2])
            return False
        self._apply_thought(op)
        return False

    def _apply_thought(self, op: tuple[Any, ...]) -> None:
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
        self._check_fragment("a reasoning delta", op[2])
        if name == "thought_text":  # (key, delta)
            self._append(thought.text_parts, op[2])
        elif name == "thought_signature":  # (key, delta)
            self._append(thought.signature_parts, op[2])
        else:
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

    def _index_field(self, chunk: object, obj: object, key: str) -> int | None:
        """An optional ``int >= 0`` field (``None`` when absent)."""
        value = _get(obj, key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._malformed(chunk, f"{key} must be an int >= 0, got {_got(value)}")
        return value

    def _record_field(self, chunk: object, obj: object, key: str, *, required: bool) -> Any:
        value = _get(obj, key)
        if value is None and not required:
            return None
        if not _is_record(value):
            raise self._malformed(chunk, f"{key} must be an object, got {type(value).__name__}")
        return value

    def _list_field(self, chunk: object, obj: object, key: str) -> Sequence[Any]:
        value = _get(obj, key)
        if value is None:
            return []
        if not _is_list(value):
            raise self._malformed(chunk, f"{key} must be a list, got {type(value).__name__}")
        return value  # type: ignore[no-any-return]

    def _openai_ops(self, chunk: object) -> list[tuple[Any, ...]]:
        ops: list[tuple[Any, ...]] = []
        for choice in self._list_field(chunk, chunk, "choices"):
            if not _is_record(choice):
                raise self._malformed(chunk, "a choice is not an object")
            if (self._index_field(chunk, choice, "index") or 0) != 0:
                continue  # n > 1: only the first choice is the reply
            delta = self._record_field(chunk, choice, "delta", required=False)
            if delta is None:
                continue
            thought = self._str_field(chunk, delta, REASONING_CONTENT, required=False)
            if thought:
                if REASONING_CONTENT not in self._s.current.thought_slots:
                    ops.append(("thought_open", REASONING_CONTENT, OPENAI, REASONING_CONTENT))
                ops.append(("thought_text", REASONING_CONTENT, thought))
            content = self._str_field(chunk, delta, "content", required=False)
            if content:
                ops.append(("text", content))
            for call in self._list_field(chunk, delta, "tool_calls"):
                if not _is_record(call):
                    raise self._malformed(chunk, "a tool call delta is not an object")
                index = self._index_field(chunk, call, "index")
                if index is None:
                    raise self._malformed(chunk, "a tool call delta has no int index")
                function = self._record_field(chunk, call, "function", required=False)
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

    def _responses_ops(self, chunk: object, kind: str) -> list[tuple[Any, ...]]:
        """OpenAI Responses stream events: text, function calls (with their item ids) and
        reasoning items, kept whole as ``response.output_item.done`` sends them."""
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            text = self._str_field(chunk, chunk, "delta", required=True)
            return [("text", text)] if text else []
        if kind == "response.failed":
            raise StreamProtocolError("the provider reported that the response failed")
        if kind not in _RESPONSES_ITEM_EVENTS:
            return []  # lifecycle, summary and content-part events: the items say it all
        index = self._index_field(chunk, chunk, "output_index")
        if index is None:
            raise self._malformed(chunk, "output_index must be an int >= 0")
        if kind == "response.function_call_arguments.delta":
            if index not in self._s.current.slots:
                raise self._malformed(chunk, f"arguments for unknown output item {index}")
            fragment = self._str_field(chunk, chunk, "delta", required=True)
            return [("delta", index, None, None, fragment)] if fragment else []
        item = self._record_field(chunk, chunk, "item", required=True)
        item_type = self._str_field(chunk, item, "type", required=True)
        if item_type == "function_call":
            return self._responses_call_ops(chunk, kind, index, item)
        if item_type != "reasoning":
            return []  # a message item's text came as output_text deltas
        key = ("output", index)
        opened = key in self._s.current.thought_slots
        ops: list[tuple[Any, ...]] = []
        if not opened:
            ops.append(("thought_open", key, OPENAI, RESPONSES_REASONING))
        if kind == "response.output_item.done":
            ops.append(("thought_done", key, self._responses_reasoning(chunk, item)))
        return ops

    def _responses_call_ops(
        self, chunk: object, kind: str, index: int, item: object
    ) -> list[tuple[Any, ...]]:
        call_id = self._str_field(chunk, item, "call_id", required=True)
        name = self._str_field(chunk, item, "name", required=True)
        arguments = self._str_field(chunk, item, "arguments", required=False)
        item_id = self._str_field(chunk, item, "id", required=False)
        ops: list[tuple[Any, ...]] = [("item_id", call_id, item_id)] if item_id else []
        call = self._s.current.slots.get(index)
        if call is None or call.id != call_id:  # the call starts here (or its start was lost)
            return [("delta", index, call_id, name, arguments or None), *ops]
        if kind == "response.output_item.done" and not call.argument_parts and arguments:
            ops.append(("block_default", index, arguments))
        return ops

    def _responses_reasoning(self, chunk: object, item: object) -> Reasoning:
        """The part of a finished reasoning item; its fields are checked, its values kept."""
        part = responses_item_part(_as_json_object(item))
        if part is None:
            raise self._malformed(chunk, "a reasoning item is not of the API's shape")
        return part

    def _langchain4j_ops(self, chunk: object, kind: str) -> list[tuple[Any, ...]]:
        if kind == "ai_response":
            data = self._str_field(chunk, chunk, "data", required=True)
            return [("text", data)]
        call_id = self._str_field(chunk, chunk, "id", required=True)
        name = self._str_field(chunk, chunk, "name", required=False)
        arguments = self._str_field(chunk, chunk, "arguments", required=False)
        index = self._index_field(chunk, chunk, "index")
        current = self._s.current
        existing = current.by_id.get(call_id) if call_id else None
        if kind == "tool_request":
            if existing is not None:
                known = _join(existing.name_parts)
                if name and known and name != known:
                    raise self._malformed(chunk, f"call {call_id!r} was named {known!r} before")
                return [
                    ("delta", existing.index, call_id, None if known else name, arguments or None)
                ]
            if index is None:
                index = current.next_index
            return [("delta", index, call_id, name, arguments)]
        # tool_executed
        result = self._str_field(chunk, chunk, "result", required=True)
        is_error = _get(chunk, "is_error")
        if is_error is None:
            is_error = False
        elif not isinstance(is_error, bool):
            raise self._malformed(chunk, f"is_error must be a bool, got {_got(is_error)}")
        ops: list[tuple[Any, ...]] = []
        if (
            existing is None
            and call_id not in self._s.answered
            and name
            and arguments is not None
            and current.requests is None
        ):
            # the app did not stream the request: the executed chunk carries it whole
            ops.append(("delta", current.next_index, call_id, name, arguments))
        ops.append(("executed", call_id, result, is_error))
        return ops

    def _anthropic_ops(self, chunk: object, kind: str) -> list[tuple[Any, ...]]:
        if kind in ("message_start", "message_delta", "message_stop", "ping"):
            return []
        if kind == "error":
            error = _get(chunk, "error")
            error_type = _get(error, "type") if _is_record(error) else None
            raise StreamProtocolError(
                f"the provider reported an error in the stream (type {_describe_kind(error_type)})"
            )
        index = self._index_field(chunk, chunk, "index")
        if index is None:
            raise self._malformed(chunk, "index must be an int >= 0")
        blocks = self._s.current.anthropic_blocks
        if kind == "content_block_start":
            block = self._record_field(chunk, chunk, "content_block", required=True)
            block_type = self._str_field(chunk, block, "type", required=True)
            if block_type == "text":
                text = self._str_field(chunk, block, "text", required=False)
                return [("block", index, "text")] + ([("text", text)] if text else [])
            if block_type == "tool_use":
                call_id = self._str_field(chunk, block, "id", required=True)
                name = self._str_field(chunk, block, "name", required=True)
                return [("block", index, "tool_use"), ("delta", index, call_id, name, None)]
            if block_type == THINKING:
                key = ("block", index)
                ops = [("block", index, THINKING), ("thought_open", key, ANTHROPIC, THINKING)]
                text = self._str_field(chunk, block, "thinking", required=False)
                signature = self._str_field(chunk, block, "signature", required=False)
                ops += [("thought_text", key, text)] if text else []
                return ops + ([("thought_signature", key, signature)] if signature else [])
            if block_type == REDACTED_THINKING:
                key = ("block", index)
                data = self._str_field(chunk, block, "data", required=True)
                return [
                    ("block", index, REDACTED_THINKING),
                    ("thought_open", key, ANTHROPIC, REDACTED_THINKING),
                    ("thought_signature", key, data),
                ]
            raise self._malformed(chunk, f"unknown content block type {_describe_kind(block_type)}")
        if kind == "content_block_delta":
            delta = self._record_field(chunk, chunk, "delta", required=True)
            delta_type = self._str_field(chunk, delta, "type", required=True)
            if delta_type == "text_delta":
                return [("text", self._str_field(chunk, delta, "text", required=True))]
            if delta_type == "input_json_delta":
                if blocks.get(index) != "tool_use":
                    raise self._malformed(chunk, f"input_json_delta for non-tool block {index}")
                partial = self._str_field(chunk, delta, "partial_json", required=True)
                return [("delta", index, None, None, partial)]
            if delta_type in _THINKING_DELTAS:
                if blocks.get(index) != THINKING:
                    raise self._malformed(chunk, f"{delta_type} for non-thinking block {index}")
                field_name, op = _THINKING_DELTAS[delta_type]
                value = self._str_field(chunk, delta, field_name, required=True)
                return [(op, ("block", index), value)] if value else []
            if delta_type in _ANTHROPIC_IGNORED_DELTAS:
                return []
            raise self._malformed(chunk, f"unknown delta type {_describe_kind(delta_type)}")
        # content_block_stop: a thinking block is complete (it is kept only with its
        # signature); a tool_use block without input deltas has the input {}
        if blocks.get(index) in (THINKING, REDACTED_THINKING):
            if ("block", index) in self._s.current.thought_slots:
                return [("thought_done", ("block", index), None)]
            return []
        if blocks.get(index) == "tool_use":
            call = self._s.current.slots.get(index)
            if call is not None and not call.argument_parts and call.default_arguments is None:
                return [("block_default", index, "{}")]
        return []


def _as_json_object(item: object) -> dict[str, Any]:
    """A Responses item as the JSON object the API sent (an SDK object is dumped; absent
    fields, which SDK objects hold as ``None``, are left out either way)."""
    if not isinstance(item, Mapping):
        dump = getattr(item, "model_dump", None)
        item = dump(mode="json", exclude_none=True) if callable(dump) else vars(item)
    return {key: value for key, value in item.items() if value is not None}


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
