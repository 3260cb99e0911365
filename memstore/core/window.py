"""Window assembly and the edge check, as pure functions over stored rows.

The loader hands :func:`select_window` the newest rows of an app (chronological, a small
look-ahead beyond ``max_messages``); it answers with the window the model gets and whether
older rows are needed to complete a tool group that reaches past the rows it was given.

Guarantees of every returned window, whatever the rows hold:

* it never starts with a tool result; a tool group (an AI message with tool requests plus the
  results of those requests) is either wholly inside or wholly outside;
* each tool result directly follows the AI message holding its request, with only results of
  that group in between; results stored late (after other messages) are moved up to it;
* every request is answered; a request without a stored result gets a synthetic error result
  (:func:`interrupted_result`), never a fake success;
* results whose request does not exist (legacy orphans) and repeated results for an already
  answered call are skipped and counted;
* no call id appears in two requests: when a model reused a call id, the window starts just
  after the older group holding it (both providers reject duplicate call ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from memstore.core.summary import is_summary
from memstore.messages import AiMessage, Message, SystemMessage, ToolResult, UserMessage

SYNTHETIC_MARK = "memstore_synthetic"
INTERRUPTED_TEXT = (
    "Tool call was interrupted before its result was recorded; it may or may not have run. "
    "Check the current state before calling it again."
)


class StoredMessage(NamedTuple):
    """A message with the snowflake id of its row in the original history.

    A named tuple: immutable, and built in a third of a frozen dataclass's time (the loader
    builds one per decoded row)."""

    id: int
    message: Message


@dataclass(slots=True)
class WindowStats:
    """What the edge check did while building a window."""

    widened_groups: int = 0
    """Tool groups that made the window reach back past ``max_messages``."""
    interrupted_answered: int = 0
    """Requests without a stored result, answered with a synthetic interrupted result."""
    orphans_skipped: int = 0
    """Results whose request does not exist, left out."""
    duplicate_results_skipped: int = 0
    """Second and later results for an already answered call id, left out."""
    tokens: int | None = None
    """Tokens of the window by the store's counter, when a token budget applied."""
    oversize: bool = False
    """The newest unit (a tool group or one message) alone exceeded the token budget, so the
    window is that unit alone."""
    truncated_results: int = 0
    """Results of an oversized group cut to fit (``oversize="truncate-results"``)."""


@dataclass(slots=True)
class Window:
    """The outcome of :func:`select_window`."""

    messages: list[Message]
    stats: WindowStats
    needs_older_rows: bool = False
    """True when older rows could change the window: a result inside it may belong to a request
    older than the rows given, or the rows ran out before the window was full."""
    synthetic_call_ids: list[str] = field(default_factory=list)
    """Call ids answered by a synthetic interrupted result."""
    ids: list[int] = field(default_factory=list)
    """The row id of each message (a synthetic result: its request's id; a summary: its
    row's id), parallel to ``messages`` when the window came from rows."""


def interrupted_result(request_id: str, tool_name: str) -> ToolResult:
    """The synthetic answer to a request whose result was never stored."""
    return ToolResult(
        id=request_id,
        tool_name=tool_name,
        text=INTERRUPTED_TEXT,
        is_error=True,
        metadata={SYNTHETIC_MARK: "interrupted"},
    )


def is_synthetic(message: Message) -> bool:
    """True for results the loader made up (interrupted calls); they are never stored."""
    return isinstance(message, ToolResult) and SYNTHETIC_MARK in message.metadata


