"""Call fingerprints and the no-progress decision of the loop guard, as pure functions.

A tool call's fingerprint is its tool name, its arguments in canonical form and a digest of
the result it produced. The loop guard (:mod:`memstore.guard`) reads the newest rows of an
app's original history and asks :func:`decide_no_progress` whether the next call would only
repeat calls whose results showed no change.

**Canonical arguments** (:func:`canonical_arguments`) are the arguments' JSON with

* object members sorted by key (code point order, recursively; members with a repeated key are
  all kept, in their original relative order — nothing is dropped),
* no insignificant whitespace (``,`` and ``:`` separators, nothing around them),
* strings re-escaped one way (``json.dumps(..., ensure_ascii=False)``): ``"\\u00e9"`` and
  ``"é"`` are the same string, and so the same canonical text,
* numbers kept **as the literal text the model wrote**: they are never converted to ``int`` or
  ``float`` and back. ``1.0`` and ``1``, ``1e2`` and ``100``, ``-0`` and ``0`` stay different,
  and big or very precise numbers (``12345678901234567890123``, ``0.10000000000000000001``)
  keep every digit. A parse-then-dump round trip would have merged some of them and split none,
  so keeping the literal never makes two different argument values look alike. The price: the
  same value spelled two ways counts as two different calls (which only ever *allows* a call),
* ``true``, ``false``, ``null`` and the order of array elements kept as they are.

Text that is not JSON (truncated arguments, ``NaN``/``Infinity``, nesting deeper than the
parser allows) is its own canonical form, byte for byte: it cannot equal the canonical form of
any JSON text, since that is always valid JSON.

**Digests** are SHA-256 hex digests of the UTF-8 text (lone surrogates encoded with
``surrogatepass``, so every Python string has one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memstore.core.check import REPAIR_MARK
from memstore.core.crypto import PLAIN, RowCipher
from memstore.core.rows import TOOL_REQUEST, TOOL_RESULT, USER, decode_row
from memstore.core.strict_json import reject_constant
from memstore.core.window import SYNTHETIC_MARK, StoredMessage
from memstore.messages import AiMessage, ToolResult, UserMessage

GUARD_MARK = "memstore_guard"
"""Metadata key of the tool results made from guard verdicts; its value is the status."""

BLOCKING_STATUSES = frozenset({"blocked_no_progress", "blocked_budget", "human_review_required"})
"""Verdict statuses that mean the tool did not run."""

_IDEMPOTENCY_SCHEME = "memstore.idempotency.v1"
IDEMPOTENCY_PREFIX = "sha256:"
"""Derived idempotency keys are ``sha256:<64 hex digits>``."""


# -- canonical arguments ------------------------------------------------------------------------


class _Number:
    """A JSON number literal, kept as written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _Object(list[tuple[str, Any]]):
    """A JSON object as its (key, value) members in the order written (repeated keys kept).
    Arrays stay plain lists, so ``{}`` and ``[]`` remain different."""


_DECODER = json.JSONDecoder(
    object_pairs_hook=_Object,
    parse_float=_Number,
    parse_int=_Number,
    parse_constant=reject_constant,
)


def _string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _first_item(pair: tuple[str, Any]) -> str:
    return pair[0]


def _emit(value: Any, out: list[str]) -> None:
    if isinstance(value, _Number):
        out.append(value.text)
    elif isinstance(value, str):
        out.append(_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, _Object):
        out.append("{")
        for index, (key, member) in enumerate(sorted(value, key=_first_item)):  # stable sort
            if index:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _emit(member, out)
        out.append("}")
    else:
        out.append("[")
        for index, element in enumerate(value):
            if index:
                out.append(",")
            _emit(element, out)
        out.append("]")


def canonical_arguments(arguments: str) -> str:
    """The canonical form of a tool call's arguments (see the module docstring).

    >>> canonical_arguments('{ "b": [1.0, 2], "a": {"y": null, "x": "\\u00e9"} }')
    '{"a":{"x":"é","y":null},"b":[1.0,2]}'
    """
    try:
        out: list[str] = []
        _emit(_DECODER.decode(arguments), out)
    except (ValueError, RecursionError):
        return arguments  # not JSON: the text itself, byte for byte
    return "".join(out)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _tuple_text(*parts: str) -> str:
    """An unambiguous text of several strings (a compact JSON array)."""
    return json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


