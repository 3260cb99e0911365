"""Gemini reasoning in ADK events kept with its calls: thought parts and the thought signatures
of function-call parts become memstore ``Reasoning`` parts of the event's AI row (provider
``google``), and the session's events come back with the signature bytes unchanged."""

from __future__ import annotations

import base64
import uuid

import pytest

pytest.importorskip("google.adk")

from google.adk.events.event import Event
from google.genai import types

from memstore.adapters.google_adk import event_to_messages, history_app_id
from memstore.messages import AiMessage
from tests.adapters.conftest import AdapterEnv
from tests.adapters.test_google_adk import APP, USER, service_of

SIGNATURE_A = bytes(range(250, 256)) + b"first call"
SIGNATURE_B = b"\x00\xff thought"


def thinking_event(invocation: str) -> Event:
    return Event(
        author="calc",
        invocation_id=invocation,
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="Add, then add again.", thought=True),
                types.Part(
                    function_call=types.FunctionCall(id="g1", name="add", args={"a": 1}),
                    thought_signature=SIGNATURE_A,
                ),
                types.Part(text="Now b.", thought=True, thought_signature=SIGNATURE_B),
                types.Part(function_call=types.FunctionCall(id="g2", name="add", args={"a": 2})),
            ],
        ),
    )


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def test_thoughts_and_signatures_become_reasoning_in_place() -> None:
    (row,) = event_to_messages(thinking_event("i1"))
    assert isinstance(row, AiMessage)
    assert [(p.kind, p.text, p.signature, p.before_call) for p in row.reasoning] == [
        ("thought", "Add, then add again.", None, None),
        ("thought_signature", None, b64(SIGNATURE_A), "g1"),
        ("thought", "Now b.", b64(SIGNATURE_B), "g2"),
    ]
    assert {p.provider for p in row.reasoning} == {"google"}
    assert row.text is None  # thought text is not the reply


def test_signatures_survive_a_restart_byte_for_byte(env: AdapterEnv) -> None:
    async def scenario() -> None:
        service = service_of(env)
        session = await service.create_session(app_name=APP, user_id=USER)
        event = thinking_event(uuid.uuid4().hex)
        await service.append_event(session, event)
        restarted = service_of(env)
        stored = await restarted.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        (kept,) = [e for e in stored.events if e.id == event.id]
        assert kept.model_dump() == event.model_dump()
        parts = kept.content.parts  # type: ignore[union-attr]
        assert parts is not None
        assert [p.thought_signature for p in parts] == [None, SIGNATURE_A, SIGNATURE_B, None]
        sync = env.sync_store()
        app_id = history_app_id(APP, USER, session.id)
        sync.memory(app_id).invalidate()
        (reply,) = [m for m in sync.memory(app_id).messages() if isinstance(m, AiMessage)]
        assert [p.signature for p in reply.reasoning if p.signature] == [
            b64(SIGNATURE_A),
            b64(SIGNATURE_B),
        ]
        shown = " ".join(entry.text for entry in sync.history(app_id))
        assert "Add, then add again." not in shown and b64(SIGNATURE_A) not in shown

    env.run(scenario())
