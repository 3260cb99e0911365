"""Framework adapters: memstore as the memory backend of an agent framework, in one line.

>>> from memstore.adapters import MemstoreChatMessageHistory   # doctest: +SKIP
>>> from memstore.adapters import MemstoreSession              # doctest: +SKIP

* :class:`~memstore.adapters.langchain.MemstoreMiddleware`: an ``AgentMiddleware`` for
  LangChain 1.x ``create_agent`` agents (``pip install 'memstore[langchain]'``);
* :class:`~memstore.adapters.langgraph.MemstoreMirrorSaver`: a LangGraph checkpointer wrapper
  that mirrors a graph's ``messages`` into memstore;
* :class:`~memstore.adapters.langchain.MemstoreChatMessageHistory` (legacy): langchain-core's
  deprecated ``BaseChatMessageHistory``;
* :class:`~memstore.adapters.openai_agents.MemstoreSession`: the OpenAI Agents SDK's ``Session``
  (``pip install 'memstore[openai-agents]'``);
* :class:`~memstore.adapters.pydantic_ai.MemstoreConversationStore`: pydantic-ai's
  ``ConversationStore`` (``pip install 'memstore[pydantic-ai]'``);
* :class:`~memstore.adapters.google_adk.MemstoreSessionService`: Google ADK's
  ``BaseSessionService`` (``pip install 'memstore[google-adk]'``).

Each takes a :class:`~memstore.MemoryStore` or an :class:`~memstore.aio.AsyncMemoryStore`. The
names are imported lazily: touching one whose framework is missing raises
:class:`~memstore.errors.MissingExtraError` with the ``pip install`` line, and importing this
package alone never imports a framework.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memstore.adapters.google_adk import MemstoreSessionService
    from memstore.adapters.langchain import MemstoreChatMessageHistory, MemstoreMiddleware
    from memstore.adapters.langgraph import MemstoreMirrorSaver
    from memstore.adapters.openai_agents import MemstoreSession
    from memstore.adapters.pydantic_ai import MemstoreConversationStore

_EXPORTS = {
    "MemstoreChatMessageHistory": "memstore.adapters.langchain",
    "MemstoreMiddleware": "memstore.adapters.langchain",
    "MemstoreMirrorSaver": "memstore.adapters.langgraph",
    "MemstoreSession": "memstore.adapters.openai_agents",
    "MemstoreConversationStore": "memstore.adapters.pydantic_ai",
    "MemstoreSessionService": "memstore.adapters.google_adk",
}


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memstore.adapters' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "MemstoreChatMessageHistory",
    "MemstoreConversationStore",
    "MemstoreMiddleware",
    "MemstoreMirrorSaver",
    "MemstoreSession",
    "MemstoreSessionService",
]
