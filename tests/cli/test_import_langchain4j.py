"""``memstore import --from langchain4j-json``: LangChain4j's ``ChatMessageSerializer`` JSON.

No JVM writes these fixtures: they are written out by hand, field for field, as LangChain4j's
``JacksonChatMessageJsonCodec`` serializes (langchain4j-core, ``dev.langchain4j.data.message``,
checked against the repository at commit b8b809ed, Aug 2026, and its
``ChatMessageSerializerTest`` expectations): fields in declaration order then ``type``; an
``AiMessage`` always carries ``toolExecutionRequests`` (``[]`` when none) and ``attributes``
(``{}``), ``text``/``thinking`` only when not null; a ``UserMessage`` drops empty fields
(``NON_EMPTY``); a ``ToolExecutionResultMessage`` carries ``contents`` and ``attributes``
(``{}``), ``isError`` only when set; releases before ``contents`` wrote the result's ``text``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from memstore import MemoryStore, Settings, ToolResult
from memstore.cli import cli
from memstore.formats import validate
from memstore.sql import admin
from memstore.sql.schema import original

# One memory as ``ChatMessageSerializer.messagesToJson`` writes it today.
MEMORY = (
    '[{"text":"You are a travel agent.","type":"SYSTEM"},'
    '{"contents":[{"text":"Weather in Oslo and Bergen?","type":"TEXT"}],"type":"USER"},'
    '{"toolExecutionRequests":['
    '{"id":"call_w1","name":"weather","arguments":"{\\"city\\": \\"Oslo\\"}"},'
    '{"id":"call_w2","name":"weather","arguments":"{\\"city\\": \\"Bergen\\"}"}],'
    '"attributes":{},"type":"AI"},'
    '{"id":"call_w1","toolName":"weather","contents":[{"text":"rain, 7C","type":"TEXT"}],'
    '"attributes":{},"type":"TOOL_EXECUTION_RESULT"},'
    '{"id":"call_w2","toolName":"weather","contents":[{"text":"no such city","type":"TEXT"}],'
    '"isError":true,"attributes":{},"type":"TOOL_EXECUTION_RESULT"},'
    '{"text":"Rain in Oslo.","toolExecutionRequests":[],"attributes":{},"type":"AI"}]'
)
# A memory written by an older release (user ``text``, result ``text``), breaking the rules:
# a result whose call is gone, then a call never answered.
LEGACY: list[dict[str, Any]] = [
    {"id": "call_lost", "toolName": "book", "text": "booked", "type": "TOOL_EXECUTION_RESULT"},
    {"text": "book it", "type": "USER"},
    {
        "toolExecutionRequests": [{"id": "call_b1", "name": "book", "arguments": "{}"}],
        "attributes": {},
        "type": "AI",
    },
    {"name": "Klaus", "contents": [{"text": "hello?", "type": "TEXT"}], "type": "USER"},
]


def run_import(*args: str) -> Result:
    return CliRunner().invoke(cli, ["import", *args, "--from", "langchain4j-json"])


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryStore(Settings(database_url=url)) as store:
        store.migrate()
    return url


def test_one_memory_needs_an_app_id(tmp_path: Path, target: str) -> None:
    source = tmp_path / "memory.json"
    source.write_text(MEMORY, encoding="utf-8")
    unnamed = run_import(str(source), "--database-url", target)
    assert unnamed.exit_code != 0
    assert "one memory (a JSON array): name its app id" in str(unnamed.exception)

    started = datetime.now(timezone.utc)
    result = run_import(str(source), "--app-id", "trip-7", "--database-url", target)
    assert result.exit_code == 0, result.output
    assert "trip-7 -> trip-7: 6 messages" in result.stdout
    store = MemoryStore(Settings(database_url=target))
    window = store.load_window("trip-7")
    assert [m.type for m in window] == ["system", "user", "ai"] + ["tool_result"] * 2 + ["ai"]
    assert [(c.id, c.arguments) for c in window[2].tool_requests] == [
        ("call_w1", '{"city": "Oslo"}'),
        ("call_w2", '{"city": "Bergen"}'),
    ]
    results = [m for m in window if isinstance(m, ToolResult)]
    assert [(r.id, r.text, r.is_error) for r in results] == [
        ("call_w1", "rain, 7C", False),
        ("call_w2", "no such city", True),
    ]
    for provider in ("openai", "anthropic"):
        assert validate(window, provider) == []
    # The format keeps no time: rows are stamped with the time of the import.
    with store.engine.connect() as conn:
        stamps = conn.execute(
            sa.select(original.c.created_at).where(original.c.app_id == "trip-7")
        ).scalars()
        for stamp in stamps:
            assert started <= stamp.replace(tzinfo=timezone.utc) <= datetime.now(timezone.utc)
    prefixed = run_import(str(source), "--app-id", "x", "--app-prefix", "p-")
    assert prefixed.exit_code == 2 and "give it or --app-prefix" in prefixed.output
    store.close()


def test_memory_store_dump(tmp_path: Path, target: str) -> None:
    """An object of memory ids; a value may be the serializer's JSON text, as a
    ``ChatMemoryStore`` keeps it, or the array itself."""
    source = tmp_path / "dump.json"
    source.write_text(json.dumps({"good": MEMORY, "legacy": LEGACY, "empty": None}))
    args = (str(source), "--app-prefix", "j4-", "--database-url", target)
    first = run_import(*args)
    assert first.exit_code == 0, first.output
    assert "good -> j4-good: 6 messages" in first.stdout
    assert "legacy -> j4-legacy: 4 messages (" in first.stdout
    assert "orphan_result: 1, unanswered_request: 1, wrong_first_role: 1" in first.stdout
    assert "sessions: 3, imported: 3, skipped: 0, messages: 10" in first.stdout
    store = MemoryStore(Settings(database_url=target))
    legacy = store.load_window("j4-legacy")
    assert [m.type for m in legacy] == ["system", "user", "ai", "tool_result", "user"]
    assert legacy[0].text == ""  # the orphan result, kept opaque
    assert legacy[3].id == "call_b1"  # the unanswered call, answered at read time
    assert legacy[4].metadata == {"participant_name": "Klaus"}
    for app in ("j4-good", "j4-legacy"):
        for provider in ("openai", "anthropic"):
            assert validate(store.load_window(app), provider) == []

    counts = [admin.counts_for(store.engine, app_id=a) for a in ("j4-good", "j4-legacy")]
    again = run_import(*args, "--json")
    assert again.exit_code == 0, again.output
    assert [r["skipped"] for r in json.loads(again.stdout)] == [True, True, False]
    assert [admin.counts_for(store.engine, app_id=a) for a in ("j4-good", "j4-legacy")] == counts
    store.close()


def test_unconvertible_memory_writes_nothing(tmp_path: Path, target: str) -> None:
    """A request without an id (models that give none) cannot be answered by id: the import
    stops before writing, naming the memory and the message's position, not its text."""
    no_id = [
        {"contents": [{"text": "secret plan", "type": "TEXT"}], "type": "USER"},
        {
            "toolExecutionRequests": [{"name": "weather", "arguments": "{}"}],
            "attributes": {},
            "type": "AI",
        },
    ]
    source = tmp_path / "dump.json"
    source.write_text(json.dumps({"a": MEMORY, "b": no_id}))
    result = run_import(str(source), "--database-url", target)
    assert result.exit_code != 0
    assert "memory 'b' message 1:" in str(result.exception)
    assert "secret" not in str(result.exception)
    store = MemoryStore(Settings(database_url=target))
    assert admin.counts_for(store.engine, app_id="a").original_rows == 0
    source.write_text(json.dumps({"a": MEMORY, "b" * 200: MEMORY}))  # app ids: 128 chars
    too_long = run_import(str(source), "--database-url", target)
    assert type(too_long.exception).__name__ == "InvalidAppIdError"
    assert admin.counts_for(store.engine, app_id="a").original_rows == 0
    store.close()
    source.write_text("{not json")
    assert "the file is not JSON" in str(run_import(str(source)).exception)
