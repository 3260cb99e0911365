"""Google ADK events <-> memstore's canonical rows (no I/O).

The conversion rules are described in :mod:`memstore.adapters.google_adk`: each event becomes
rows carrying its fields and its own parts in ``metadata["google_adk"]``, and a window's rows
are regrouped into events; a memstore summary becomes ADK's compaction event.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.extras import needs_extra

with needs_extra(__name__, "google-adk"):
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions, EventCompaction
    from google.genai import types

from memstore.adapters._batch import distinct_requests, opaque
from memstore.core.metadata import thaw
from memstore.core.reasoning import GOOGLE, THOUGHT, THOUGHT_SIGNATURE
from memstore.core.window import is_synthetic
from memstore.messages import AiMessage, Message, Reasoning, ToolRequest, ToolResult, UserMessage

ADK_KEY = "google_adk"
"""The ``metadata`` key holding a row's event fields and its content parts."""

INTERRUPTED_EVENT_PREFIX = "memstore-interrupted-"
"""Event id prefix of the synthetic responses of calls whose response was never stored."""

SUMMARY_EVENT_PREFIX = "memstore-summary-"
"""Event id prefix of the compaction events made of memstore's summaries (then the row id)."""

__all__ = [
    "ADK_KEY",
    "INTERRUPTED_EVENT_PREFIX",
    "SUMMARY_EVENT_PREFIX",
    "event_to_messages",
    "history_app_id",
    "messages_to_events",
]


def history_app_id(app_name: str, user_id: str, session_id: str) -> str:
    """The memstore app id of a session's events."""
    digest = hashlib.sha256(json.dumps([app_name, user_id, session_id]).encode()).hexdigest()
    return f"adk-{digest[:48]}"


# -- events <-> canonical rows ---------------------------------------------------------------------


def _dumped(parts: list[Any], index: int, kind: str, field: str) -> Any:
    """A part's field as ADK serializes the event (``model_dump(mode="json")``: datetimes,
    decimals and bytes as strings), so what memstore stores is what ADK's own services store."""
    part = parts[index] if 0 <= index < len(parts) else None
    value = part.get(kind) if isinstance(part, dict) else None
    return value.get(field) if isinstance(value, dict) else None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _thoughts(parts: Sequence[types.Part], call_ids: Sequence[str] = ()) -> list[Reasoning]:
    """An event's Gemini reasoning, in order: thought parts (summary text, signature) and the
    thought signatures of function-call and text parts (a call's placed before that call). A
    thought after text or a call is placed before the next of ``call_ids`` (the AI row's
    requests); with none, everything stays at the head."""
    out: list[Reasoning] = []
    unplaced: list[int] = []
    seen_output = False
    for part in parts:
        signature = (
            base64.urlsafe_b64encode(part.thought_signature).decode("ascii")
            if part.thought_signature
            else None
        )
        call = part.function_call
        if part.thought:
            if part.text or signature:
                out.append(
                    Reasoning(
                        provider=GOOGLE, kind=THOUGHT, text=part.text or None, signature=signature
                    )
                )
                if seen_output:
                    unplaced.append(len(out) - 1)
            continue
        if call is not None and call.id in call_ids:
            for position in unplaced:
                out[position] = out[position].model_copy(update={"before_call": call.id})
            unplaced = []
            if signature:
                out.append(
                    Reasoning(
                        provider=GOOGLE,
                        kind=THOUGHT_SIGNATURE,
                        signature=signature,
                        before_call=call.id,
                    )
                )
        elif signature and part.text:
            out.append(Reasoning(provider=GOOGLE, kind=THOUGHT_SIGNATURE, signature=signature))
        seen_output = seen_output or call is not None or bool(part.text)
    return out


def event_to_messages(event: Event) -> list[Message]:
    """The canonical rows of one event, each carrying its parts in ``metadata``."""
    data = event.model_dump(mode="json", exclude_none=True)
    content = data.get("content")
    parts: list[Any] = content.pop("parts", []) if isinstance(content, dict) else []
    live = event.content.parts if event.content is not None and event.content.parts else []

    def meta(indexes: Sequence[int]) -> dict[str, Any]:
        return {ADK_KEY: {"event": data, "parts": [[i, parts[i]] for i in indexes]}}

    every = list(range(len(parts)))
    texts = [p.text for p in live if p.text and not p.thought]
    calls = [(i, p.function_call) for i, p in enumerate(live) if p.function_call is not None]
    responses = [
        (i, p.function_response) for i, p in enumerate(live) if p.function_response is not None
    ]
    if calls and all(call.id and call.name for _, call in calls):
        requests = distinct_requests(
            ToolRequest(
                id=call.id or "",
                name=call.name or "",
                arguments=_canonical(_dumped(parts, index, "function_call", "args") or {}),
            )
            for index, call in calls
        )
        return [
            AiMessage(
                text="".join(texts) or None,
                tool_requests=requests,
                reasoning=_thoughts(live, [request.id for request in requests]),
                metadata=meta(every),
            )
        ]
    if responses and all(response.id and response.name for _, response in responses):
        # one row per call id: a response repeating an id (parallel calls that share one)
        # rides in the first one's parts, so the event still comes back whole
        carried: dict[str, list[int]] = {}
        firsts: list[tuple[int, Any]] = []
        for index, response in responses:
            if response.id in carried:
                carried[response.id or ""].append(index)
            else:
                carried[response.id or ""] = []
                firsts.append((index, response))
        others = [i for i in every if i not in {index for index, _ in responses}]
        rows: list[Message] = []
        for n, (index, response) in enumerate(firsts):
            body = _dumped(parts, index, "function_response", "response") or {}
            own = [index, *carried[response.id or ""], *(others if n == 0 else [])]
            rows.append(
                ToolResult(
                    id=response.id or "",
                    tool_name=response.name or "",
                    text=_canonical(body),
                    is_error="error" in body,
                    metadata=meta(sorted(own)),
                )
            )
        return rows
    if texts:
        if event.author == "user":
            return [UserMessage(text="".join(texts), metadata=meta(every))]
        return [AiMessage(text="".join(texts), reasoning=_thoughts(live), metadata=meta(every))]
    return [opaque(meta(every))]


