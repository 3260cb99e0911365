"""A LangChain ``create_agent`` agent whose memory is memstore, across a restart.

Runs as is (``python examples/langchain_agent.py``): a scripted model stands in for a real one,
so no API key is needed. In your service, give ``create_agent`` your chat model instead.
"""

import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from memstore import MemoryStore, Settings
from memstore.adapters.langchain import MemstoreMiddleware


class ScriptedModel(GenericFakeChatModel):
    """A stand-in chat model that replies from a script (and takes any tools)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


def run(database_url: str, replies: list[AIMessage], question: str) -> list[BaseMessage]:
    """One process: a store, an agent with memstore as its memory, one question."""
    store = MemoryStore(Settings(database_url=database_url))
    store.migrate()
    model = ScriptedModel(messages=iter(replies))
    agent = create_agent(model, [add], middleware=[MemstoreMiddleware(store, max_messages=50)])
    config: RunnableConfig = {"configurable": {"thread_id": "app-42"}}  # thread id = app id
    result = agent.invoke({"messages": [{"role": "user", "content": question}]}, config)
    store.close()
    messages: list[BaseMessage] = result["messages"]  # what the model saw, then its reply
    print(messages[-1].content)
    return messages


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'agent.db'}"
        call = {"name": "add", "args": {"a": 1, "b": 2}, "id": "call_1"}
        run(url, [AIMessage("", tool_calls=[call]), AIMessage("1 + 2 = 3")], "What is 1 + 2?")

        # A restart: new store, new agent, no checkpointer. The model still sees the tool call
        # and its result, rebuilt from SQL, before the new question.
        seen = run(url, [AIMessage("Doubled: 6")], "Double it.")
        assert [m.type for m in seen] == ["human", "ai", "tool", "ai", "human", "ai"]
        assert isinstance(seen[1], AIMessage) and seen[1].tool_calls[0]["id"] == "call_1"


if __name__ == "__main__":
    main()
