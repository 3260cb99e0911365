"""A fake chat model that fails like a provider, and helpers for the LangChain agent tests.

:class:`ProviderLikeModel` is langchain-core's ``GenericFakeChatModel`` with a script of
replies; it records every request and raises :class:`ProviderRejected` on inputs a real
provider answers with a 400: a tool result without its call, a call without its results, and a
call id used twice.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from memstore import MemoryStore
from memstore.adapters.langchain import LANGCHAIN_KEY
from memstore.core.window import StoredMessage
from memstore.sql.admin import iter_history

Call = tuple[str, dict[str, Any]]
Step = str | list[Call]
"""A scripted reply: final text, or the tool calls of one AI message."""


class ProviderRejected(Exception):
    """What a provider's 400 would be."""


def check_like_provider(messages: Sequence[BaseMessage]) -> None:
    seen: set[str] = set()
    waiting: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in waiting:
                raise ProviderRejected(f"tool result {message.tool_call_id} without its call")
            waiting.remove(message.tool_call_id)
            continue
        if waiting:
            raise ProviderRejected(f"tool calls {waiting} without their results")
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call["id"] in seen:
                    raise ProviderRejected(f"duplicate tool call id {call['id']}")
                seen.add(str(call["id"]))
                waiting.append(str(call["id"]))
    if waiting:
        raise ProviderRejected(f"tool calls {waiting} without their results")


def reply(step: Step) -> AIMessage:
    """A fresh AI message for ``step``: unique call ids, raw argument strings kept."""
    if isinstance(step, str):
        return AIMessage(content=step)
    calls = []
    raw = []
    for name, args in step:
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        calls.append({"name": name, "args": args, "id": call_id, "type": "tool_call"})
        arguments = json.dumps(args, indent=1)  # spacing a re-dump would not reproduce
        function = {"name": name, "arguments": arguments}
        raw.append({"id": call_id, "type": "function", "function": function})
    return AIMessage(content="", tool_calls=calls, additional_kwargs={"tool_calls": raw})


class ProviderLikeModel(GenericFakeChatModel):
    """Replies from a script (or ``respond(request)``); records requests; rejects what a
    provider would reject. Thread-safe, so concurrent runs may share it."""

    requests: list[list[BaseMessage]]
    respond: Callable[[list[BaseMessage]], Step] | None = None

    def __init__(
        self,
        script: Sequence[Step] = (),
        respond: Callable[[list[BaseMessage]], Step] | None = None,
    ) -> None:
        replies: Iterator[AIMessage | str] = (reply(step) for step in script)
        super().__init__(messages=replies, requests=[], respond=respond, disable_streaming=True)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        with _LOCK:
            self.requests.append(list(messages))
            check_like_provider(messages)
            if self.respond is not None:
                return ChatResult(
                    generations=[ChatGeneration(message=reply(self.respond(messages)))]
                )
            return super()._generate(messages, *args, **kwargs)


_LOCK = threading.Lock()


def rows(store: MemoryStore, app_id: str) -> list[StoredMessage]:
    return list(iter_history(store.engine, app_id, store.cipher))


def lc_ids(stored: Sequence[StoredMessage]) -> list[str]:
    """The LangChain message id of each row."""
    return [row.message.metadata[LANGCHAIN_KEY]["data"]["id"] for row in stored]


def kinds(messages: Sequence[BaseMessage]) -> list[str]:
    return [m.type for m in messages]
