"""A pydantic-ai conversation on memstore that survives a restart.

Runs as is (``python examples/pydantic_ai_conversation.py``): a ``FunctionModel`` stands in for
the real model, so no API key is needed. In your service, give the agent your model instead.
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memstore import MemoryStore, Settings
from memstore.adapters.pydantic_ai import MemstoreConversationStore


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in model: calls `add` for the first prompt, then answers from the tool's return."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="t1")])
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if messages[-1].parts[-1] is returns[-1]:
        return ModelResponse(parts=[TextPart(f"The sum is {returns[-1].content}.")])
    return ModelResponse(parts=[TextPart(f"Doubled: {2 * returns[-1].content}.")])


agent = Agent(FunctionModel(scripted))


@agent.tool_plain
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main() -> None:
    settings = Settings(database_url="sqlite:///pydantic-ai-example.db", redis_url=None)

    # The first process: the model calls `add`, then answers; save the run.
    store = MemoryStore(settings)
    store.migrate()
    conversations = MemstoreConversationStore(store)  # instead of InMemoryConversationStore()
    await conversations.delete("chat-42")  # the story starts afresh when the example runs again
    conversation = await conversations.load("chat-42") or Conversation(conversation_id="chat-42")
    result = await agent.run("What is 1 + 2?", conversation=conversation)
    await conversations.save(result)
    print(result.output)  # The sum is 3.
    store.close()

    # A restart: a new store object on the same database loads the last 2 messages. The window
    # never starts inside a tool exchange: it keeps the call with its return (3 messages).
    store = MemoryStore(settings)
    conversations = MemstoreConversationStore(store)
    conversation = await conversations.load("chat-42", limit=2)
    assert conversation is not None
    print(len(conversation.messages))  # 3: the call, its return, the answer
    result = await agent.run("Double it.", conversation=conversation)
    await conversations.save(result)
    print(result.output)  # Doubled: 6.
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
