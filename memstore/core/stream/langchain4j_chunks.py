"""LangChain4j-style chunks read as assembler operations: ``ai_response`` text,
``tool_request`` calls and ``tool_executed`` results (which may carry their request whole)."""

from __future__ import annotations

from memstore.core.stream.chunks import (
    Op,
    get,
    got,
    index_field,
    malformed,
    str_field,
)
from memstore.core.stream.state import State
from memstore.core.stream.text import join_parts

LANGCHAIN4J_TYPES = frozenset({"ai_response", "tool_request", "tool_executed"})


def langchain4j_ops(chunk: object, kind: str, state: State) -> list[Op]:
    """The operations of one LangChain4j-style chunk of type ``kind`` (one of
    :data:`LANGCHAIN4J_TYPES`), read against the turn's ``state``."""
    if kind == "ai_response":
        data = str_field(chunk, chunk, "data", required=True)
        return [("text", data)]
    call_id = str_field(chunk, chunk, "id", required=True)
    name = str_field(chunk, chunk, "name", required=False)
    arguments = str_field(chunk, chunk, "arguments", required=False)
    index = index_field(chunk, chunk, "index")
    current = state.current
    existing = current.by_id.get(call_id) if call_id else None
    if kind == "tool_request":
        if existing is not None:
            known = join_parts(existing.name_parts)
            if name and known and name != known:
                raise malformed(chunk, f"call {call_id!r} was named {known!r} before")
            return [("delta", existing.index, call_id, None if known else name, arguments or None)]
        if index is None:
            index = current.next_index
        return [("delta", index, call_id, name, arguments)]
    # tool_executed
    result = str_field(chunk, chunk, "result", required=True)
    is_error = get(chunk, "is_error")
    if is_error is None:
        is_error = False
    elif not isinstance(is_error, bool):
        raise malformed(chunk, f"is_error must be a bool, got {got(is_error)}")
    ops: list[Op] = []
    if (
        existing is None
        and call_id not in state.answered
        and name
        and arguments is not None
        and current.requests is None
    ):
        # the app did not stream the request: the executed chunk carries it whole
        ops.append(("delta", current.next_index, call_id, name, arguments))
    ops.append(("executed", call_id, result, is_error))
    return ops
