"""The stream collector: one streamed agent turn into both histories, in durable batches.

>>> from memstore import MemoryStore, Settings, UserMessage
>>> store = MemoryStore(Settings(database_url="sqlite:///:memory:"))
>>> store.migrate()
>>> _ = store.append("app-1", [UserMessage(text="What is in a.txt?")])
>>> with store.collector("app-1") as turn:
...     turn.on_tool_call_delta(0, id="call_1", name="read_file", arguments='{"path":')
...     turn.on_tool_call_delta(0, arguments=' "a.txt"}')
...     for request in turn.tool_calls():
...         turn.on_tool_executed(request.id, "hello")   # flush point: request + result
...     turn.on_text("It says ")
...     turn.on_text("hello.")
>>> [m.type for m in store.load_window("app-1")]
['user', 'ai', 'tool_result', 'ai']
>>> store.close()

Writes per turn (each one transaction, then the cache append):

* one INSERT into ``chat_history_original`` per reported tool result, before
  ``on_tool_executed`` returns: the result, preceded by the model call's AI message (text and
  all requests) when it is that call's first result. A tool that ran is durable at once, so a
  crash never loses it, even between parallel results;
* at turn end, one transaction with one INSERT into ``chat_history_original`` for what is
  left (the final text; omitted when nothing is left) and one INSERT into ``chat_history``
  (the turn's display row).

A turn with ``n`` executed tools and a final reply therefore makes ``n + 1`` original-history
INSERTs and one display INSERT. Nothing is written per delta.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from memstore.core.display import DisplayDraft
from memstore.core.steps import drive
from memstore.core.stream import StreamAssembler, storable_text, turn_display
from memstore.errors import CommitOutcomeUnknownError
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest
from memstore.store_steps import Scoped, call

if TYPE_CHECKING:
    from memstore.store import MemoryStore
    from memstore.store_steps import Steps
    from memstore.store_writes import StoreWrites

logger = logging.getLogger("memstore")

_REASON_CHARS = 500


def failure_reason(error: BaseException) -> str:
    """``ExceptionType: message`` (the type alone when the message is empty), one line,
    storable: NUL characters and lone surrogates (a file name from ``os.listdir``, say) become
    U+FFFD, and an exception whose ``str()`` itself fails shows its type only."""
    try:
        text = " ".join(str(error).split())
    except Exception:  # a hostile __str__ must not cost the turn its durable text
        text = ""
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    reason = storable_text(reason)
    return reason if len(reason) <= _REASON_CHARS else reason[: _REASON_CHARS - 1] + "…"


class TurnInput:
    """What the sync and async collectors share: the stream-facing half (text and tool-call
    fragments go into the pure assembler) and the turn's writes as sans-I/O steps (see
    :mod:`memstore.store_writes`), which each collector drives on its store."""

    _store: StoreWrites

    def __init__(self, app_id: str, user_id: str | None, max_text_bytes: int | None = None) -> None:
        self.app_id = app_id
        self.user_id = user_id
        self._assembler = StreamAssembler(max_text_bytes)
        self.flushes = 0
        """Writes made so far (each one transaction)."""
        self._doubt: tuple[CommitOutcomeUnknownError, int] | None = None
        """The last write's error and message count when its commit's outcome is unknown:
        the next write first finds out whether those messages were stored."""

    def _flushed(self, count: int, error: BaseException | None = None) -> None:
        """After a write of the ``count`` ready messages: mark them flushed, unless the write
        failed with an ``Exception`` (nothing was written; the turn's failure path may write
        them; when the commit's outcome is unknown, the next write settles it first). A write
        interrupted by a ``BaseException`` (Ctrl-C, a cancelled task) was written or has an
        unknown outcome: it is marked flushed too, so a batch is never written twice (a lost
        one is answered as interrupted; a doubled one breaks the history)."""
        if isinstance(error, CommitOutcomeUnknownError):
            self._doubt = (error, count)
            return
        if isinstance(error, Exception):
            return
        self._assembler.mark_flushed(count)
        self.flushes += 1

    def _fence(self) -> set[str]:
        """The call ids of the turn's requests already written. The write that carries the
        turn's display row needs them still stored: after a purge of the app (or of its user)
        during the turn, that row, which would quote the purged calls, is not written
        (:class:`~memstore.errors.UnknownToolCallError`), nor anything else of the turn."""
        return {
            request.id
            for message in self._assembler.flushed_messages
            if isinstance(message, AiMessage)
            for request in message.tool_requests
        }

    def _settled(self, committed: bool) -> None:
        """The outcome of the write in doubt is known: its messages were stored or not."""
        assert self._doubt is not None
        count = self._doubt[1]
        self._doubt = None
        if committed:
            self._assembler.mark_flushed(count)
            self.flushes += 1

    def on_text(self, delta: str) -> None:
        """A streamed text delta of the reply."""
        self._assembler.on_text(delta)

    def on_tool_call_delta(
        self,
        index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
    ) -> None:
        """One fragment of a streamed tool call (see :class:`StreamAssembler`)."""
        self._assembler.on_tool_call_delta(index, id=id, name=name, arguments=arguments)

    def on_reasoning(self, part: Reasoning) -> None:
        """A whole reasoning part of the reply, for reasoning assembled by the app (see
        :meth:`~memstore.core.stream.StreamAssembler.on_reasoning`); streamed reasoning
        arrives through :meth:`feed`."""
        self._assembler.on_reasoning(part)

    def tool_calls(self) -> list[ToolRequest]:
        """The assembled, strictly parsed requests of the current model call."""
        return self._assembler.tool_calls()

    @property
    def turn_messages(self) -> list[Message]:
        """The turn's messages so far (written or about to be)."""
        return self._assembler.turn_messages

    # -- writes ------------------------------------------------------------------------------

    def _flush_steps(self, display: DisplayDraft | None) -> Steps[None]:
        """Write the ready messages (and ``display``, the turn's display row, when given) in
        one transaction; a write in doubt is settled first."""
        if self._doubt is not None:
            doubt, count = self._doubt
            self._settled((yield from self._store._was_committed_steps(self.app_id, doubt, count)))
        batch = list(self._assembler.ready)
        if not batch and display is None:
            return
        drafts = [display] if display is not None else []
        fence = self._fence() if display is not None else ()
        try:
            yield from self._store._write_steps(self.app_id, self.user_id, batch, drafts, fence)
        except BaseException as error:
            self._flushed(len(batch), error)
            raise
        self._flushed(len(batch))

    def _complete_steps(self) -> Steps[None]:
        self._assembler.end_turn()
        draft = turn_display(self._assembler.turn_messages, self._store.formatters)
        yield from self._flush_steps(draft)
        if self._assembler.unanswered_call_ids():
            # requests the service never executed: let the loader answer them
            yield self._store.memory(self.app_id).invalidate

    def _fail_steps(self, error: BaseException) -> Steps[None]:
        self._assembler.fail_turn()
        reason = failure_reason(error)
        draft = turn_display(self._assembler.turn_messages, self._store.formatters, reason)
        try:
            yield from self._flush_steps(draft)
        except Exception:
            logger.warning(
                "memstore collector: flushing the failed turn of app %r failed; writing only "
                "its display row",
                self.app_id,
                exc_info=True,
            )
            # the row shows only what is durable: no "-> ok" for a result that was not written
            draft = turn_display(self._assembler.flushed_messages, self._store.formatters, reason)
            drafts = [draft] if draft is not None else []
            try:
                yield from self._store._write_steps(
                    self.app_id, self.user_id, [], drafts, self._fence()
                )
            except Exception:
                logger.warning(
                    "memstore collector: the display row of app %r's failed turn was lost",
                    self.app_id,
                    exc_info=True,
                )
        # never keep an unanswered request (or a half turn) in the cached window
        yield self._store.memory(self.app_id).invalidate

    def _finish_steps(self, exc: BaseException | None) -> Steps[None]:
        """Leaving the turn's block: complete the turn, or fail it with ``exc`` (which then
        re-raises); a failure to complete fails the turn too and re-raises."""
        if exc is not None:
            yield from self._fail_steps(exc)
            return
        try:
            yield from self._complete_steps()
        except BaseException as error:
            yield from self._fail_steps(error)
            raise


class TurnCollector(TurnInput, Scoped):
    """Collects one agent turn from a stream; get one from :meth:`MemoryStore.collector`.

    Leaving the ``with`` block completes the turn (final flush and the display row). An
    exception inside it (``BaseException`` included: cancellation, ``KeyboardInterrupt``)
    fails the turn: completed tool pairs and streamed text are flushed, the display row gets
    status ``failed`` with the reason, the cached window is invalidated, and the exception
    re-raises. Not thread-safe: one collector per turn, used by one task.
    """

    def __init__(self, store: MemoryStore, app_id: str, user_id: str | None) -> None:
        super().__init__(app_id, user_id, store.settings.max_text_bytes)
        self._store = store

    def on_tool_executed(
        self, id: str, result: str, is_error: bool = False, *, truncate: bool = False
    ) -> None:
        """Report a tool's result; it is written (with the model call's AI message, when it is
        the first result) before this returns.

        A result the store cannot take (a NUL character or lone surrogate, as a binary file
        read as text has, or more than ``MEMSTORE_MAX_TEXT_BYTES``) raises
        :class:`~memstore.errors.InvalidMessageError` /
        :class:`~memstore.errors.MessageTooLargeError` and changes nothing: report the call
        again with a cleaned-up result, or pass ``truncate=True`` to store it with visible
        ``[memstore: ...]`` markers (:func:`memstore.core.stream.fit_tool_result`). A
        :class:`~memstore.errors.StorageError` means the result is kept and written by the
        next flush (the next result or the turn's end); do not report it again. After a
        :class:`~memstore.errors.CommitOutcomeUnknownError` the next flush first finds out
        whether the write went through, so nothing is stored twice.
        """
        if self._assembler.on_tool_executed(id, result, is_error, truncate=truncate):
            self._flush(None)

    def feed(self, chunk: object) -> None:
        """One chunk of a LangChain4j-style, OpenAI Chat Completions or Responses, or Anthropic
        stream (reasoning included: see :meth:`~memstore.core.stream.StreamAssembler.feed`)."""
        if self._assembler.feed(chunk):
            self._flush(None)

    def _flush(self, display: DisplayDraft | None) -> None:
        drive(self._flush_steps(display), call)

    def _leave(self, exc: BaseException | None) -> None:
        drive(self._finish_steps(exc), call)  # an exception of the block re-raises