def arguments_digest(arguments: str) -> str:
    """SHA-256 hex digest of the canonical arguments."""
    return _sha256(canonical_arguments(arguments))


def result_digest(text: str) -> str:
    """SHA-256 hex digest of a tool result's text."""
    return _sha256(text)


@dataclass(frozen=True, slots=True)
class CallFingerprint:
    """What identifies one executed tool call for the loop guard."""

    tool_name: str
    arguments_digest: str
    result_digest: str

    @property
    def digest(self) -> str:
        """One SHA-256 hex digest of all three parts."""
        return _sha256(_tuple_text(self.tool_name, self.arguments_digest, self.result_digest))


def call_fingerprint(tool_name: str, arguments: str, result_text: str) -> CallFingerprint:
    """The fingerprint of one call: tool name, canonical arguments digest, result digest."""
    return CallFingerprint(tool_name, arguments_digest(arguments), result_digest(result_text))


def idempotency_key(app_id: str, tool_name: str, arguments: str) -> str:
    """The derived idempotency key of a side-effecting call: ``sha256:`` and the digest of the
    app, the tool and the canonical arguments (so whitespace or key order never make a second
    key for the same call)."""
    text = _tuple_text(_IDEMPOTENCY_SCHEME, app_id, tool_name, canonical_arguments(arguments))
    return IDEMPOTENCY_PREFIX + _sha256(text)


# -- the original history as tool rounds ---------------------------------------------------------


