"""Check a list of canonical messages against a provider's message-ordering rules.

Pure and offline: :func:`validate` answers with the problems OpenAI Chat Completions or
Anthropic Messages would reject the list for (once converted to that provider's format), so
tests and the loader can prove a window is sendable without calling an API.

>>> from memstore.messages import ToolResult, UserMessage
>>> cut = [UserMessage(text="hi"), ToolResult(id="call_9", tool_name="search", text="ok")]
>>> [(v.index, v.code) for v in validate(cut, "openai")]
[(1, 'orphan_result')]
>>> [v.code for v in validate(cut[1:], "anthropic")]
['wrong_first_role', 'orphan_result']
>>> validate(cut[:1], "anthropic")
[]

Rules checked (codes of :class:`Violation`):

* ``orphan_result``: a tool result outside the contiguous run of results that directly follows
  the AI message requesting its id;
* ``unanswered_request``: a requested id with no result in that run;
* ``duplicate_call_id``: a call id requested a second time in the list, or a request answered
  twice;
* ``arguments_not_object``: tool-call arguments that are not a strict JSON object;
* ``wrong_first_role``: OpenAI, the first non-system message is a tool result; Anthropic, the
  first non-system message is not a user message;
* ``empty`` (Anthropic): no non-system message at all;
* ``empty_content`` (Anthropic): an AI message with neither tool requests nor non-blank text,
  or a user message with empty text;
* ``reasoning_unsendable`` (Anthropic): a ``thinking`` / ``redacted_thinking`` part without its
  signature (or data), which the API refuses;
* ``reasoning_missing``: the tool loop in progress (the AI messages after the last user
  message) lacks reasoning the provider requires back. Anthropic: thinking is on (some AI
  message of the list carries Anthropic thinking) and the loop's first AI message, whose
  calls are being answered, starts with no thinking block. OpenAI: the list carries
  ``reasoning_content`` and an AI message of the loop with tool requests has none. Both: an AI
  message of the loop marked by the stream collector because its reasoning was cut off before
  it was complete (``metadata["memstore_reasoning_lost"]``).

Anthropic has no system role inside ``messages`` (system text goes to the top-level ``system``
parameter), so for ``"anthropic"`` system messages are ignored wherever they stand; user
messages and tool results both become ``user`` turns and consecutive same-role turns are
merged, so consecutive user messages are fine. For ``"openai"`` a system message is a message
like any other and breaks a run of tool results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memstore.core.reasoning import (
    ANTHROPIC,
    REASONING_CONTENT,
    REASONING_LOST_KEY,
    REDACTED_THINKING,
    THINKING,
)
from memstore.core.strict_json import loads_json
from memstore.messages import AiMessage, Message, SystemMessage, ToolResult, UserMessage

Provider = Literal["openai", "anthropic"]
"""The providers :func:`validate` knows."""

PROVIDERS: tuple[str, ...] = ("openai", "anthropic")

ORPHAN_RESULT = "orphan_result"
UNANSWERED_REQUEST = "unanswered_request"
DUPLICATE_CALL_ID = "duplicate_call_id"
ARGUMENTS_NOT_OBJECT = "arguments_not_object"
WRONG_FIRST_ROLE = "wrong_first_role"
EMPTY = "empty"
EMPTY_CONTENT = "empty_content"
REASONING_UNSENDABLE = "reasoning_unsendable"
REASONING_MISSING = "reasoning_missing"


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason the provider would reject the list."""

    index: int
    """Position of the offending message in the list given, or -1 for list-level problems."""
    code: str
    """What is wrong: one of the module's code constants (``"orphan_result"``...)."""
    detail: str
    """A human sentence naming the message and call ids involved."""


def _is_json_object(text: str) -> bool:
    """True when ``text`` is strict JSON (no NaN/Infinity) whose top level is an object."""
    try:
        value = loads_json(text)
    except ValueError:  # json.JSONDecodeError is a ValueError
        return False
    return isinstance(value, dict)


