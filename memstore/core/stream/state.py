"""The state of one turn being assembled: the tool calls and reasoning parts of the current
model call as their fragments arrive, and the messages the turn has made so far."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.core.reasoning import (
    REASONING_CONTENT,
    REASONING_LOST_KEY,
    REDACTED_THINKING,
    RESPONSES_ITEM_IDS_KEY,
    THINKING,
    placed_before,
)
from memstore.core.stream.text import has_lone_surrogate, join_parts
from memstore.core.strict_json import loads_json
from memstore.errors import IncompleteToolCallError
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest, ToolResult


@dataclass(slots=True)
class Call:
    """One tool call being streamed: its fragments as they arrived."""

    index: int
    id: str | None
    name_parts: list[str] = field(default_factory=list)
    argument_parts: list[str] = field(default_factory=list)
    default_arguments: str | None = None
    """Anthropic: the block's ``input`` as JSON, used when no ``input_json_delta`` arrived."""

    def arguments(self) -> str:
        if not self.argument_parts and self.default_arguments is not None:
            return self.default_arguments
        return join_parts(self.argument_parts)

    def request(self) -> ToolRequest:
        """The assembled request, or ``IncompleteToolCallError`` naming index and id."""
        where = f"tool call at index {self.index} (id {self.id!r})"
        if self.id is None:
            raise IncompleteToolCallError(
                f"{where} has no id yet", index=self.index, call_id=self.id
            )
        name = join_parts(self.name_parts)
        if not name:
            raise IncompleteToolCallError(
                f"{where} has no name yet", index=self.index, call_id=self.id
            )
        arguments = self.arguments()
        if has_lone_surrogate(arguments):
            raise IncompleteToolCallError(
                f"arguments of {where} end inside a split character",
                index=self.index,
                call_id=self.id,
            )
        try:
            value = loads_json(arguments)
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
class Thought:
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
        signature = join_parts(self.signature_parts) if self.signature_parts else None
        if self.kind in (THINKING, REDACTED_THINKING) and not signature:
            return None
        text = None if self.kind == REDACTED_THINKING else join_parts(self.text_parts)
        return Reasoning(provider=self.provider, kind=self.kind, text=text, signature=signature)


@dataclass(slots=True)
class ModelCall:
    """The text, tool calls and reasoning parts of one model response, then its results."""

    text_parts: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    slots: dict[int, Call] = field(default_factory=dict)
    """The call each index currently continues."""
    by_id: dict[str, Call] = field(default_factory=dict)
    next_index: int = 0
    """One past the highest index used (LangChain4j chunks without an index get it)."""
    requests: list[ToolRequest] | None = None
    """Set when the first result arrives: the requests are sealed."""
    results: list[ToolResult] = field(default_factory=list)
    anthropic_blocks: dict[int, str] = field(default_factory=dict)
    thoughts: list[Thought] = field(default_factory=list)
    """Reasoning parts in the order they started."""
    thought_slots: dict[object, Thought] = field(default_factory=dict)
    """The part each key (a block or output index, ``reasoning_content``) continues."""
    item_ids: dict[str, str] = field(default_factory=dict)
    """Responses: the ``function_call`` item id of each call id."""

    def text(self) -> str:
        return join_parts(self.text_parts)

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

    def thought(self, provider: str, kind: str, whole: Reasoning | None = None) -> Thought:
        """A new reasoning part starting here."""
        return Thought(
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


@dataclass(slots=True)
class State:
    """Everything the assembler holds for one turn."""

    current: ModelCall = field(default_factory=ModelCall)
    ready: list[Message] = field(default_factory=list)
    turn: list[Message] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    closed: bool = False


def ai_message(
    current: ModelCall, requests: Sequence[ToolRequest], *, reasoning: bool = True
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