class _Group:
    """A request and the results bound to it so far (call id -> result and its row id)."""

    __slots__ = ("call_ids", "request", "request_id", "results")

    def __init__(self, request: AiMessage, request_id: int, call_ids: tuple[str, ...]) -> None:
        self.request = request
        self.request_id = request_id
        self.call_ids = call_ids
        self.results: dict[str, tuple[ToolResult, int]] = {}

    def messages(self, synthetic: list[str], ids: list[int] | None = None) -> list[Message]:
        out: list[Message] = [self.request]
        results = self.results
        if ids is None:
            out.extend(result for result, _ in results.values())
        else:
            ids.append(self.request_id)
            for result, row_id in results.values():
                out.append(result)
                ids.append(row_id)
        if len(results) != len(self.call_ids):  # results bind to this request's ids only
            for call in self.request.tool_requests:
                if call.id not in results:
                    out.append(interrupted_result(call.id, call.name))
                    synthetic.append(call.id)
                    if ids is not None:
                        ids.append(self.request_id)
        return out


# A unit is the smallest piece a window may hold: one plain message, one whole tool group,
# or a result whose request is not among the rows (resolved later or dropped as an orphan).
_Unit = UserMessage | AiMessage | ToolResult | SystemMessage | _Group

_PLAIN, _AI, _RESULT = 0, 1, 2
_ROLES: dict[type, int] = {
    UserMessage: _PLAIN,
    SystemMessage: _PLAIN,
    AiMessage: _AI,
    ToolResult: _RESULT,
}
"""The edge check's view of each message class (subclasses are added on first sight)."""


def _role(message: Message) -> int:
    """The role of a message whose class :data:`_ROLES` does not hold yet (a subclass),
    remembered for the next one."""
    if isinstance(message, ToolResult):
        role = _RESULT
    elif isinstance(message, AiMessage):
        role = _AI
    else:
        role = _PLAIN
    _ROLES[type(message)] = role
    return role


def _assemble(rows: Sequence[StoredMessage], stats: WindowStats) -> list[tuple[_Unit, bool, int]]:
    """Turn chronological rows into units; the flag marks results with no request in ``rows``;
    the int is the unit's row id (a group's: its request's)."""
    units: list[tuple[_Unit, bool, int]] = []
    add = units.append
    open_requests: dict[str, _Group] = {}
    roles = _ROLES
    for row_id, message in rows:
        role = roles.get(type(message))
        if role is None:
            role = _role(message)
        if role == _RESULT:
            call_id = message.id  # type: ignore[union-attr]
            group = open_requests.get(call_id)
            if group is None:
                add((message, True, row_id))
            elif call_id in group.results:
                stats.duplicate_results_skipped += 1
            else:
                group.results[call_id] = (message, row_id)  # type: ignore[assignment]
        elif role == _AI and message.tool_requests:  # type: ignore[union-attr]
            call_ids = tuple(call.id for call in message.tool_requests)  # type: ignore[union-attr]
            group = _Group(message, row_id, call_ids)  # type: ignore[arg-type]
            for call_id in call_ids:
                open_requests[call_id] = group  # a reused id binds to its latest request
            add((group, False, row_id))
        else:
            add((message, False, row_id))
    return units


