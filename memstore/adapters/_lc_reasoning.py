"""LangChain messages' reasoning as memstore :class:`~memstore.messages.Reasoning` parts (pure).

Read from the JSON copy of an ``AIMessage`` the adapter stores, so the parts match that copy:
langchain-anthropic ``thinking`` / ``redacted_thinking`` blocks, langchain-openai Responses
``reasoning`` items (in ``content``, or ``additional_kwargs["reasoning"]`` with
``output_version="v0"``), LangChain 1.x standard ``reasoning`` blocks of a reply whose
``response_metadata["model_provider"]`` names the provider, and
``additional_kwargs["reasoning_content"]``. What a provider would not take back (no signature,
another provider, a malformed block) is left out: it stays in the metadata copy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstore.core.reasoning import (
    ANTHROPIC,
    OPENAI,
    REASONING_CONTENT,
    REDACTED_THINKING,
    RESPONSES_REASONING,
    THINKING,
    placed_before,
    reasoning_content_part,
    redacted_thinking_part,
    responses_item_part,
    thinking_part,
)
from memstore.messages import Reasoning, ToolRequest

__all__ = ["reasoning_of"]

_CALL_BLOCKS = {"tool_use": "id", "function_call": "call_id", "tool_call": "id"}
"""Content blocks of a tool call and the key of their call id: langchain-anthropic's
``tool_use``, langchain-openai's Responses ``function_call``, LangChain 1.x's ``tool_call``."""
_OUTPUT_BLOCKS = ("text", "invalid_tool_call", *_CALL_BLOCKS)
"""Blocks of the reply itself: reasoning after one of them is placed before the next call."""
_STREAM_KEY = "index"
"""LangChain's key for merging streamed blocks: not the provider's (langchain-openai drops it
from a reasoning item and its summary parts before sending)."""


def _nonempty(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _responses_item(block: dict[str, Any]) -> Reasoning | None:
    """A Responses ``reasoning`` item (as langchain-openai keeps it in ``content`` or, with
    ``output_version="v0"``, in ``additional_kwargs["reasoning"]``), every field kept but
    LangChain's streaming ``index``; ``None`` when it is not one the API would take back."""
    item = {key: value for key, value in block.items() if key != _STREAM_KEY}
    summary = item.get("summary")
    if not isinstance(summary, list):
        return None
    item["summary"] = [
        {key: value for key, value in part.items() if key != _STREAM_KEY}
        if isinstance(part, dict)
        else part
        for part in summary
    ]
    return responses_item_part(item)


def _thinking(block: dict[str, Any]) -> Reasoning | None:
    """An Anthropic ``thinking`` / ``redacted_thinking`` block; ``None`` without the signature
    (or data) that sending it back needs."""
    if block.get("type") == REDACTED_THINKING:
        data = _nonempty(block.get("data"))
        if data is None:
            return None
        return redacted_thinking_part(data)
    text, signature = block.get("thinking"), _nonempty(block.get("signature"))
    if not isinstance(text, str) or signature is None:
        return None
    return thinking_part(text, signature)


def _standard_thinking(block: dict[str, Any]) -> Reasoning | None:
    """A LangChain 1.x ``reasoning`` block of an Anthropic reply: langchain-anthropic sends it
    back as ``thinking`` = ``reasoning``, ``signature`` = ``extras["signature"]``."""
    extras = block.get("extras")
    text = block.get("reasoning")
    signature = _nonempty(extras.get("signature")) if isinstance(extras, dict) else None
    if not isinstance(text, str) or signature is None:
        return None
    return thinking_part(text, signature)


