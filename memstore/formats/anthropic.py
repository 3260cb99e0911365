"""Canonical messages <-> Anthropic Messages (``system`` parameter + ``messages``).

```pycon
>>> from memstore.messages import (AiMessage, SystemMessage, ToolRequest, ToolResult,
...                                UserMessage)
>>> history = [
...     SystemMessage(text="Be brief."),
...     UserMessage(text="Create a.txt"),
...     AiMessage(text="On it.", tool_requests=[
...         ToolRequest(id="toolu_1", name="write_file", arguments='{"path": "a.txt"}')]),
...     ToolResult(id="toolu_1", tool_name="write_file", text="ok"),
...     UserMessage(text="Thanks!"),
... ]
>>> system, messages = to_anthropic(history)
>>> system
'Be brief.'
>>> [turn["role"] for turn in messages]
['user', 'assistant', 'user']
>>> [block["type"] for block in messages[2]["content"]]
['tool_result', 'text']
>>> messages[1]["content"][1]["input"]
{'path': 'a.txt'}
>>> from_anthropic(messages, system=system) == history
True

```

Conversion (:func:`to_anthropic`, returning an :class:`AnthropicRequest` that unpacks as
``system, messages``):

* system messages, wherever they stand, are joined with a blank line (``"\\n\\n"``) into the
  top-level ``system`` string (``None`` when there are none);
* ``UserMessage`` -> a ``user`` turn ``[{"type": "text", "text": ...}]``;
* ``ToolResult`` -> a ``user`` turn ``[{"type": "tool_result", "tool_use_id", "content": text,
  "is_error": bool}]``;
* ``AiMessage`` -> an ``assistant`` turn: a text block (left out when the text is ``None``, or
  ``""`` next to tool requests: Anthropic rejects empty text blocks), then one ``{"type":
  "tool_use", "id", "name", "input"}`` block per request, where ``input`` is the parsed
  ``arguments`` (arguments that are not a strict JSON object raise: Anthropic needs an object);
* then :func:`merge_turns`: consecutive turns of one role become one turn holding every block
  of every merged message, in order, except that in a ``user`` turn all ``tool_result`` blocks
  come first (Anthropic requires it). A list that already alternates takes a fast path and is
  returned as is.

:func:`from_anthropic` reverses it: each ``system`` text block (or the string) becomes a
``SystemMessage`` first; a ``user`` turn becomes one ``ToolResult`` per ``tool_result`` block and
one ``UserMessage`` per text block, in block order; an ``assistant`` turn becomes one
``AiMessage`` per text block, with the ``tool_use`` blocks that follow it as its requests (leading
``tool_use`` blocks form an ``AiMessage`` with no text). String ``content`` is one text block.

What canonical -> Anthropic -> canonical keeps and loses:

* identity: texts, call ids, tool names of requests, ``is_error``;
* ``arguments`` come back as ``json.dumps(input, ensure_ascii=False)`` of the parsed object:
  equal as JSON (``json.loads`` of both is equal), not byte for byte (spacing, key order of
  duplicates, escapes and number spelling are not kept), because Anthropic carries ``input`` as
  parsed JSON and rejects extra fields that could hold the raw string;
* system messages come back as one ``SystemMessage`` (the joined text) at the start;
* ``ToolResult.tool_name`` is not sent (``tool_result`` blocks have no name); it comes back
  from the latest earlier ``tool_use`` with that id, or ``""`` when there is none;
* merging: within a run of consecutive user-side messages, tool results move before user
  messages; within a run of consecutive AI messages, an AI message without text (or with
  ``""``) joins its requests to the AI message before it (unless that one is an AI message
  with ``""`` text and no requests), and an AI message with ``""`` text and requests comes
  back with ``None`` text;
* ``metadata`` is dropped.

So the round trip is the identity, up to argument formatting, on lists without metadata whose
only system message (if any) comes first, where no AI message is directly followed by an AI
message without text, no AI message has ``""`` text next to requests, no user message is
directly followed by a tool result, and every tool result follows its request and carries its
tool name.

Thinking: an ``AiMessage``'s :class:`~memstore.messages.Reasoning` parts of provider
``anthropic`` are sent as ``thinking`` (``thinking`` = ``text``, ``signature``) and
``redacted_thinking`` (``data`` = ``signature``) blocks, byte for byte and in order: at the
head of its assistant turn, or right before the ``tool_use`` block a part's ``before_call``
names. So a tool loop in progress goes back with the blocks the API requires before its
``tool_use`` (``to_anthropic(..., reasoning=...)`` chooses which turns' go back; reasoning of
other providers never does). :func:`from_anthropic` reads them back: a thinking block belongs
to the block after it (the head of the message a text block opens, or its place before a
``tool_use`` block), so a turn's blocks come back in their order.

:func:`from_anthropic` accepts and drops ``cache_control`` on blocks and ``citations`` when it is
``None`` or empty. Anything else raises :class:`~memstore.errors.FormatConversionError` naming the
turn's index: unknown roles, keys or block types (``image``, ``document``, server tools...), a
``tool_result`` whose content holds non-text blocks, an assistant turn of thinking only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import memstore.messages as msg
from memstore.core.reasoning import placed, placed_before
from memstore.core.strict_json import loads_strict
from memstore.formats._common import (
    ReasoningScope,
    ToolNames,
    build,
    canonical,
    check_keys,
    dumps_arguments,
    fail,
    mapping,
    reasoning_to_send,
    string,
    text_parts,
)
from memstore.messages import Message

PROVIDER = "anthropic"
SYSTEM_SEPARATOR = "\n\n"
"""What joins the texts of several system messages into the one ``system`` string."""

_DROPPED_BLOCK_KEYS = ("cache_control", "citations")
"""Block keys accepted and dropped (``citations`` only when ``None`` or empty)."""
_BLOCK_KEYS: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
    "tool_result": ("type", "tool_use_id", "content", "is_error"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}
THINKING_KINDS = ("thinking", "redacted_thinking")

__all__ = ["SYSTEM_SEPARATOR", "AnthropicRequest", "from_anthropic", "merge_turns", "to_anthropic"]


class AnthropicRequest(NamedTuple):
    """The ``system`` and ``messages`` parameters of a Messages API call."""

    system: str | None
    messages: list[dict[str, Any]]


def to_anthropic(
    messages: Iterable[Message | Mapping[str, Any]], *, reasoning: ReasoningScope = "all"
) -> AnthropicRequest:
    """Convert canonical messages (or their dict form) to Anthropic's ``system`` + ``messages``.

    ``reasoning``: which ``thinking`` / ``redacted_thinking`` blocks go back (see
    :data:`~memstore.formats.REASONING_SCOPES`); reasoning of other providers never does.

    Raises :class:`~memstore.errors.FormatConversionError` for tool arguments that are not a
    strict JSON object.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    converted = canonical(messages, PROVIDER)
    thoughts = reasoning_to_send(converted, PROVIDER, reasoning)
    for index, message in enumerate(converted):
        if isinstance(message, msg.SystemMessage):
            system.append(message.text)
        elif isinstance(message, msg.UserMessage):
            turns.append({"role": "user", "content": [{"type": "text", "text": message.text}]})
        elif isinstance(message, msg.ToolResult):
            block = {
                "type": "tool_result",
                "tool_use_id": message.id,
                "content": message.text,
                "is_error": message.is_error,
            }
            turns.append({"role": "user", "content": [block]})
        else:
            head, before = placed(thoughts[index], (r.id for r in message.tool_requests))
            blocks: list[dict[str, Any]] = [_thinking_block(part) for part in head]
            if message.text is not None and (message.text or not message.tool_requests):
                blocks.append({"type": "text", "text": message.text})
            for call in message.tool_requests:
                blocks.extend(_thinking_block(part) for part in before.get(call.id, ()))
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": _input(index, call),
                    }
                )
            turns.append({"role": "assistant", "content": blocks})
    return AnthropicRequest(SYSTEM_SEPARATOR.join(system) if system else None, merge_turns(turns))