def select_window(
    rows: Sequence[StoredMessage],
    max_messages: int,
    *,
    start_at_user: bool = False,
    history_complete: bool = True,
    max_tokens: int | None = None,
    count_tokens: Callable[[Message], int] | None = None,
) -> Window:
    """Choose the newest ``max_messages`` messages of ``rows`` (chronological) with the edge check.

    ``history_complete`` says that no rows older than ``rows`` can hold a request for the
    results in ``rows`` (the app's history starts there, or the older rows were already
    searched); then results without a request are orphans. Otherwise such a result inside the
    window, or rows too few to fill the window, set ``needs_older_rows`` and the caller should
    retry with older rows prepended. The window may exceed ``max_messages`` by the size of its
    oldest tool group; it starts after a group whose call id a newer group reuses.

    With ``max_tokens`` (and ``count_tokens``, the per-message count), the window also holds
    only the newest whole units whose counts sum to at most ``max_tokens``: the first unit
    that does not fit ends it (no older unit is taken past it, so the window stays a
    suffix). A unit that does not fit alone while the window is empty is taken alone (a
    window is never empty) and ``stats.oversize`` says so. A tool group counts with the
    synthetic results that answer its unanswered requests.
    """
    if max_messages < 1:
        raise ValueError("max_messages must be at least 1")
    if max_tokens is not None and (max_tokens < 1 or count_tokens is None):
        raise ValueError("max_tokens must be at least 1 and needs count_tokens")
    stats = WindowStats()
    units = _assemble(rows, stats)

    chosen: list[tuple[_Unit, int]] = []
    chosen_call_ids: set[str] = set()
    total = 0
    tokens = 0
    needs_older = False
    for unit, unresolved, row_id in reversed(units):
        if total >= max_messages:
            break
        if unresolved:
            if not history_complete:
                needs_older = True
            stats.orphans_skipped += 1
            continue
        size = 1
        if type(unit) is _Group:
            call_ids = unit.call_ids
            if not chosen_call_ids.isdisjoint(call_ids):
                break  # a newer group reuses a call id; providers reject duplicate ids
            chosen_call_ids.update(call_ids)
            size = 1 + len(call_ids)
        if max_tokens is not None and count_tokens is not None:
            cost = _unit_tokens(unit, count_tokens)
            if chosen and tokens + cost > max_tokens:
                break  # the budget is full: older units would leave a gap
            if not chosen and cost > max_tokens:
                stats.oversize = True
            tokens += cost
        if total + size > max_messages:
            stats.widened_groups += 1
        chosen.append((unit, row_id))
        total += size
    else:
        if not history_complete and total < max_messages:
            needs_older = True  # the rows ran out before the window was full
    chosen.reverse()

    if start_at_user:
        first_user = next(
            (i for i, (unit, _) in enumerate(chosen) if isinstance(unit, UserMessage)),
            len(chosen),
        )
        chosen = chosen[first_user:]

    synthetic: list[str] = []
    messages: list[Message] = []
    ids: list[int] = []
    for unit, row_id in chosen:
        if type(unit) is _Group:
            messages.extend(unit.messages(synthetic, ids))
        else:
            messages.append(unit)  # type: ignore[arg-type]
            ids.append(row_id)
    stats.interrupted_answered += len(synthetic)
    if max_tokens is not None and count_tokens is not None:
        stats.tokens = sum(count_tokens(m) for m in messages)
    return Window(messages, stats, needs_older, synthetic, ids)


def _unit_tokens(unit: _Unit, count_tokens: Callable[[Message], int]) -> int:
    if isinstance(unit, _Group):
        return sum(count_tokens(m) for m in unit.messages([]))
    return count_tokens(unit)


def token_window(
    messages: Sequence[Message],
    max_tokens: int,
    count_tokens: Callable[[Message], int],
    *,
    start_at_user: bool = False,
) -> Window:
    """The newest whole units of an already edge-checked window (a cached one) that fit
    ``max_tokens``, by the rules of :func:`select_window`. A leading summary stays and
    counts toward the budget (see :func:`with_summary`)."""
    summary = messages[0] if messages and is_summary(messages[0]) else None
    tail = messages[1:] if summary is not None else messages
    rows = [StoredMessage(index + 1, message) for index, message in enumerate(tail)]
    reserved = 0 if summary is None else count_tokens(summary)
    window = select_window(
        rows,
        max(1, len(rows)),
        start_at_user=start_at_user,
        max_tokens=max(1, max_tokens - reserved),
        count_tokens=count_tokens,
    )
    return window if summary is None else with_summary(window, summary, 0, count_tokens)


def with_summary(
    window: Window,
    summary: Message | None,
    summary_id: int,
    count_tokens: Callable[[Message], int] | None,
) -> Window:
    """``window`` (the units after a summary's covered range) opened by ``summary``.

    The summary counts toward both bounds: callers select the tail with one message fewer
    and the summary's tokens taken off the budget (at least one message and one token
    remain: the newest unit is always there, alone when even it does not fit).
    """
    if summary is None:
        return window
    stats = window.stats
    if stats.tokens is not None and count_tokens is not None:
        stats.tokens += count_tokens(summary)
    return Window(
        [summary, *window.messages],
        stats,
        window.needs_older_rows,
        window.synthetic_call_ids,
        [summary_id, *window.ids],
    )


