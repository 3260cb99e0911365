"""An OpenAI Agents SDK run on a memstore session that survives a restart.

Runs as is (``python examples/openai_agents_session.py``): a scripted model stands in for the
real one, so no API key is needed. In your service, drop ``ScriptedModel`` and give the agent
your model (or none, for the SDK's default).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, ModelResponse, Runner, function_tool, set_tracing_disabled
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from memstore import MemoryStore, Settings
from memstore.adapters.openai_agents import MemstoreSession


class ScriptedModel(Model):
    """A stand-in model: answers each model call with the next canned output."""

    def __init__(self, *outputs: list[Any]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[Any] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        raise NotImplementedError("this example does not stream")


def say(text: str) -> ResponseOutputMessage:
    """An assistant message as the model returns it."""
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def call(call_id: str, name: str, arguments: dict[str, Any]) -> ResponseFunctionToolCall:
    """A function call as the model returns it."""
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        type="function_call",
        status="completed",
    )


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


async def main() -> None:
    set_tracing_disabled(True)
    settings = Settings(database_url="sqlite:///agents-example.db")

    # The first process: the model calls `add`, then answers.
    store = MemoryStore(settings)
    store.migrate()
    model = ScriptedModel([call("call_1", "add", {"a": 1, "b": 2})], [say("1 + 2 = 3")])
    agent = Agent(name="calculator", instructions="Use the add tool.", model=model, tools=[add])
    session = MemstoreSession("user-42", store)  # instead of SQLiteSession("user-42", ...)
    await session.clear_session()  # the story starts afresh when the example runs again
    result = await Runner.run(agent, "What is 1 + 2?", session=session)
    print(result.final_output)  # 1 + 2 = 3
    store.close()

    # A restart: a new store on the same database. The next run sees the tool call.
    store = MemoryStore(settings)
    model = ScriptedModel([say("Doubled: 6")])
    agent = Agent(name="calculator", instructions="Use the add tool.", model=model, tools=[add])
    result = await Runner.run(agent, "Double it.", session=MemstoreSession("user-42", store))
    seen = [item.get("type", "message") for item in model.inputs[0]]
    assert seen == ["message", "function_call", "function_call_output", "message", "message"]
    print(result.final_output)  # Doubled: 6
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
