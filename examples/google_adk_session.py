"""A Google ADK session on memstore that survives a restart.

Runs as is (``python examples/google_adk_session.py``): a scripted ``BaseLlm`` stands in for the
real model, so no API key is needed. In your service, give the agent your model instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from memstore import MemoryStore, Settings
from memstore.adapters.google_adk import MemstoreSessionService


class Scripted(BaseLlm):
    """A stand-in model: calls `add` for the first prompt, then answers from its response."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = [p for c in llm_request.contents for p in c.parts or []]
        sums = [p.function_response.response["sum"] for p in parts if p.function_response]
        if not sums:
            call = types.FunctionCall(id="call-1", name="add", args={"a": 1, "b": 2})
            reply = types.Part(function_call=call)
        elif parts[-1].function_response:
            reply = types.Part(text=f"The sum is {sums[-1]}.")
        else:
            reply = types.Part(text=f"Doubled: {2 * sums[-1]}.")
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=0)
        yield LlmResponse(content=types.Content(role="model", parts=[reply]), usage_metadata=usage)


def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": a + b}


async def run(sessions: MemstoreSessionService, session_id: str, text: str) -> None:
    agent = LlmAgent(name="calculator", model=Scripted(), tools=[add])
    runner = Runner(agent=agent, app_name="calc", session_service=sessions)
    prompt = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id="u-7", session_id=session_id, new_message=prompt):
        if event.is_final_response() and event.content and event.content.parts:
            print(event.content.parts[0].text)


async def main() -> None:
    settings = Settings(database_url="sqlite:///adk-example.db", redis_url=None)

    # The first process: the model calls `add`, then answers.
    store = MemoryStore(settings)
    store.migrate()
    sessions = MemstoreSessionService(store)  # instead of DatabaseSessionService(db_url)
    session = await sessions.create_session(app_name="calc", user_id="u-7")
    await run(sessions, session.id, "What is 1 + 2?")  # The sum is 3.
    store.close()

    # A restart: a new store and service on the same database. The last 2 events would start
    # inside the call/response pair: the window keeps the pair whole (3 events).
    store = MemoryStore(settings)
    sessions = MemstoreSessionService(store)
    config = GetSessionConfig(num_recent_events=2)
    window = await sessions.get_session(
        app_name="calc", user_id="u-7", session_id=session.id, config=config
    )
    assert window is not None
    print(len(window.events))  # 3: the call, its response, the answer
    await run(sessions, session.id, "Double it.")  # Doubled: 6. (the run sees the exchange)
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
