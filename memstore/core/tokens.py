"""Token counting for token-bounded windows, and fitting an oversized tool group.

A token counter is any function ``(Message) -> int``. memstore ships two:

* :func:`approximate_tokens`, the default: no tokenizer, no download. It counts
  ``ceil(utf8_bytes / 3)`` over the message's text (AI text, every request's name and
  arguments, the text and opaque payload of its reasoning, a result's tool name and text)
  plus :data:`MESSAGE_OVERHEAD_TOKENS` per message
  and :data:`REQUEST_OVERHEAD_TOKENS` per tool request. Three bytes per token over-counts
  English prose (about four characters per token) and is close for code, JSON and CJK text
  (three UTF-8 bytes per character, about one token each); it ignores metadata, which is
  never sent to a model. Reasoning is counted whole, as a provider counts reasoning sent back
  in a tool loop (an encrypted payload stands for the reasoning tokens it hides; providers
  that drop the reasoning of finished turns count less).
* :func:`encoding_counter`, an adapter for a tokenizer the caller already holds (a
  ``tiktoken`` ``Encoding`` or anything with ``encode(str) -> list``); memstore never loads
  or downloads one.

>>> from memstore import UserMessage
>>> approximate_tokens(UserMessage(text="hello world"))  # 11 bytes -> 4, plus 4 overhead
8
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from memstore.core.window import Window
from memstore.errors import InvalidInputError
from memstore.messages import AiMessage, Message, ToolResult

TokenCounter = Callable[[Message], int]
"""Counts the tokens one message costs in a model's context."""

Oversize = Literal["keep", "truncate-results"]
OVERSIZE_POLICIES: tuple[str, ...] = ("keep", "truncate-results")

MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens added per message for the provider's role and framing tokens."""
REQUEST_OVERHEAD_TOKENS = 8
"""Tokens added per tool request for its call id and structure."""
BYTES_PER_TOKEN = 3
TRUNCATED_MARK = "memstore_truncated"
"""Metadata key of a result cut to fit a token budget (the value: characters removed)."""
MAX_TOKENS_LIMIT = 2**40


def message_texts(message: Message) -> list[str]:
    """The strings of ``message`` that reach a model (metadata excluded)."""
    if isinstance(message, AiMessage):
        texts = [message.text] if message.text is not None else []
        for call in message.tool_requests:
            texts.extend((call.name, call.arguments))
        for part in message.reasoning:
            texts.extend(value for value in (part.text, part.signature) if value)
        return texts
    if isinstance(message, ToolResult):
        return [message.tool_name, message.text]
    return [message.text]


def _requests(message: Message) -> int:
    return len(message.tool_requests) if isinstance(message, AiMessage) else 0


def approximate_tokens(message: Message) -> int:
    """The default counter: see the module docstring for what it over- and under-counts."""
    size = sum(len(text.encode("utf-8")) for text in message_texts(message))
    return (
        -(-size // BYTES_PER_TOKEN)
        + MESSAGE_OVERHEAD_TOKENS
        + REQUEST_OVERHEAD_TOKENS * _requests(message)
    )


def encoding_counter(
    encoding: Any,
    *,
    message_overhead: int = MESSAGE_OVERHEAD_TOKENS,
    request_overhead: int = REQUEST_OVERHEAD_TOKENS,
) -> TokenCounter:
    """A counter over a tokenizer you already have: ``len(encoding.encode(text))`` per text of
    the message plus the same per-message and per-request overheads as the default.

    ``encoding`` is e.g. ``tiktoken.get_encoding("o200k_base")`` (which you load; memstore
    never downloads anything). Special-token strings in chat text are counted as plain text
    when the encoder accepts ``disallowed_special=()`` (tiktoken does).
    """
    encode = getattr(encoding, "encode", None)
    if not callable(encode):
        raise InvalidInputError("encoding must have an encode(str) method")
    try:
        encode("", disallowed_special=())
        plain = False
    except TypeError:
        plain = True

    def count(message: Message) -> int:
        total = message_overhead + request_overhead * _requests(message)
        for text in message_texts(message):
            total += len(encode(text) if plain else encode(text, disallowed_special=()))
        return total

    return count


def checked_counter(counter: TokenCounter) -> TokenCounter:
    """``counter``, raising :class:`InvalidInputError` when it returns a non-int or a negative
    number (a budget cannot be kept with such counts)."""

    def count(message: Message) -> int:
        value = counter(message)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(
                f"token_counter must return an int >= 0, got {type(value).__name__}"
                + (f" {value}" if isinstance(value, int) else "")
            )
        return value

    return count


def truncation_marker(removed: int) -> str:
    """Appended to a result cut to fit a budget (it names only a count, never content)."""
    return f"\n[memstore: truncated to fit the token budget, {removed} characters omitted]"


def truncate_results(
    messages: Sequence[Message], budget: int, count: TokenCounter
) -> tuple[list[Message], int]:
    """Cut the largest tool results of ``messages`` (one tool group) until it fits ``budget``.

    Results are never removed, only shortened, each ending with :func:`truncation_marker`;
    the largest result is cut first, as little as needed. Returns the messages and how many
    results were cut; a group that cannot fit even with every result cut to its marker stays
    at that minimum.
    """
    out = list(messages)
    counts = [count(m) for m in out]
    cut = 0
    order = sorted(
        (i for i, m in enumerate(out) if isinstance(m, ToolResult)),
        key=lambda i: counts[i],
        reverse=True,
    )
    for index in order:
        excess = sum(counts) - budget
        if excess <= 0:
            break
        result = out[index]
        assert isinstance(result, ToolResult)
        others = sum(counts) - counts[index]
        best = _shortest_fit(result, budget - others, count)
        out[index] = best
        counts[index] = count(best)
        cut += 1
    return out, cut


def _cut(result: ToolResult, keep: int) -> ToolResult:
    removed = len(result.text) - keep
    metadata = dict(result.metadata)
    metadata[TRUNCATED_MARK] = removed
    return ToolResult(
        id=result.id,
        tool_name=result.tool_name,
        text=result.text[:keep] + truncation_marker(removed),
        is_error=result.is_error,
        metadata=metadata,
    )


def _shortest_fit(result: ToolResult, room: int, count: TokenCounter) -> ToolResult:
    """The longest prefix cut of ``result`` whose count is at most ``room`` (binary search);
    the cut to the marker alone when none fits."""
    low, high = 0, len(result.text) - 1
    best = _cut(result, 0)
    while low <= high:
        middle = (low + high) // 2
        candidate = _cut(result, middle)
        if count(candidate) <= room:
            best = candidate
            low = middle + 1
        else:
            high = middle - 1
    return best


def oversize_policy(value: str) -> Oversize:
    """Validate an ``oversize`` argument."""
    if value == "keep":
        return "keep"
    if value == "truncate-results":
        return "truncate-results"
    raise InvalidInputError(f"oversize must be one of {list(OVERSIZE_POLICIES)}, got {value!r}")


def fit_oversize(
    window: Window, max_tokens: int, count: TokenCounter, oversize: Oversize
) -> Window:
    """With ``"truncate-results"``, cut the results of a window that is one oversized tool
    group (see :func:`truncate_results`); otherwise return ``window`` as it is."""
    if not window.stats.oversize or oversize != "truncate-results":
        return window
    messages, cut = truncate_results(window.messages, max_tokens, count)
    window.stats.truncated_results = cut
    window.stats.tokens = sum(count(m) for m in messages)
    return Window(messages, window.stats, window.needs_older_rows, window.synthetic_call_ids)
