"""Provider formats: convert canonical messages to and from what model APIs and frameworks use.

>>> from memstore.formats import from_openai, to_anthropic, to_openai, validate
>>> from memstore.messages import AiMessage, ToolRequest, ToolResult, UserMessage
>>> window = [
...     UserMessage(text="Create a.txt"),
...     AiMessage(text=None, tool_requests=[
...         ToolRequest(id="call_1", name="write_file", arguments='{"path": "a.txt"}')]),
...     ToolResult(id="call_1", tool_name="write_file", text="ok"),
... ]
>>> validate(window, "openai"), validate(window, "anthropic")
([], [])
>>> openai_messages = to_openai(window)          # client.chat.completions.create(messages=...)
>>> system, anthropic_messages = to_anthropic(window)   # client.messages.create(system=...)
>>> from_openai(openai_messages) == window
True

* :mod:`memstore.formats.openai`: :func:`to_openai` / :func:`from_openai`, Chat Completions
  message dicts;
* :mod:`memstore.formats.anthropic`: :func:`to_anthropic` (an :class:`AnthropicRequest`, i.e.
  ``(system, messages)``) / :func:`from_anthropic`, and :func:`merge_turns`;
* :mod:`memstore.formats.langchain4j`: :func:`to_langchain4j` (parsed dicts),
  :func:`to_langchain4j_json` (the JSON text) / :func:`from_langchain4j` (either), LangChain4j's
  ``ChatMessageSerializer`` format;
* :mod:`memstore.formats.responses`: :func:`to_responses` / :func:`from_responses`, OpenAI
  Responses ``input`` items, reasoning items included;
* :func:`validate` (the same function as :func:`memstore.core.validate.validate`): the ordering
  problems OpenAI or Anthropic would reject a canonical list for, ``[]`` when it is sendable.

Every ``to_*`` takes canonical messages or their dict form; every ``from_*`` returns canonical
messages. What each format cannot carry (and so what a round trip loses) is listed in its
module's docstring. Reasoning (:class:`~memstore.messages.Reasoning`) is sent only to the
provider that produced it, and each ``to_*`` that can send it takes ``reasoning="all" |
"current" | "none"`` (:data:`REASONING_SCOPES`). Input a converter cannot take raises
:class:`~memstore.errors.FormatConversionError` (an ``InvalidMessageError``) with the format in
``.provider`` and the offending message's position in ``.index``.
"""

from memstore.core.validate import Provider, Violation, validate
from memstore.errors import FormatConversionError
from memstore.formats._common import PARTICIPANT_NAME_KEY, REASONING_SCOPES, ReasoningScope
from memstore.formats.anthropic import AnthropicRequest, from_anthropic, merge_turns, to_anthropic
from memstore.formats.langchain4j import (
    THINKING_KEY,
    from_langchain4j,
    to_langchain4j,
    to_langchain4j_json,
)
from memstore.formats.openai import from_openai, to_openai
from memstore.formats.responses import from_responses, to_responses

__all__ = [
    "PARTICIPANT_NAME_KEY",
    "REASONING_SCOPES",
    "THINKING_KEY",
    "AnthropicRequest",
    "FormatConversionError",
    "Provider",
    "ReasoningScope",
    "Violation",
    "from_anthropic",
    "from_langchain4j",
    "from_openai",
    "from_responses",
    "merge_turns",
    "to_anthropic",
    "to_langchain4j",
    "to_langchain4j_json",
    "to_openai",
    "to_responses",
    "validate",
]
