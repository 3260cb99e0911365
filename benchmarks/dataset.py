"""Synthetic but realistic chat histories, and a fast bulk loader for them.

A *turn* is what one user request produces: the user message, zero to three rounds of tool
calls (an AI message with 1-3 parallel tool requests, then one result per request) and the
final AI text. Text sizes follow a log-normal spread so a few tool results are large, as real
file reads and command outputs are.

Every run with the same seed produces the same messages and the same snowflake ids.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.engine import Engine

from memstore.core.rows import original_row
from memstore.ids import EPOCH_MS, SnowflakeGenerator, id_timestamp_ms
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage
from memstore.sql.schema import original

Turn = list[Message]

BENCH_WORKER_ID = 1017
"""Worker id of the generated rows (the simulated clock also keeps them in early 2024)."""
INSERT_BATCH_ROWS = 10_000

_WORDS = (
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "file",
    "line",
    "error",
    "test",
    "value",
    "config",
    "read",
    "write",
    "run",
    "build",
    "path",
    "function",
    "return",
    "import",
    "class",
    "module",
    "server",
    "request",
    "response",
    "data",
    "cache",
    "window",
    "message",
    "tool",
    "result",
    "user",
    "agent",
    "model",
    "call",
    "list",
    "update",
    "delete",
    "create",
    "check",
    "debug",
    "install",
    "version",
    "python",
    "redis",
    "postgres",
    "query",
    "index",
    "table",
    "row",
    "column",
    "id",
    "time",
    "retry",
    "output",
    "input",
    "log",
    "warning",
    "failed",
    "passed",
    "ok",
    "done",
    "missing",
    "found",
    "project",
    "branch",
    "commit",
)
_TOOLS = ("read_file", "write_file", "run_shell", "search_code", "list_dir", "http_get")


class TextSource:
    """Cheap random text: slices of one long pseudo-random word stream."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self._corpus = " ".join(rng.choice(_WORDS) for _ in range(120_000))

    def text(self, rng: random.Random, median_chars: int, max_chars: int) -> str:
        size = min(max_chars, max(8, int(rng.lognormvariate(0.0, 0.8) * median_chars)))
        start = rng.randrange(0, len(self._corpus) - size)
        return self._corpus[start : start + size].strip() or "ok"


class TurnMaker:
    """Makes turns of a realistic mix of message kinds."""

    def __init__(self, texts: TextSource) -> None:
        self._texts = texts

    def turn(self, rng: random.Random) -> Turn:
        texts = self._texts
        out: Turn = [UserMessage(text=texts.text(rng, 160, 4_000))]
        rounds = rng.choices((0, 1, 2, 3), weights=(45, 30, 15, 10))[0]
        for _ in range(rounds):
            width = rng.choices((1, 2, 3), weights=(60, 25, 15))[0]
            calls = [self._request(rng) for _ in range(width)]
            preface = texts.text(rng, 60, 400) if rng.random() < 0.3 else None
            out.append(AiMessage(text=preface, tool_requests=calls))
            out.extend(
                ToolResult(
                    id=call.id,
                    tool_name=call.name,
                    text=texts.text(rng, 500, 20_000),
                    is_error=rng.random() < 0.05,
                )
                for call in calls
            )
        out.append(AiMessage(text=texts.text(rng, 420, 6_000)))
        return out

    def _request(self, rng: random.Random) -> ToolRequest:
        name = rng.choice(_TOOLS)
        arguments = json.dumps(
            {
                "path": f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py",
                "query": self._texts.text(rng, 40, 300),
            }
        )
        return ToolRequest(id=f"call_{rng.getrandbits(96):024x}", name=name, arguments=arguments)

    @staticmethod
    def filler(rng: random.Random, texts: TextSource, count: int) -> Turn:
        """``count`` plain messages (user, AI, user, ...) to make a history an exact size."""
        return [
            UserMessage(text=texts.text(rng, 120, 1_000))
            if i % 2 == 0
            else AiMessage(text=texts.text(rng, 300, 2_000))
            for i in range(count)
        ]


