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

from memstore.core.stream.anthropic_chunks import ANTHROPIC_TYPES
from memstore.core.stream.assembler import StreamAssembler
from memstore.core.stream.langchain4j_chunks import LANGCHAIN4J_TYPES
from memstore.core.stream.openai_chunks import RESPONSES_PREFIX
from memstore.core.stream.text import fit_tool_result, storable_text
from memstore.core.stream.turn import FAILED_MARK, turn_display

__all__ = [
    "ANTHROPIC_TYPES",
    "FAILED_MARK",
    "LANGCHAIN4J_TYPES",
    "RESPONSES_PREFIX",
    "StreamAssembler",
    "fit_tool_result",
    "storable_text",
    "turn_display",
]
