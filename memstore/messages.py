"""The canonical message model: what memstore stores and what every format converts from.

>>> from memstore import AiMessage, ToolRequest, ToolResult, UserMessage
>>> turn = [
...     UserMessage(text="Create a.txt"),
...     AiMessage(text=None, tool_requests=[
...         ToolRequest(id="call_1", name="write_file", arguments='{"path": "a.txt"}')]),
...     ToolResult(id="call_1", tool_name="write_file", text="ok"),
...     AiMessage(text="Done."),
... ]

Construction errors raise :class:`~memstore.errors.InvalidMessageError` (a
:class:`~memstore.errors.MemstoreError`), not pydantic's ``ValidationError``, so one ``except``
covers every input problem.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from memstore.errors import InvalidMessageError


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "message"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        # Converting here rather than in a wrap validator keeps decoding (which validates
        # thousands of stored messages) free of a Python call per model.
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise InvalidMessageError(
                f"invalid {type(self).__name__}: {_describe(error)}"
            ) from error


class ToolRequest(_Model):
    """One tool call requested by the model.

    ``arguments`` is the model's raw JSON text, stored and returned byte for byte; memstore
    never parses-and-reserialises it.
    """

    id: StrictStr = Field(min_length=1)
    name: StrictStr = Field(min_length=1)
    arguments: StrictStr


class UserMessage(_Model):
    """A message from the person (or the calling program) to the model."""

    type: Literal["user"] = "user"
    text: StrictStr
    metadata: dict[str, Any] = Field(default_factory=dict)


class SystemMessage(_Model):
    """An instruction message. Stored in the original history, never in the display history."""

    type: Literal["system"] = "system"
    text: StrictStr
    metadata: dict[str, Any] = Field(default_factory=dict)


class AiMessage(_Model):
    """A model reply: text, tool requests (parallel calls keep their order), or both."""

    type: Literal["ai"] = "ai"
    text: StrictStr | None = None
    tool_requests: list[ToolRequest] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_shape(self) -> AiMessage:
        requests = self.tool_requests
        if not requests:
            if self.text is None:
                raise InvalidMessageError(
                    "invalid AiMessage: needs text or at least one tool request"
                )
        elif len(requests) > 1 and len({request.id for request in requests}) != len(requests):
            ids = [request.id for request in requests]
            raise InvalidMessageError(f"invalid AiMessage: duplicate tool call ids in {ids}")
        return self

    @property
    def has_tool_requests(self) -> bool:
        return bool(self.tool_requests)


class ToolResult(_Model):
    """The outcome of one tool call; ``id`` is the id of the :class:`ToolRequest` it answers."""

    type: Literal["tool_result"] = "tool_result"
    id: StrictStr = Field(min_length=1)
    tool_name: StrictStr
    text: StrictStr
    is_error: StrictBool = False
    metadata: dict[str, Any] = Field(default_factory=dict)


Message: TypeAlias = Annotated[
    UserMessage | AiMessage | ToolResult | SystemMessage, Field(discriminator="type")
]
"""Any canonical message; the ``type`` field tells which."""

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGE_LIST_ADAPTER: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def parse_message(value: Any) -> Message:
    """Accept a message instance or its dict form; raise ``InvalidMessageError`` otherwise."""
    if isinstance(value, (UserMessage, AiMessage, ToolResult, SystemMessage)):
        return value
    if not isinstance(value, dict):
        raise InvalidMessageError(
            f"expected a memstore message or a dict, got {type(value).__name__}"
        )
    kind = value.get("type")
    if kind not in ("user", "ai", "tool_result", "system"):
        raise InvalidMessageError(
            f"unknown message type {kind!r}; expected 'user', 'ai', 'tool_result' or 'system'"
        )
    try:
        return MESSAGE_ADAPTER.validate_python(value)
    except ValidationError as error:
        raise InvalidMessageError(f"invalid {kind} message: {_describe(error)}") from error