# --- cache windows ---------------------------------------------------------------------------
# A cached window is a list of entries; each entry knows its kind so eviction can keep tool
# groups whole without decoding messages. The Redis Lua scripts implement the same rules.

KIND_USER = "U"
KIND_SYSTEM = "S"
KIND_AI = "A"
KIND_REQUEST = "R"
KIND_RESULT = "T"
KIND_SUMMARY = "M"
"""A summary opening the window: never evicted, counts toward both bounds."""


class WindowEntry(NamedTuple):
    """One message of a cached window with what eviction and appends need to know of it.

    A named tuple (immutable; built per message of every window a cache stores, in a third
    of a frozen dataclass's time)."""

    kind: str
    call_ids: tuple[str, ...]
    message: Message
    tokens: int = 0
    """The message's token count (0 when the cache has no token budget)."""
    body: str | None = None
    """The message's JSON when it is at hand (the payload of the row it was read from, which
    decodes to it), so storing the entry need not encode it again."""


def entry_for(message: Message, tokens: int = 0, body: str | None = None) -> WindowEntry:
    """Classify ``message`` for a cached window."""
    if isinstance(message, ToolResult):
        return WindowEntry(KIND_RESULT, (message.id,), message, tokens, body)
    if isinstance(message, AiMessage):
        if message.tool_requests:
            ids = tuple(c.id for c in message.tool_requests)
            return WindowEntry(KIND_REQUEST, ids, message, tokens, body)
        return WindowEntry(KIND_AI, (), message, tokens, body)
    if is_summary(message):  # a system or user message
        return WindowEntry(KIND_SUMMARY, (), message, tokens, body)
    if isinstance(message, SystemMessage):
        return WindowEntry(KIND_SYSTEM, (), message, tokens, body)
    return WindowEntry(KIND_USER, (), message, tokens, body)


def token_drop(kinds: Sequence[str], tokens: Sequence[int], max_tokens: int) -> int:
    """How many entries to drop from the front so the rest are the newest whole units (a
    message, or a request with the results after it) whose tokens fit ``max_tokens``; the
    newest unit is kept even when it alone does not fit (as :func:`select_window`)."""
    start = len(kinds)
    total = 0
    index = len(kinds) - 1
    while index >= 0:
        first = index
        while first > 0 and kinds[first] == KIND_RESULT:
            first -= 1
        cost = sum(tokens[first : index + 1])
        if start < len(kinds) and total + cost > max_tokens:
            break
        total += cost
        start = first
        index = first - 1
    return start


def eviction_count(
    kinds: Sequence[str],
    max_messages: int,
    *,
    start_at_user: bool,
    tokens: Sequence[int] | None = None,
    max_tokens: int | None = None,
) -> int:
    """How many entries to drop from the front of a cached window after an append.

    The same rule as :func:`select_window`: keep the newest ``max_messages`` entries, and when
    the oldest kept entry is a tool result, keep its whole group (the window may exceed the
    limit by that group). A group is evicted whole or not at all, so the window never starts
    with a result, and a rebuild from SQL yields the same window. With ``max_tokens`` (and
    each entry's ``tokens``) the window also keeps only the newest whole units that fit
    (:func:`token_drop`). With ``start_at_user`` the window then starts at its first user
    message.

    A window opened by a summary (``kinds[0] == KIND_SUMMARY``) keeps it: the count is then
    of the entries right after it, chosen from the rest with one message fewer and the
    summary's tokens taken off the budget (as :func:`with_summary`).
    """
    if kinds and kinds[0] == KIND_SUMMARY:
        return eviction_count(
            kinds[1:],
            max(1, max_messages - 1),
            start_at_user=start_at_user,
            tokens=None if tokens is None else tokens[1:],
            max_tokens=None
            if max_tokens is None or tokens is None
            else max(1, max_tokens - tokens[0]),
        )
    drop = max(0, len(kinds) - max_messages)
    while 0 < drop < len(kinds) and kinds[drop] == KIND_RESULT:
        drop -= 1
    if max_tokens is not None and tokens is not None and kinds:
        drop = max(drop, token_drop(kinds, tokens, max_tokens))
    if start_at_user:
        while drop < len(kinds) and kinds[drop] != KIND_USER:
            drop += 1
    return drop