def latest_events(events: list[Event], count: int) -> list[Event]:
    """The latest ``count`` events, reaching back as far as needed so that no function
    response comes without the event of its call (as the window never starts inside a
    call / response pair)."""
    start = max(0, len(events) - count)
    called: set[str] = set()
    answered: set[str] = set()

    def take(event: Event) -> None:
        called.update(call.id for call in event.get_function_calls() if call.id)
        answered.update(r.id for r in event.get_function_responses() if r.id)

    for event in events[start:]:
        take(event)
    while start > 0 and not answered <= called:
        start -= 1
        take(events[start])
    return events[start:]


@dataclass
class _Building:
    event_id: str
    data: dict[str, Any]
    parts: dict[int, Any] = field(default_factory=dict)


def _interrupted(result: ToolResult, call: Event | None) -> Event:
    response = types.FunctionResponse(
        id=result.id, name=result.tool_name, response={"error": result.text}
    )
    return Event(
        id=f"{INTERRUPTED_EVENT_PREFIX}{result.id}",
        author=call.author if call is not None else "user",
        invocation_id=call.invocation_id if call is not None else "",
        content=types.Content(role="user", parts=[types.Part(function_response=response)]),
    )


def messages_to_events(messages: Sequence[Message]) -> list[Event]:
    """Regroup a window's rows into events; synthetic results become error response events
    (but not for long-running calls); rows written by other means are skipped."""
    pending: list[_Building | ToolResult] = []
    for message in messages:
        data = message.metadata.get(ADK_KEY)
        if isinstance(data, dict):
            event_id = data["event"].get("id", "")
            last = pending[-1] if pending else None
            if isinstance(last, _Building) and last.event_id == event_id:
                last.parts.update((index, part) for index, part in data["parts"])
            else:
                building = _Building(event_id, data["event"])
                building.parts.update((index, part) for index, part in data["parts"])
                pending.append(building)
        elif isinstance(message, ToolResult) and is_synthetic(message):
            pending.append(message)
    events: list[Event] = []
    callers: dict[str, Event] = {}
    for item in pending:
        if isinstance(item, ToolResult):
            caller = callers.get(item.id)
            if caller is not None and item.id in (caller.long_running_tool_ids or set()):
                continue
            events.append(_interrupted(item, caller))
            continue
        body = thaw(item.data)
        if isinstance(body.get("content"), dict):
            body["content"]["parts"] = [item.parts[i] for i in sorted(item.parts)]
        event = Event.model_validate(body)
        for call in event.get_function_calls():
            if call.id:
                callers[call.id] = event
        events.append(event)
    return events


def event_stamp(message: Message) -> float | None:
    """The timestamp of the event a row belongs to (``None``: not a row of this adapter)."""
    data = message.metadata.get(ADK_KEY)
    event = data.get("event") if isinstance(data, dict) else None
    stamp = event.get("timestamp") if isinstance(event, dict) else None
    return float(stamp) if isinstance(stamp, (int, float)) else None


def compaction_event(row_id: int, text: str | None, start: float, end: float) -> Event:
    """A memstore summary as ADK's compaction event (the shape ADK's own summarizer appends:
    author ``user``, no ``content``, the summary as model content in ``actions.compaction``)."""
    event_id = f"{SUMMARY_EVENT_PREFIX}{row_id}"
    compaction = EventCompaction(
        start_timestamp=start,
        end_timestamp=end,
        compacted_content=types.Content(role="model", parts=[types.Part(text=text or "")]),
    )
    return Event(
        id=event_id,
        invocation_id=event_id,
        author="user",
        timestamp=end,
        actions=EventActions(compaction=compaction),
    )


def stamp_bounds(stamps: Sequence[float | None]) -> tuple[float, float]:
    """The first and last known timestamps of the covered events (``0.0`` when none is
    known: a summary placed before every event rather than over one it does not cover)."""
    known = [stamp for stamp in stamps if stamp is not None]
    return (known[0], known[-1]) if known else (0.0, 0.0)