def is_guard_result(result: ToolResult) -> bool:
    """True for a result that says the tool did *not* run: a blocking guard verdict (marked
    with :data:`GUARD_MARK`, or an error result whose text is a blocking verdict's JSON), a
    loader's synthetic interrupted result or a ``check --repair`` interrupted result."""
    marked = result.metadata.get(GUARD_MARK)
    if marked is not None:
        return marked in BLOCKING_STATUSES
    if SYNTHETIC_MARK in result.metadata or REPAIR_MARK in result.metadata:
        return True
    if not result.is_error or not result.text.startswith('{"status"'):
        return False
    try:
        data = json.loads(result.text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("status") in BLOCKING_STATUSES and "action" in data


@dataclass(frozen=True, slots=True)
class PastCall:
    """One tool call of the history that ran and has a real result."""

    call_id: str
    tool_name: str
    arguments: str
    """The raw arguments text, as stored."""
    result: str


@dataclass(slots=True)
class ToolRound:
    """The tool calls of one AI message (one model call), in request order.

    ``calls`` holds the calls that ran (they have a real result); ``skipped`` the tool names
    and raw arguments of the calls that did not: no result stored yet (the current round, a
    crash) or a blocking guard verdict as their result.
    """

    row_id: int
    calls: list[PastCall] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def recent_rounds(rows: Sequence[StoredMessage]) -> list[ToolRound]:
    """The tool rounds of ``rows`` (chronological) after their last user message, oldest first.

    A user message starts a new turn: repeating a call the person asked for again is progress
    by definition, so rounds before it are never looked at. A result binds to the newest
    request with its call id; a second result for one call is ignored (like the loader).
    """
    start = 0
    for index in range(len(rows) - 1, -1, -1):
        if isinstance(rows[index].message, UserMessage):
            start = index + 1
            break
    pending: dict[str, tuple[int, str, str]] = {}  # call id -> (round index, name, arguments)
    results: dict[tuple[int, str], ToolResult] = {}
    rounds: list[tuple[int, AiMessage]] = []
    for row in rows[start:]:
        message = row.message
        if isinstance(message, AiMessage) and message.tool_requests:
            for call in message.tool_requests:
                pending[call.id] = (len(rounds), call.name, call.arguments)
            rounds.append((row.id, message))
        elif isinstance(message, ToolResult):
            owner = pending.get(message.id)
            if owner is not None:
                results.setdefault((owner[0], message.id), message)
    out: list[ToolRound] = []
    for index, (row_id, message) in enumerate(rounds):
        tool_round = ToolRound(row_id)
        for call in message.tool_requests:
            result = results.get((index, call.id))
            if result is None or is_guard_result(result):
                tool_round.skipped.append((call.name, call.arguments))
            else:
                tool_round.calls.append(PastCall(call.id, call.name, call.arguments, result.text))
        out.append(tool_round)
    return out


# -- the no-progress decision --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoProgressDecision:
    """The outcome of :func:`decide_no_progress`."""

    blocked: bool
    repeats: int
    """Identical calls found in a row (counted up to the configured repeat)."""
    checkpoint_id: int | None
    """Id of the newest original-history row read (``None`` when the app has none)."""
    result_digests: tuple[str, ...] = ()
    """Result digests of the counted calls, newest first."""


def decide_no_progress(
    rows: Sequence[StoredMessage],
    tool_name: str,
    arguments: str,
    max_identical_repeats: int,
) -> NoProgressDecision:
    """Would calling ``tool_name`` with ``arguments`` now only repeat calls that made no progress?

    ``rows`` are the newest original-history rows of the app, chronological. Walking the tool
    rounds of the current turn (see :func:`recent_rounds`) from the newest back, a round that
    ran the same tool with the same canonical arguments counts (each such call in it counts);
    a round that ran only other calls ends the run ("in a row"); a round where the identical
    call did not run (no result yet, or blocked by the guard) is passed over. The call is
    blocked when at least ``max_identical_repeats`` identical calls are in the run and the
    newest ``max_identical_repeats`` of them all returned the same result (same digest).
    Changed arguments, another tool in between, a user message in between, or an identical call
    whose last result differed from the one before are allowed.
    """
    if max_identical_repeats < 1:
        raise ValueError("max_identical_repeats must be at least 1")
    checkpoint = rows[-1].id if rows else None
    canonical: str | None = None

    def same(call_name: str, call_arguments: str) -> bool:
        nonlocal canonical
        if call_name != tool_name:
            return False
        if call_arguments == arguments:
            return True
        if canonical is None:
            canonical = canonical_arguments(arguments)
        return canonical_arguments(call_arguments) == canonical

    run: list[PastCall] = []
    for tool_round in reversed(recent_rounds(rows)):
        matching = [call for call in tool_round.calls if same(call.tool_name, call.arguments)]
        if not matching:
            if any(same(name, args) for name, args in tool_round.skipped):
                continue  # the identical call was requested here but did not run
            if tool_round.calls:
                break  # other calls ran in between: not "in a row"
            continue  # nothing ran in this round
        run.extend(reversed(matching))
        if len(run) >= max_identical_repeats:
            break
    counted = run[:max_identical_repeats]
    digests = tuple(result_digest(call.result) for call in counted)
    blocked = len(counted) == max_identical_repeats and len(set(digests)) == 1
    return NoProgressDecision(blocked, len(counted), checkpoint, digests)


def decide_from_newest_rows(
    rows: Iterable[tuple[int, str, str]],
    tool_name: str,
    arguments: str,
    max_identical_repeats: int,
    *,
    cipher: RowCipher = PLAIN,
    app_id: str = "",
) -> NoProgressDecision:
    """:func:`decide_no_progress` over raw ``(id, message_type, payload)`` rows of the
    original history of ``app_id``, newest first (what one indexed query returns); stored
    payloads are opened by ``cipher``.

    Only what the decision can use is decoded: the tool-request and tool-result rows newer than
    the newest user message. ``checkpoint_id`` is the newest row's id, whatever its type.
    """
    checkpoint: int | None = None
    wanted: list[StoredMessage] = []
    for row_id, message_type, payload in rows:
        if checkpoint is None:
            checkpoint = row_id
        if message_type == USER:
            break
        if message_type in (TOOL_REQUEST, TOOL_RESULT):
            wanted.append(StoredMessage(row_id, decode_row(cipher, app_id, row_id, payload)))
    wanted.reverse()
    decision = decide_no_progress(wanted, tool_name, arguments, max_identical_repeats)
    return replace(decision, checkpoint_id=checkpoint)