def summary_prefix(kinds: Sequence[str]) -> int:
    """1 when the window opens with a summary (the entries :func:`eviction_count` counts
    start after it), else 0."""
    return 1 if kinds and kinds[0] == KIND_SUMMARY else 0


def can_append_result(entries: Sequence[tuple[str, tuple[str, ...]]], call_id: str) -> str:
    """Decide how a cached window takes a new result for ``call_id``.

    Returns ``"append"`` when the window ends in the open group that requested it,
    ``"skip"`` when that group already holds a result for it (the loader keeps the first),
    and ``"invalidate"`` otherwise: the next read rebuilds the window from SQL, where the
    loader moves the result next to its request.
    """
    for kind, ids in reversed(entries):
        if kind == KIND_RESULT:
            if ids[0] == call_id:
                return "skip"
            continue
        if kind == KIND_REQUEST and call_id in ids:
            return "append"
        return "invalidate"
    return "invalidate"


def tail_group_missing(entries: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[str, ...]:
    """Call ids of the window's last tool group that have no result yet (tools still running,
    or the process died). Appending anything but their results must drop the window."""
    answered: set[str] = set()
    for kind, ids in reversed(entries):
        if kind == KIND_RESULT:
            answered.add(ids[0])
            continue
        if kind == KIND_REQUEST:
            return tuple(call_id for call_id in ids if call_id not in answered)
        return ()
    return ()


def answer_open_group(messages: list[Message]) -> list[Message]:
    """Answer the unanswered requests of a trailing tool group with interrupted results.

    A cached window may end with tools still running; what is handed to a model must not.
    The synthetic answers exist only in the returned list, never in the cache.
    """
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolResult):
            answered.add(message.id)
            continue
        if isinstance(message, AiMessage) and message.tool_requests:
            missing = [call for call in message.tool_requests if call.id not in answered]
            if not missing:
                return messages
            return messages + [interrupted_result(call.id, call.name) for call in missing]
        return messages
    return messages


def reuses_call_id(entries: Sequence[tuple[str, tuple[str, ...]]], call_ids: Sequence[str]) -> bool:
    """True when a new request reuses a call id the window already holds.

    The loader never puts two requests with one id in a window (providers reject it), so the
    cache drops such a window and lets the next read rebuild it.
    """
    wanted = set(call_ids)
    return any(
        kind in (KIND_REQUEST, KIND_RESULT) and wanted.intersection(ids) for kind, ids in entries
    )


def requests_of_results(entries: Sequence[tuple[str, tuple[str, ...]]]) -> list[int | None]:
    """For each entry (chronological), the index of the request entry its result answers.

    Plain entries and requests get ``None``; so do results whose call id no earlier request
    carries (legacy orphans). A result binds to the latest earlier request with its call id,
    as :func:`select_window` binds it (a reused call id belongs to its newest request).
    """
    latest: dict[str, int] = {}
    out: list[int | None] = []
    for index, (kind, ids) in enumerate(entries):
        if kind == KIND_RESULT:
            out.append(latest.get(ids[0]))
            continue
        if kind == KIND_REQUEST:
            for call_id in ids:
                latest[call_id] = index
        out.append(None)
    return out
