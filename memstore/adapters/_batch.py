"""Making a framework's batch appendable (no I/O): opaque rows for items the canonical model
cannot express, one request per call id, and tool results resolved against their requests.
Shared by every adapter (see :mod:`memstore.adapters._history`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memstore.messages import AiMessage, Message, SystemMessage, ToolRequest, ToolResult

OPAQUE_MARK = "memstore_opaque"
"""``metadata`` key set on opaque rows (:func:`opaque`); adapters skip other adapters' ones."""

__all__ = ["OPAQUE_MARK", "distinct_requests", "opaque", "resolve_results"]


def distinct_requests(requests: Iterable[ToolRequest]) -> list[ToolRequest]:
    """The requests with the first of each call id: parallel calls that share an id (some
    OpenAI-compatible servers send ``call_0`` for each) cannot all be answered by id, so an
    adapter keeps the others in its metadata copy only (the framework's message still comes
    back whole)."""
    seen: set[str] = set()
    out: list[ToolRequest] = []
    for request in requests:
        if request.id not in seen:
            seen.add(request.id)
            out.append(request)
    return out


# -- opaque rows -----------------------------------------------------------------------------------


def opaque(metadata: dict[str, Any]) -> SystemMessage:
    """The canonical row of a framework item the canonical model cannot express.

    An empty ``SystemMessage`` carrying the item in ``metadata`` (plus ``OPAQUE_MARK``): it
    round-trips through its adapter, other adapters skip it, it gets no display row, and in a
    window it is an empty system message, which :func:`memstore.core.validate.validate`
    accepts for both providers wherever it stands (an empty AI message would be an Anthropic
    ``empty_content`` violation, and a user message would put words in the user's mouth).
    """
    return SystemMessage(text="", metadata={**metadata, OPAQUE_MARK: True})


def resolve_results(messages: Sequence[Message], stored: Mapping[str, str]) -> list[Message]:
    """Make a batch appendable: every tool result answers a request, or becomes opaque.

    ``stored`` maps the call ids requested by rows already stored for the app to their tool
    names. A result whose ``tool_name`` is ``""`` gets the name of the request it answers (the
    latest earlier one in the batch, else the stored one); a result answering no request is
    replaced by :func:`opaque` with the same metadata.
    """
    names: dict[str, str] = {}
    out: list[Message] = []
    for message in messages:
        if isinstance(message, AiMessage):
            names.update((call.id, call.name) for call in message.tool_requests)
        elif isinstance(message, ToolResult):
            name = names.get(message.id, stored.get(message.id))
            if name is None:
                out.append(opaque(dict(message.metadata)))
                continue
            if not message.tool_name:
                message = message.model_copy(update={"tool_name": name})
        out.append(message)
    return out


def presumed_requests(messages: Sequence[Message], wanted: set[str]) -> dict[str, str] | None:
    """The stored requests a batch's results can be written against without looking them up.

    ``wanted``: the call ids of results answering no request of the batch. When each such
    result names its tool, the write itself checks that the requests exist (it raises
    :class:`~memstore.errors.UnknownToolCallError` and writes nothing otherwise), so the
    lookup only has to run after that error, to store the unanswered results opaquely: the
    mapping presumes every request found under the result's own name. ``None`` when there is
    nothing to presume (no such result) or a result needs its tool name filled in.
    """
    if not wanted:
        return None
    presumed: dict[str, str] = {}
    for message in messages:
        if isinstance(message, ToolResult) and message.id in wanted:
            if not message.tool_name:
                return None
            presumed[message.id] = message.tool_name
    return presumed
