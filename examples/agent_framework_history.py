"""A Microsoft Agent Framework agent whose history lives in memstore, across a restart.

Runs as is (``python examples/agent_framework_history.py``), with no API key and no network:
``OfflineModel`` stands in for a real chat client (``OpenAIChatClient`` and the like) and
answers from a script. The one line that matters::

    agent = Agent(client, tools=[add], context_providers=[MemstoreHistoryProvider(store)])
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

from memstore import MemoryStore, Settings, ToolResult
from memstore.adapters.agent_framework import MemstoreHistoryProvider


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class OfflineModel(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """Plays a model: calls ``add`` when asked to add, then reads the tool's answer back."""

    async def _inner_get_response(
        self, *, messages: Any, stream: bool, options: Any, **_: Any
    ) -> Any:
        last = messages[-1]
        if last.role == "tool":
            reply = Message("assistant", [f"The sum is {last.contents[0].result}."])
        elif "Double" in last.text:
            earlier = [
                c.result for m in messages for c in m.contents if c.type == "function_result"
            ]
            reply = Message("assistant", [f"Doubled: {2 * int(earlier[-1])}."])
        else:
            arguments = {"a": 1, "b": 2}
            reply = Message(
                "assistant", [Content.from_function_call("call_1", "add", arguments=arguments)]
            )
        return ChatResponse(messages=[reply])


async def main() -> None:
    settings = Settings(database_url="sqlite:///agent-framework-example.db")

    with MemoryStore(settings) as store:
        store.migrate()
        agent = Agent(
            OfflineModel(), tools=[add], context_providers=[MemstoreHistoryProvider(store)]
        )
        session = agent.create_session()
        print((await agent.run("Add 1 and 2", session=session)).text)
        session_id = session.session_id

    # A restart: a new process, a new store on the same database, the same session id.
    with MemoryStore(settings) as store:
        provider = MemstoreHistoryProvider(store)
        agent = Agent(OfflineModel(), tools=[add], context_providers=[provider])
        session = agent.create_session(session_id=session_id)
        print((await agent.run("Double it", session=session)).text)
        # the app id is the session id: memstore sees the tool call as canonical rows
        results = [
            m for m in store.load_window(provider.app_id(session_id)) if isinstance(m, ToolResult)
        ]
        print("Tool results kept:", [(r.tool_name, r.text) for r in results])


if __name__ == "__main__":
    asyncio.run(main())