MAX_TURN = 2 + 3 * (1 + 3)
"""Most messages one turn can hold."""


@dataclass
class AppPlan:
    """One app's history: ``size`` messages; the newest ones are ``tail`` (fixed turns)."""

    app_id: str
    size: int
    seed: str
    tail: list[Turn] = field(default_factory=list)
    user_id: str | None = None

    def turns(self, maker: TurnMaker, texts: TextSource) -> Iterator[Turn]:
        rng = random.Random(self.seed)
        tail_size = sum(len(turn) for turn in self.tail)
        remaining = self.size - tail_size
        while remaining > 0:
            turn = maker.turn(rng) if remaining >= MAX_TURN else maker.filler(rng, texts, remaining)
            remaining -= len(turn)
            yield turn
        yield from self.tail


def fixed_tail(maker: TurnMaker, seed: int, max_messages: int) -> list[Turn]:
    """The newest whole turns (at most ``max_messages`` messages) of one fixed conversation.

    Target apps of every size end with this same tail, so their windows hold identical
    messages and only the depth of the history differs between them.
    """
    rng = random.Random(f"{seed}-tail")
    turns = [maker.turn(rng) for _ in range(max_messages)]
    tail: list[Turn] = []
    total = 0
    for turn in reversed(turns):
        if total + len(turn) > max_messages:
            break
        tail.insert(0, turn)
        total += len(turn)
    return tail


@dataclass
class LoadResult:
    rows: int
    per_app: dict[str, int]
    kinds: Counter[str]
    """Rows per ``message_type``."""
    payload_bytes: int


def interleaved_rows(plans: list[AppPlan], seed: int) -> Iterator[dict[str, Any]]:
    """Original-history rows of every plan, turns interleaved at random, ids increasing.

    At each step one app is picked with probability proportional to the messages it still
    has to write, so every app's rows spread over the whole id range.
    """
    texts = TextSource(seed)
    maker = TurnMaker(texts)
    pick = random.Random(f"{seed}-schedule")
    clock_rng = random.Random(f"{seed}-clock")
    now_ms = EPOCH_MS + 86_400_000

    def clock() -> int:
        nonlocal now_ms
        now_ms += clock_rng.randint(1, 60_000)
        return now_ms

    ids = SnowflakeGenerator(BENCH_WORKER_ID, clock=clock)
    streams = [plan.turns(maker, texts) for plan in plans]
    remaining = [plan.size for plan in plans]
    while any(remaining):
        index = pick.choices(range(len(plans)), weights=remaining)[0]
        turn = next(streams[index])
        remaining[index] -= len(turn)
        plan = plans[index]
        for row_id, message in zip(ids.next_ids(len(turn)), turn, strict=True):
            created = datetime.fromtimestamp(id_timestamp_ms(row_id) / 1000, tz=timezone.utc)
            yield original_row(row_id, plan.app_id, plan.user_id, message, created)


def bulk_load(engines: list[Engine], plans: list[AppPlan], seed: int) -> LoadResult:
    """Insert the plans' rows into every engine's ``chat_history_original``, in big batches."""
    per_app = {plan.app_id: 0 for plan in plans}
    kinds: Counter[str] = Counter()
    payload_bytes = 0
    batch: list[dict[str, Any]] = []
    total = 0

    def flush() -> None:
        for engine in engines:
            with engine.begin() as conn:
                conn.execute(original.insert(), batch)
        batch.clear()

    for row in interleaved_rows(plans, seed):
        batch.append(row)
        per_app[row["app_id"]] += 1
        kinds[row["message_type"]] += 1
        payload_bytes += len(row["payload"])
        total += 1
        if len(batch) >= INSERT_BATCH_ROWS:
            flush()
    if batch:
        flush()
    return LoadResult(total, per_app, kinds, payload_bytes)
