"""pydantic-ai messages <-> memstore's canonical rows (no I/O).

The conversion rules are described in :mod:`memstore.adapters.pydantic_ai`: each entry's
message becomes rows carrying its parts in ``metadata["pydantic_ai"]``, and a window's rows are
regrouped into entries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import TypeAdapter

from memstore.extras import needs_extra

with needs_extra(__name__, "pydantic-ai"):
    from pydantic_ai.conversation_store import ConversationEntry
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

import memstore.messages as msg
from memstore.adapters._batch import distinct_requests, opaque
from memstore.core.check import REPAIR_MARK
from memstore.core.reasoning import (
    ANTHROPIC,
    OPENAI,
    REASONING_CONTENT,
    REDACTED_THINKING,
    RESPONSES_REASONING,
    placed_before,
    reasoning_content_part,
    redacted_thinking_part,
    responses_reasoning,
    thinking_part,
)
from memstore.core.window import is_synthetic
from memstore.messages import Message

PYDANTIC_AI_KEY = "pydantic_ai"
"""The ``metadata`` key holding a row's pydantic-ai parts and its message's other fields."""


INTERRUPTED_ENTRY_PREFIX = "memstore-interrupted-"
"""Entry id prefix of the synthetic returns of calls whose return was never stored."""

__all__ = [
    "INTERRUPTED_ENTRY_PREFIX",
    "PYDANTIC_AI_KEY",
    "entry_to_messages",
    "messages_to_entries",
    "real_entry_id",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

_MESSAGE: TypeAdapter[ModelMessage] = TypeAdapter(ModelMessage)


def _arguments(part: ToolCallPart) -> str:
    """The call's arguments: the model's string as sent, else canonical JSON."""
    args = part.args
    if isinstance(args, str):
        return args
    if args is None or isinstance(args, dict):
        return json.dumps(args or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return part.args_as_json_str()


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return "".join(item if isinstance(item, str) else f"[{item.kind}]" for item in part.content)


def _thinking(part: ThinkingPart) -> msg.Reasoning | None:
    """The part pydantic-ai replays to its provider, as memstore keeps it; ``None`` for thinking
    no provider takes back (no signature, another provider: it stays in the metadata copy).
    A Responses reasoning item spread over several parts (one per summary) is merged by the
    caller."""
    if part.provider_name == ANTHROPIC and part.signature:
        if part.id == REDACTED_THINKING:
            return redacted_thinking_part(part.signature)
        return thinking_part(part.content, part.signature)
    if part.provider_name == OPENAI and part.id == REASONING_CONTENT and part.content:
        return reasoning_content_part(part.content)
    if part.provider_name == OPENAI and part.id and part.id.startswith("rs_"):
        item: dict[str, Any] = {"summary": []}
        if part.content:
            item["summary"] = [{"type": "summary_text", "text": part.content}]
        raw = (part.provider_details or {}).get("raw_content")
        if isinstance(raw, list) and all(isinstance(text, str) for text in raw):
            item["content"] = [{"type": "reasoning_text", "text": text} for text in raw]
        texts = [part.content] if part.content else []
        return responses_reasoning(part.id, texts, part.signature, item)
    return None


def _merged(first: msg.Reasoning, more: msg.Reasoning) -> msg.Reasoning:
    """One Responses reasoning item from two of its parts (the next summary of the same id)."""
    summary = [*first.extra.get("summary", ()), *more.extra.get("summary", ())]
    texts = [entry["text"] for entry in summary]
    return responses_reasoning(
        first.id or "",
        texts,
        first.signature or more.signature,
        {**more.extra, **first.extra, "summary": summary},
    )


def _reasoning(message: ModelResponse, calls: list[msg.ToolRequest]) -> list[msg.Reasoning]:
    """The response's thinking, in order; a part after text or a call is placed before the
    next call (the order pydantic-ai replays the parts in)."""
    out: list[msg.Reasoning] = []
    unplaced: list[int] = []
    """Positions in ``out`` of parts after text or a call, waiting for the next call."""
    seen_output = False
    call_ids = {call.id for call in calls}
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            found = _thinking(part)
            if found is None:
                continue
            previous = out[-1] if out else None
            if (
                previous is not None
                and found.kind == previous.kind == RESPONSES_REASONING
                and found.id == previous.id
            ):
                out[-1] = _merged(previous, found)
                continue
            out.append(found)
            if seen_output:
                unplaced.append(len(out) - 1)
        elif isinstance(part, (TextPart, ToolCallPart)):
            if isinstance(part, ToolCallPart) and part.tool_call_id in call_ids:
                for position in unplaced:
                    out[position] = placed_before([out[position]], part.tool_call_id)[0]
                unplaced = []
            seen_output = True
    return out


def _response_row(message: ModelResponse, meta: Callable[[list[int]], dict[str, Any]]) -> Message:
    texts = [part.content for part in message.parts if isinstance(part, TextPart)]
    calls = distinct_requests(
        msg.ToolRequest(id=part.tool_call_id, name=part.tool_name, arguments=_arguments(part))
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.part_kind == "tool-call"
    )
    every = meta(list(range(len(message.parts))))
    text = "".join(texts) if texts else None
    if calls or text:
        return msg.AiMessage(
            text=text, tool_requests=calls, reasoning=_reasoning(message, calls), metadata=every
        )
    return opaque(every)


def _request_row(part: object, metadata: dict[str, Any]) -> Message:
    if isinstance(part, ToolReturnPart):
        return msg.ToolResult(
            id=part.tool_call_id,
            tool_name=part.tool_name,
            text=part.model_response_str(),
            is_error=part.outcome != "success",
            metadata=metadata,
        )
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:
        return msg.ToolResult(
            id=part.tool_call_id,
            tool_name=part.tool_name,
            text=part.model_response(),
            is_error=True,
            metadata=metadata,
        )
    if isinstance(part, UserPromptPart):
        return msg.UserMessage(text=_user_text(part), metadata=metadata)
    if isinstance(part, SystemPromptPart):
        return msg.SystemMessage(text=part.content, metadata=metadata)
    return opaque(metadata)


def entry_to_messages(entry: ConversationEntry) -> list[Message]:
    """The canonical rows of one entry, each carrying its parts in ``metadata``."""
    data = _MESSAGE.dump_python(entry.message, mode="json")
    parts: list[Any] = data.pop("parts")
    head = {"entry": entry.id, "parent": entry.parent_id, "message": data}

    def meta(indexes: list[int]) -> dict[str, Any]:
        return {PYDANTIC_AI_KEY: {**head, "parts": [[i, parts[i]] for i in indexes]}}

    message = entry.message
    if isinstance(message, ModelResponse):
        return [_response_row(message, meta)]
    rows = [_request_row(part, meta([i])) for i, part in enumerate(message.parts)]
    return rows or [opaque(meta([]))]


@dataclass
class _Building:
    entry_id: str
    parent_id: str | None
    message: dict[str, Any]
    parts: dict[int, Any]


def _interrupted(
    results: list[msg.ToolResult], previous: ConversationEntry | None
) -> ConversationEntry:
    # Stamped with the previous message's time, so every read builds an equal message (a
    # save compares the loaded messages with a fresh read).
    stamp = previous.message.timestamp if previous is not None else None
    stamp = stamp or _EPOCH
    parts = [
        ToolReturnPart(
            tool_name=result.tool_name, content=result.text, tool_call_id=result.id, timestamp=stamp
        )
        for result in results
    ]
    parent_id = previous.id if previous is not None else None
    return ConversationEntry(
        id=f"{INTERRUPTED_ENTRY_PREFIX}{parent_id or ''}",
        parent_id=parent_id,
        message=ModelRequest(parts=list(parts), timestamp=stamp),
    )


def real_entry_id(entry_id: str | None) -> str | None:
    """The stored entry a (possibly synthetic) entry id stands for: a synthetic entry is not
    stored, so a history continuing from it continues from the entry before it."""
    if entry_id is not None and entry_id.startswith(INTERRUPTED_ENTRY_PREFIX):
        return entry_id[len(INTERRUPTED_ENTRY_PREFIX) :] or None
    return entry_id


def messages_to_entries(
    messages: Sequence[Message], *, synthesize: bool = True
) -> list[ConversationEntry]:
    """Regroup a window's rows into entries (the rows of one entry form its message).

    Rows written by other means than this adapter are skipped. With ``synthesize``, the
    synthetic interrupted results of one tool group (and the answers ``memstore check
    --repair`` stored for its calls) become one ``ModelRequest`` entry of their own (id
    ``memstore-interrupted-<previous entry id>``), unless they answer calls of the newest
    response (a paused run may still be waiting on those calls); results for calls this
    adapter did not write are skipped like their calls.
    """
    pending: list[_Building | list[msg.ToolResult]] = []
    called: set[str] = set()
    """Call ids of this adapter's responses: only those get a synthetic return."""
    for message in messages:
        data = message.metadata.get(PYDANTIC_AI_KEY)
        if isinstance(data, dict):
            if isinstance(message, msg.AiMessage):
                called.update(call.id for call in message.tool_requests)
            parts = {index: part for index, part in data["parts"]}
            earlier = next(
                (
                    item
                    for item in reversed(pending[-2:])
                    if isinstance(item, _Building) and item.entry_id == data["entry"]
                ),
                None,
            )
            if earlier is not None:  # rows of one entry, maybe split by synthetic results
                earlier.parts.update(parts)
            else:
                pending.append(_Building(data["entry"], data["parent"], data["message"], parts))
        elif (
            synthesize
            and isinstance(message, msg.ToolResult)
            and message.id in called
            and (is_synthetic(message) or REPAIR_MARK in message.metadata)
        ):
            if pending and isinstance(pending[-1], list):
                pending[-1].append(message)
            else:
                pending.append([message])
    if pending and isinstance(pending[-1], list):
        pending.pop()  # calls of the newest response: maybe deferred, never answered here
    out: list[ConversationEntry] = []
    for item in pending:
        if isinstance(item, list):
            out.append(_interrupted(item, out[-1] if out else None))
            continue
        body = {**item.message, "parts": [item.parts[i] for i in sorted(item.parts)]}
        out.append(
            ConversationEntry(
                id=item.entry_id, parent_id=item.parent_id, message=_MESSAGE.validate_python(body)
            )
        )
    return out
