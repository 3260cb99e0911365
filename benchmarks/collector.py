"""Stream collector vs writing per message / per delta: one turn of 2,000 text deltas and 10
tool calls (10 rounds of one call each, then the final reply), same run, same database.

    python benchmarks/collector.py [--runs 5] [--postgres-url URL]

Rows of the table:

* ``collector``: ``store.collector`` (11 original-history INSERTs + 1 display INSERT);
* ``per message``: the baseline, every AI message and tool result appended in its own
  transaction (``store.append([message])``, 21 transactions), deltas joined in memory;
* ``per delta``: every text delta written as its own row and transaction (the "write every
  fragment" apps; run with 1/10 of the deltas and scaled up, it is that slow).

``on_text`` overhead is the collector's cost per text delta, no I/O (median of the runs).

``feed`` scaling: per-chunk cost of OpenAI chunks carrying text and two parallel tool-call
deltas (three operations each), for 1,000 and 8,000 chunks in one model call, no I/O. A cost
independent of the turn keeps the ratio near 1.0x (it was 7x when a multi-operation chunk
copied the whole turn).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.core.stream import StreamAssembler

DELTAS = 2000
ROUNDS = 10
DELTA = "lorem ips"  # 9 characters, a typical token or two


def deltas_per_model_call() -> list[int]:
    base, extra = divmod(DELTAS, ROUNDS + 1)
    return [base + (1 if i < extra else 0) for i in range(ROUNDS + 1)]


def run_collector(store: MemoryStore, app: str) -> None:
    with store.collector(app) as turn:
        for round_no, count in enumerate(deltas_per_model_call()):
            for _ in range(count):
                turn.on_text(DELTA)
            if round_no == ROUNDS:
                break
            call_id = f"call_{round_no}"
            turn.on_tool_call_delta(0, id=call_id, name="read_file", arguments='{"path": ')
            turn.on_tool_call_delta(0, arguments=f'"f{round_no}.txt"}}')
            for request in turn.tool_calls():
                turn.on_tool_executed(request.id, "file contents")


def run_per_message(store: MemoryStore, app: str, *, per_delta: bool = False) -> None:
    scale = 10 if per_delta else 1
    for round_no, count in enumerate(deltas_per_model_call()):
        parts: list[str] = []
        for _ in range(count // scale):
            parts.append(DELTA)
            if per_delta:
                store.append(app, [AiMessage(text=DELTA)])
        text = "".join(parts)
        if round_no == ROUNDS:
            if not per_delta:
                store.append(app, [AiMessage(text=text)])
            break
        call_id = f"call_{round_no}"
        request = ToolRequest(
            id=call_id, name="read_file", arguments=f'{{"path": "f{round_no}.txt"}}'
        )
        store.append(app, [AiMessage(text=None if per_delta else text, tool_requests=[request])])
        store.append(app, [ToolResult(id=call_id, tool_name="read_file", text="file contents")])


def timed(store: MemoryStore, body: Callable[[MemoryStore, str], None]) -> float:
    app = f"bench-{uuid.uuid4().hex[:10]}"
    store.append(app, [UserMessage(text="go")])
    store.memory(app).messages()
    start = time.perf_counter()
    body(store, app)
    return time.perf_counter() - start


def on_text_overhead_us(runs: int) -> float:
    samples = []
    for _ in range(runs):
        assembler = StreamAssembler()
        start = time.perf_counter()
        for _ in range(DELTAS):
            assembler.on_text(DELTA)
        samples.append((time.perf_counter() - start) / DELTAS * 1e6)
    return statistics.median(samples)


def multi_op_chunk(i: int) -> dict[str, object]:
    calls = [
        {"index": 0, "function": {"arguments": " "}},
        {"index": 1, "function": {"arguments": " "}},
    ]
    return {"choices": [{"index": 0, "delta": {"content": f"t{i % 10} ", "tool_calls": calls}}]}


def feed_us_per_chunk(chunks: int, runs: int) -> float:
    samples = []
    for _ in range(runs):
        assembler = StreamAssembler()
        for index, call_id in ((0, "c0"), (1, "c1")):
            call = {"index": index, "id": call_id, "function": {"name": "f", "arguments": ""}}
            assembler.feed({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
        body = [multi_op_chunk(i) for i in range(chunks)]
        start = time.perf_counter()
        for chunk in body:
            assembler.feed(chunk)
        samples.append((time.perf_counter() - start) / chunks * 1e6)
    return statistics.median(samples)


def bench(name: str, url: str, runs: int) -> list[str]:
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    try:
        collector = statistics.median(timed(store, run_collector) for _ in range(runs))
        per_message = statistics.median(timed(store, run_per_message) for _ in range(runs))
        per_delta = 10 * statistics.median(
            timed(store, lambda s, a: run_per_message(s, a, per_delta=True))
            for _ in range(max(1, runs // 2))
        )
    finally:
        store.close()
    return [
        f"| {name} | collector | {collector * 1e3:.1f} | 1.0x |",
        f"| {name} | per message (baseline) | {per_message * 1e3:.1f} | "
        f"{per_message / collector:.1f}x |",
        f"| {name} | per delta (scaled x10) | {per_delta * 1e3:.0f} | "
        f"{per_delta / collector:.0f}x |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--postgres-url", default=None)
    args = parser.parse_args()
    rows = [
        "| database | writer | turn ms (median) | slower than collector |",
        "| --- | --- | ---: | ---: |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        rows += bench("SQLite", f"sqlite:///{Path(tmp) / 'bench.db'}", args.runs)
    if args.postgres_url:
        rows += bench("PostgreSQL", args.postgres_url, args.runs)
    print(f"turn: {DELTAS} text deltas, {ROUNDS} tool calls in {ROUNDS} rounds, final reply")
    print("\n".join(rows))
    print(f"\ncollector on_text overhead: {on_text_overhead_us(args.runs):.2f} µs per delta")
    small, large = feed_us_per_chunk(1000, args.runs), feed_us_per_chunk(8000, args.runs)
    print(
        f"feed, 3-operation chunks: {small:.2f} µs per chunk at 1,000 chunks, {large:.2f} µs "
        f"at 8,000 ({large / small:.1f}x; 1.0x = linear)"
    )


if __name__ == "__main__":
    main()