def validate(messages: Sequence[Message], provider: Provider) -> list[Violation]:
    """Return the ordering problems ``provider`` would reject ``messages`` for; ``[]`` if none.

    ``provider`` is ``"openai"`` (Chat Completions) or ``"anthropic"`` (Messages); anything
    else raises :class:`ValueError`. Violations come sorted by ``index`` (list-level first).
    """
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; expected 'openai' or 'anthropic'")
    anthropic = provider == "anthropic"
    violations: list[Violation] = []

    # The messages the provider sees, with their positions in the list given.
    seen: list[tuple[int, Message]] = [
        (index, message)
        for index, message in enumerate(messages)
        if not (anthropic and isinstance(message, SystemMessage))
    ]

    non_system = [(i, m) for i, m in seen if not isinstance(m, SystemMessage)]
    if not non_system:
        if anthropic:
            violations.append(Violation(-1, EMPTY, "no user or assistant message to send"))
    else:
        first_index, first = non_system[0]
        if anthropic and not isinstance(first, UserMessage):
            violations.append(
                Violation(
                    first_index,
                    WRONG_FIRST_ROLE,
                    f"the first non-system message is a {first.type} message; "
                    "Anthropic needs a user message first",
                )
            )
        elif not anthropic and isinstance(first, ToolResult):
            violations.append(
                Violation(
                    first_index,
                    WRONG_FIRST_ROLE,
                    f"the first non-system message is the tool result for {first.id!r}",
                )
            )

    requested: set[str] = set()  # every id requested so far
    answered: set[str] = set()  # ids whose latest request already has a result

    def misplaced(index: int, result: ToolResult, why: str) -> None:
        violations.append(Violation(index, ORPHAN_RESULT, f"tool result for {result.id!r} {why}"))
        if result.id in answered:
            violations.append(
                Violation(index, DUPLICATE_CALL_ID, f"call {result.id!r} is answered twice")
            )
        elif result.id in requested:
            answered.add(result.id)

    position = 0
    while position < len(seen):
        index, message = seen[position]
        position += 1
        if isinstance(message, ToolResult):
            # Not consumed by the run after an AI message with requests: it follows no request.
            misplaced(
                index,
                message,
                "does not directly follow the AI message requesting it "
                "(only other tool results may stand between them)",
            )
            continue
        if anthropic and isinstance(message, UserMessage) and message.text == "":
            violations.append(Violation(index, EMPTY_CONTENT, "user message has empty text"))
        if not isinstance(message, AiMessage):
            continue
        if not message.tool_requests:
            if anthropic and (message.text is None or not message.text.strip()):
                violations.append(
                    Violation(index, EMPTY_CONTENT, "AI message has no text and no tool requests")
                )
            continue

        own: list[str] = []
        for call in message.tool_requests:
            if call.id in requested:
                violations.append(
                    Violation(index, DUPLICATE_CALL_ID, f"call id {call.id!r} is requested again")
                )
            requested.add(call.id)
            answered.discard(call.id)
            own.append(call.id)
            if not _is_json_object(call.arguments):
                violations.append(
                    Violation(
                        index,
                        ARGUMENTS_NOT_OBJECT,
                        f"arguments of call {call.id!r} ({call.name}) are not a JSON object",
                    )
                )

        # The contiguous run of results that follows answers this message's requests.
        while position < len(seen):
            result_index, result = seen[position]
            if not isinstance(result, ToolResult):
                break
            position += 1
            if result.id not in own:
                misplaced(
                    result_index,
                    result,
                    f"follows an AI message that did not request it (it requested "
                    f"{', '.join(repr(call_id) for call_id in own)})",
                )
            elif result.id in answered:
                violations.append(
                    Violation(
                        result_index, DUPLICATE_CALL_ID, f"call {result.id!r} is answered twice"
                    )
                )
            else:
                answered.add(result.id)
        for call_id in dict.fromkeys(own):
            if call_id not in answered:
                violations.append(
                    Violation(
                        index,
                        UNANSWERED_REQUEST,
                        f"call {call_id!r} has no tool result directly after its AI message",
                    )
                )

    violations.extend(_reasoning_violations(seen, anthropic))
    violations.sort(key=lambda violation: violation.index)
    return violations


def _reasoning_violations(seen: list[tuple[int, Message]], anthropic: bool) -> list[Violation]:
    """The reasoning rules (see the module docstring) over the messages the provider sees."""
    violations: list[Violation] = []
    replies = [(i, m) for i, m in seen if isinstance(m, AiMessage)]
    if anthropic:
        for index, reply in replies:
            for number, part in enumerate(reply.reasoning):
                if part.provider == ANTHROPIC and not part.signature:
                    what = "data" if part.kind == REDACTED_THINKING else "signature"
                    violations.append(
                        Violation(
                            index,
                            REASONING_UNSENDABLE,
                            f"reasoning[{number}] ({part.kind}) has no {what}",
                        )
                    )
    users = [i for i, m in seen if isinstance(m, UserMessage)]
    start = users[-1] if users else -1
    loop = [(i, m) for i, m in replies if i > start and m.tool_requests]
    for index, reply in loop:
        if reply.metadata.get(REASONING_LOST_KEY):
            violations.append(
                Violation(
                    index,
                    REASONING_MISSING,
                    "the reasoning of this AI message's calls was cut off before it was complete",
                )
            )
    if anthropic:
        thinking_on = any(
            part.provider == ANTHROPIC and part.kind in (THINKING, REDACTED_THINKING)
            for _, reply in replies
            for part in reply.reasoning
        )
        if thinking_on and loop:
            index, first = loop[0]
            head = [p for p in first.reasoning if p.before_call is None]
            if not any(p.provider == ANTHROPIC for p in head):
                violations.append(
                    Violation(
                        index,
                        REASONING_MISSING,
                        "thinking is on, and the AI message opening the tool loop in progress "
                        "does not start with a thinking block",
                    )
                )
        return violations
    with_content = any(p.kind == REASONING_CONTENT for _, r in replies for p in r.reasoning)
    for index, reply in loop if with_content else []:
        if not any(p.kind == REASONING_CONTENT for p in reply.reasoning):
            violations.append(
                Violation(
                    index,
                    REASONING_MISSING,
                    "the list carries reasoning_content, and this AI message of the tool loop "
                    "in progress has none",
                )
            )
    return violations