def _thinking_block(part: msg.Reasoning) -> dict[str, Any]:
    if part.kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": part.signature or ""}
    return {"type": "thinking", "thinking": part.text or "", "signature": part.signature or ""}


def _input(index: int, call: msg.ToolRequest) -> dict[str, Any]:
    try:
        value = loads_strict(call.arguments)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise fail(
            PROVIDER,
            index,
            f"arguments of call {call.id!r} ({call.name}) are not a strict JSON object; "
            "Anthropic's tool_use input must be one",
        )
    return value


def _is_result(block: object) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_result"


def _results_first(content: str | list[Any]) -> bool:
    if isinstance(content, str):
        return True
    other_seen = False
    for block in content:
        if not _is_result(block):
            other_seen = True
        elif other_seen:
            return False
    return True


def merge_turns(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive same-role turns of an Anthropic ``messages`` list.

    Every block of every merged turn is kept, in order, except that ``tool_result`` blocks move
    to the front of their ``user`` turn (stable). String content counts as one text block. When
    ``turns`` already alternates and every user turn has its results first, ``turns`` itself is
    returned (the fast path); otherwise a new list, whose untouched turns are the same dicts and
    whose merged turns are new ``{"role", "content"}`` dicts sharing the block dicts.
    """
    for index, raw in enumerate(turns):
        checked = mapping(PROVIDER, index, raw, "turn")
        if checked.get("role") not in ("user", "assistant"):
            raise fail(PROVIDER, index, f"unknown role {checked.get('role')!r}")
        if not isinstance(checked.get("content"), (str, list)):
            raise fail(PROVIDER, index, "content must be a string or a list of blocks")

    def settled(turn: dict[str, Any]) -> bool:
        return turn["role"] != "user" or _results_first(turn["content"])

    alternating = all(turns[i]["role"] != turns[i - 1]["role"] for i in range(1, len(turns)))
    if alternating and all(settled(turn) for turn in turns):
        return turns

    groups: list[list[dict[str, Any]]] = []
    for turn in turns:
        if groups and groups[-1][0]["role"] == turn["role"]:
            groups[-1].append(turn)
        else:
            groups.append([turn])
    merged: list[dict[str, Any]] = []
    for group in groups:
        if len(group) == 1 and settled(group[0]):
            merged.append(group[0])
            continue
        blocks: list[Any] = []
        for turn in group:
            content = turn["content"]
            blocks.extend(
                [{"type": "text", "text": content}] if isinstance(content, str) else content
            )
        role = group[0]["role"]
        if role == "user":
            blocks = [b for b in blocks if _is_result(b)] + [b for b in blocks if not _is_result(b)]
        merged.append({"role": role, "content": blocks})
    return merged


def from_anthropic(
    messages: Iterable[Mapping[str, Any]], system: str | list[Any] | None = None
) -> list[Message]:
    """Convert an Anthropic ``messages`` list (and its ``system`` parameter) to canonical messages.

    Raises :class:`~memstore.errors.FormatConversionError` (``provider="anthropic"``, ``index``
    the offending turn, ``-1`` for a malformed ``system``).
    """
    out: list[Message] = []
    if system is not None:
        texts = (
            [system]
            if isinstance(system, str)
            else text_parts(PROVIDER, -1, system, "system", extra_keys=_DROPPED_BLOCK_KEYS)
        )
        out.extend(build(PROVIDER, -1, msg.SystemMessage, text=text) for text in texts)
    names = ToolNames()
    for index, raw in enumerate(messages):
        turn = mapping(PROVIDER, index, raw, "turn")
        check_keys(PROVIDER, index, turn, ("role", "content"), "turn")
        role = turn.get("role")
        if role not in ("user", "assistant"):
            raise fail(PROVIDER, index, f"unknown role {role!r}; expected 'user' or 'assistant'")
        content = turn.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            raise fail(PROVIDER, index, "content must be a string or a non-empty list of blocks")
        if role == "user":
            out.extend(_user(index, content, names))
        else:
            for reply in _assistant(index, content):
                names.add(reply.tool_requests)
                out.append(reply)
    return out


def _block(index: int, position: int, raw: object) -> tuple[str, Mapping[str, Any]]:
    where = f"content[{position}]"
    block = mapping(PROVIDER, index, raw, where)
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in _BLOCK_KEYS:
        raise fail(PROVIDER, index, f"{where} has block type {kind!r}, which cannot be converted")
    check_keys(PROVIDER, index, block, (*_BLOCK_KEYS[kind], *_DROPPED_BLOCK_KEYS), where)
    if block.get("citations") not in (None, []):
        raise fail(PROVIDER, index, f"{where} has citations, which cannot be converted")
    return kind, block


def _user(index: int, content: list[Any], names: ToolNames) -> list[Message]:
    out: list[Message] = []
    for position, raw in enumerate(content):
        kind, block = _block(index, position, raw)
        where = f"content[{position}]"
        if kind == "text":
            text = string(PROVIDER, index, block.get("text"), f"{where}.text")
            out.append(build(PROVIDER, index, msg.UserMessage, text=text))
        elif kind == "tool_result":
            call_id = string(PROVIDER, index, block.get("tool_use_id"), f"{where}.tool_use_id")
            result = block.get("content")
            if result is None:
                text = ""
            elif isinstance(result, str):
                text = result
            else:
                parts = text_parts(
                    PROVIDER, index, result, f"{where}.content", extra_keys=_DROPPED_BLOCK_KEYS
                )
                text = "".join(parts)
            is_error = block.get("is_error")
            if is_error is None:
                is_error = False
            if not isinstance(is_error, bool):
                raise fail(PROVIDER, index, f"{where}.is_error must be a boolean")
            out.append(
                build(
                    PROVIDER,
                    index,
                    msg.ToolResult,
                    id=call_id,
                    tool_name=names.name(call_id),
                    text=text,
                    is_error=is_error,
                )
            )
        else:
            raise fail(PROVIDER, index, f"{where}: a user turn cannot hold a {kind} block")
    return out


def _assistant(index: int, content: list[Any]) -> list[msg.AiMessage]:
    # Each text block opens a message; tool_use blocks join the open one (or open a textless
    # one). Thinking blocks go with the block after them: at the head of the message a text
    # block opens, or placed right before a tool_use block that joins the open message
    # (``before_call``), so the order of the turn's blocks comes back (thinking at the end of
    # a turn joins the last message).
    pieces: list[tuple[str | None, list[msg.ToolRequest], list[msg.Reasoning]]] = []
    thinking: list[msg.Reasoning] = []
    for position, raw in enumerate(content):
        kind, block = _block(index, position, raw)
        where = f"content[{position}]"
        if kind in THINKING_KINDS:
            thinking.append(_reasoning(index, kind, block, where))
        elif kind == "text":
            text = string(PROVIDER, index, block.get("text"), f"{where}.text")
            pieces.append((text, [], thinking))
            thinking = []
        elif kind == "tool_use":
            arguments = mapping(PROVIDER, index, block.get("input"), f"{where}.input")
            try:
                raw_arguments = dumps_arguments(arguments)
            except (TypeError, ValueError) as error:
                raise fail(PROVIDER, index, f"{where}.input is not JSON: {error}") from error
            request = build(
                PROVIDER,
                index,
                msg.ToolRequest,
                id=string(PROVIDER, index, block.get("id"), f"{where}.id"),
                name=string(PROVIDER, index, block.get("name"), f"{where}.name"),
                arguments=raw_arguments,
            )
            if not pieces or pieces[-1][:2] == ("", []):
                # An empty text block never carries requests: to_anthropic leaves it out next
                # to requests, so it was a message of its own.
                pieces.append((None, [], thinking))
            else:  # thinking between the reply's text or calls and this call stays there
                pieces[-1][2].extend(placed_before(thinking, request.id))
            thinking = []
            pieces[-1][1].append(request)
        else:
            raise fail(PROVIDER, index, f"{where}: an assistant turn cannot hold a {kind} block")
    if thinking:
        if not pieces:
            raise fail(PROVIDER, index, "an assistant turn of thinking only has no reply")
        pieces[-1][2].extend(thinking)
    return [
        build(PROVIDER, index, msg.AiMessage, text=text, tool_requests=requests, reasoning=parts)
        for text, requests, parts in pieces
    ]


def _reasoning(index: int, kind: str, block: Mapping[str, Any], where: str) -> msg.Reasoning:
    if kind == "redacted_thinking":
        data = string(PROVIDER, index, block.get("data"), f"{where}.data")
        return build(PROVIDER, index, msg.Reasoning, provider=PROVIDER, kind=kind, signature=data)
    return build(
        PROVIDER,
        index,
        msg.Reasoning,
        provider=PROVIDER,
        kind=kind,
        text=string(PROVIDER, index, block.get("thinking"), f"{where}.thinking"),
        signature=string(PROVIDER, index, block.get("signature"), f"{where}.signature"),
    )
