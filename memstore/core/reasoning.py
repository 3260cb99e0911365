"""Reasoning parts shared by the formats and the stream collector (pure, no I/O).

What a provider's reasoning looks like as a :class:`~memstore.messages.Reasoning` part is
decided here once, so a reasoning item read from a request (:mod:`memstore.formats.responses`)
and one assembled from a stream (:mod:`memstore.core.stream`) are the same part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memstore.messages import Reasoning

OPENAI = "openai"
ANTHROPIC = "anthropic"
RESPONSES_REASONING = "reasoning"
"""The kind of an OpenAI Responses ``reasoning`` item."""
REASONING_CONTENT = "reasoning_content"
"""The kind (and assistant key) of OpenAI-compatible servers' reasoning text (DeepSeek's
thinking mode, vLLM, Qwen)."""
THINKING = "thinking"
GOOGLE = "google"
THOUGHT = "thought"
"""A Gemini thought part (``thought=True``): its summary text, and its signature if any."""
THOUGHT_SIGNATURE = "thought_signature"
"""A Gemini thought signature carried by a function-call (or text) part: placed before that
call (``before_call``), URL-safe base64 as google-genai serializes it."""
REDACTED_THINKING = "redacted_thinking"
RESPONSES_ITEM_IDS_KEY = "openai_item_ids"
"""Canonical ``metadata`` key of an AI message's Responses ``function_call`` item ids, by call
id (an item id goes back only with the reasoning it belongs to)."""

REASONING_LOST_KEY = "memstore_reasoning_lost"
"""Canonical ``metadata`` key the stream collector sets on an AI message with tool requests
when reasoning of its model call started but was cut off before it was complete (the number
of such parts): ``memstore check`` and :func:`~memstore.core.validate.validate` report it."""

RESPONSES_OWN_KEYS = ("type", "id", "encrypted_content")
"""Reasoning item keys held in :class:`Reasoning` fields; every other key goes to ``extra``."""


def thinking_part(text: str, signature: str) -> Reasoning:
    """The part of an Anthropic ``thinking`` block: its text and the signature sending it back
    needs."""
    return Reasoning(provider=ANTHROPIC, kind=THINKING, text=text, signature=signature)


def redacted_thinking_part(data: str) -> Reasoning:
    """The part of an Anthropic ``redacted_thinking`` block: its encrypted ``data`` as the
    ``signature``."""
    return Reasoning(provider=ANTHROPIC, kind=REDACTED_THINKING, signature=data)


def reasoning_content_part(text: str) -> Reasoning:
    """The part of an OpenAI-compatible server's ``reasoning_content`` text."""
    return Reasoning(provider=OPENAI, kind=REASONING_CONTENT, text=text)


def responses_reasoning(
    item_id: str,
    summary_texts: Sequence[str],
    encrypted_content: str | None,
    item: Mapping[str, Any],
) -> Reasoning:
    """The part of one Responses ``reasoning`` item (fields already checked): its summary
    texts joined by a blank line as ``text``, ``encrypted_content`` as ``signature``, and the
    item's other keys, as they were, in ``extra``."""
    return Reasoning(
        provider=OPENAI,
        kind=RESPONSES_REASONING,
        id=item_id,
        text="\n\n".join(summary_texts) if summary_texts else None,
        signature=encrypted_content,
        extra={key: value for key, value in item.items() if key not in RESPONSES_OWN_KEYS},
    )


def responses_item_part(item: Mapping[str, Any]) -> Reasoning | None:
    """The part of a Responses ``reasoning`` item given as JSON (every key kept, byte for
    byte), or ``None`` when it is not of the API's shape: no non-empty string ``id``, a
    ``summary`` that is not a list of ``summary_text`` parts with string ``text``, a
    non-string ``encrypted_content``, a value that is not JSON."""
    item_id = item.get("id")
    encrypted = item.get("encrypted_content")
    summary = item.get("summary")
    if summary is None:
        summary = []
    if not isinstance(item_id, str) or not item_id:
        return None
    if encrypted is not None and not isinstance(encrypted, str):
        return None
    if not isinstance(summary, list):
        return None
    texts: list[str] = []
    for part in summary:
        text = part.get("text") if isinstance(part, Mapping) else None
        if not isinstance(text, str) or part.get("type") != "summary_text":
            return None
        texts.append(text)
    try:
        return responses_reasoning(item_id, texts, encrypted, item)
    except ValueError:  # pydantic's ValidationError and memstore's InvalidMessageError
        return None


def placed(
    parts: Iterable[Reasoning], call_ids: Iterable[str] = ()
) -> tuple[list[Reasoning], dict[str, list[Reasoning]]]:
    """A reply's reasoning parts by place: those at its head, and those right before each of
    ``call_ids`` (see :attr:`~memstore.messages.Reasoning.before_call`), in order. A part
    placed before a call the reply does not hold (none is ever stored) goes to the head:
    never dropped."""
    ids = set(call_ids)
    head: list[Reasoning] = []
    before: dict[str, list[Reasoning]] = {}
    for part in parts:
        if part.before_call is None or part.before_call not in ids:
            head.append(part)
        else:
            before.setdefault(part.before_call, []).append(part)
    return head, before


def placed_before(parts: Iterable[Reasoning], call_id: str) -> list[Reasoning]:
    """``parts`` (read right before the call ``call_id``) placed there."""
    return [part.model_copy(update={"before_call": call_id}) for part in parts]