def _imploded(content: list[Any]) -> list[Any]:
    """``content`` of an OpenAI reply with its LangChain 1.x ``reasoning`` blocks turned back
    into the Responses items they came from, as langchain-openai does before sending: a block
    per summary text (the item's other fields in the first block's ``extras``), consecutive
    blocks of one item id being one item."""
    out: list[Any] = []
    position = 0
    while position < len(content):
        block = content[position]
        position += 1
        if not (isinstance(block, dict) and block.get("type") == RESPONSES_REASONING) or (
            "summary" in block
        ):
            out.append(block)
            continue
        extras = block.get("extras", {})
        if not isinstance(extras, dict):
            out.append(None)  # malformed: no reasoning part
            continue
        item = {key: value for key, value in block.items() if key not in ("reasoning", "extras")}
        item.update(extras)
        summary: list[Any] = []
        if "reasoning" in block:
            summary.append({"type": "summary_text", "text": block["reasoning"]})
            while position < len(content):
                after = content[position]
                if not (
                    isinstance(after, dict)
                    and after.get("type") == RESPONSES_REASONING
                    and "reasoning" in after
                    and "summary" not in after
                    and after.get("id") == block.get("id")
                    and ("id" in after) == ("id" in block)
                ):
                    break
                summary.append({"type": "summary_text", "text": after["reasoning"]})
                position += 1
        item["summary"] = summary
        item["type"] = RESPONSES_REASONING
        out.append(item)
    return out


def _reasoning_part(block: dict[str, Any], provider: str | None) -> Reasoning | None:
    """The part of one content block; ``None`` for a block that is not reasoning a provider
    takes back. ``provider`` is the reply's ``response_metadata["model_provider"]``: a
    provider's own block shape counts when it is that provider or unset; a LangChain 1.x
    standard block only with the provider set."""
    kind = block.get("type")
    if kind == "non_standard" and provider == ANTHROPIC:
        value = block.get("value")  # LangChain 1.x keeps redacted_thinking like this
        if isinstance(value, dict) and value.get("type") == REDACTED_THINKING:
            return _thinking(value)
        return None
    if kind in (THINKING, REDACTED_THINKING):
        return _thinking(block) if provider in (None, ANTHROPIC) else None
    if kind != RESPONSES_REASONING:
        return None
    if "summary" in block:
        return _responses_item(block) if provider in (None, OPENAI) else None
    return _standard_thinking(block) if provider == ANTHROPIC else None


def reasoning_of(data: dict[str, Any], requests: Sequence[ToolRequest]) -> list[Reasoning]:
    """The reasoning of an AI message (``data``: its stored JSON), in order: a part after the
    reply's text or a call is placed before the next of ``requests`` (``before_call``).
    Reasoning that cannot be sent back byte for byte stays in the metadata copy only."""
    response_metadata = data.get("response_metadata")
    provider = (
        response_metadata.get("model_provider") if isinstance(response_metadata, dict) else None
    )
    provider = provider if isinstance(provider, str) else None
    kwargs = data.get("additional_kwargs")
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    out: list[Reasoning] = []
    thought = _nonempty(kwargs.get(REASONING_CONTENT))
    if thought is not None:  # DeepSeek, Groq, OpenAI-compatible servers
        out.append(reasoning_content_part(thought))
    legacy = kwargs.get("reasoning")  # langchain-openai's Responses output, output_version="v0"
    if (
        isinstance(legacy, dict)
        and legacy.get("type", RESPONSES_REASONING) == RESPONSES_REASONING
        and provider in (None, OPENAI)
    ):
        part = _responses_item(legacy)
        if part is not None:
            out.append(part)
    content = data.get("content")
    if not isinstance(content, list):
        return out
    if provider == OPENAI:
        content = _imploded(content)
    call_ids = {request.id for request in requests}
    waiting: list[int] = []
    """Positions in ``out`` of parts after the reply's text or a call, before the next call."""
    after_output = False
    for block in content:
        if isinstance(block, str):
            after_output = True
            continue
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in _OUTPUT_BLOCKS:
            call_id = block.get(_CALL_BLOCKS.get(kind, ""))
            if isinstance(call_id, str) and call_id in call_ids:
                for position in waiting:
                    out[position] = placed_before([out[position]], call_id)[0]
                waiting = []
            after_output = True
            continue
        try:
            part = _reasoning_part(block, provider)
        except ValueError:  # a value the part cannot hold: not sendable, left out
            part = None
        if part is not None:
            if after_output:
                waiting.append(len(out))
            out.append(part)
    return out
