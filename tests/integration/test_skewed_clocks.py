"""Several processes with skewed clocks write the same apps (issue 9, item 3).

Four child processes (``sys.executable -c CHILD``; their settings travel in the environment),
each with its own worker id; two of them build their store with an id generator whose clock
is behind the wall clock (by a few milliseconds and by almost half a second). They take turns
on the same apps, one turn after another: process R writes the user message and an AI message
with two parallel tool requests, processes R+1 and R+2 each write one result (racing each
other), process R+3 writes the final answer; R moves on by one process every turn. A child
finds its next step from the number of rows the app has in SQL (not from ids, which are what
is under test) and polls until then.

Afterwards, on SQLite (file), PostgreSQL and MariaDB: the ids of every app follow the order the
turns were written in (the two racing results in either order), every window rebuilt from SQL
holds every stored result and no interrupted answer, and the behind writers really had ids
lifted above their clocks (so the skew was exercised).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from memstore import AiMessage, MemoryStore, Settings, ToolResult, UserMessage
from memstore.core.validate import validate
from memstore.core.window import is_synthetic
from memstore.sql.engine import make_engine
from memstore.sql.migrate import upgrade
from memstore.sql.schema import original

PROCESSES = 4
BEHIND_MS = [0, 7, 0, 450]  # per process: how far its id generator's clock is behind
APPS = 3
TURNS = 6
ROWS_PER_TURN = 5  # user, AI with two requests, two results, final AI text
CHILD_TIMEOUT_S = 150

CHILD = r"""
import json, os, sys, time
import sqlalchemy as sa
from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.ids import SnowflakeGenerator, id_timestamp_ms
from memstore.sql.schema import original

cfg = json.loads(os.environ["MEMSTORE_SKEW_CHILD"])
me, processes, behind = cfg["index"], cfg["processes"], cfg["behind_ms"]
apps, turns, per_turn = cfg["apps"], cfg["turns"], cfg["rows_per_turn"]


def clock():
    return time.time_ns() // 1_000_000 - behind


store = MemoryStore(
    Settings(database_url=cfg["url"], worker_id=cfg["worker_id"], redis_url=None),
    id_generator=SnowflakeGenerator(cfg["worker_id"], clock=clock),
)
counts = sa.select(original.c.app_id, sa.func.count()).where(
    original.c.app_id.in_(apps)
).group_by(original.c.app_id)
written = set()
lifted = 0
deadline = time.monotonic() + cfg["timeout_s"]


def write(app, messages):
    global lifted
    before = clock()
    ids = store.append(app, messages)
    if id_timestamp_ms(ids[0]) > before + 1:
        lifted += 1  # the id was lifted above this process's clock


def step(app_index, app, count):
    turn, offset = divmod(count, per_turn)
    if turn >= turns:
        return False
    writer = (turn + app_index) % processes
    calls = [f"t{turn}-a", f"t{turn}-b"]
    if offset == 0 and writer == me:
        write(app, [
            UserMessage(text=f"turn {turn}"),
            AiMessage(text=f"calling {turn}", tool_requests=[
                ToolRequest(id=call, name="lookup", arguments="{}") for call in calls
            ]),
        ])
        return True
    if offset in (2, 3):
        for k, call in enumerate(calls):
            if (writer + 1 + k) % processes == me and (app, call) not in written:
                write(app, [ToolResult(id=call, tool_name="lookup", text=f"result {call}")])
                written.add((app, call))
                return True
    if offset == 4 and (writer + 3) % processes == me:
        write(app, [AiMessage(text=f"answer {turn}")])
        return True
    return False


while True:
    if time.monotonic() > deadline:
        sys.exit("timed out")
    with store.engine.connect() as conn:
        seen = dict(conn.execute(counts).all())
    if all(seen.get(app, 0) >= turns * per_turn for app in apps):
        break
    progressed = False
    for index, app in enumerate(apps):
        progressed |= step(index, app, seen.get(app, 0))
    if not progressed:
        time.sleep(0.002)
print(json.dumps({"lifted": lifted}))
store.close()
"""


def expected_turns(rows: list[object]) -> None:
    """``rows`` (the app's messages in id order) are the turns in the order written; the two
    results of a turn may be in either order."""
    assert len(rows) == TURNS * ROWS_PER_TURN
    for turn in range(TURNS):
        user, request, first, second, final = rows[turn * 5 : turn * 5 + 5]
        assert user == UserMessage(text=f"turn {turn}")
        assert isinstance(request, AiMessage) and request.text == f"calling {turn}"
        assert [call.id for call in request.tool_requests] == [f"t{turn}-a", f"t{turn}-b"]
        assert isinstance(first, ToolResult) and isinstance(second, ToolResult)
        assert {first.id, second.id} == {f"t{turn}-a", f"t{turn}-b"}
        assert not first.is_error and not second.is_error
        assert final == AiMessage(text=f"answer {turn}")


@pytest.mark.slow
@pytest.mark.parametrize("scratch_database_url", ["sqlite", "postgres", "mysql"], indirect=True)
def test_processes_with_skewed_clocks_keep_every_result_in_every_window(
    scratch_database_url: str, tmp_path: Path
) -> None:
    engine = make_engine(scratch_database_url)
    upgrade(engine)
    engine.dispose()
    run = uuid.uuid4().hex[:8]
    apps = [f"skew-{run}-{n}" for n in range(APPS)]
    worker_ids = [101, 57, 900, 3]  # the lowest ids on the behind clocks too
    children = []
    for index in range(PROCESSES):
        config = {
            "url": scratch_database_url,
            "index": index,
            "processes": PROCESSES,
            "worker_id": worker_ids[index],
            "behind_ms": BEHIND_MS[index],
            "apps": apps,
            "turns": TURNS,
            "rows_per_turn": ROWS_PER_TURN,
            "timeout_s": CHILD_TIMEOUT_S,
        }
        env = {**os.environ, "MEMSTORE_SKEW_CHILD": json.dumps(config)}
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", CHILD],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    reports = []
    for child in children:
        out, err = child.communicate(timeout=CHILD_TIMEOUT_S + 30)
        assert child.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    behind = [r["lifted"] for r, ms in zip(reports, BEHIND_MS, strict=True) if ms]
    assert sum(behind) > 0, f"no id was lifted above a behind clock: {reports}"

    store = MemoryStore(Settings(database_url=scratch_database_url, redis_url=None))
    try:
        for app in apps:
            with store.engine.connect() as conn:
                ids = conn.execute(
                    sa.select(original.c.id).where(original.c.app_id == app).order_by(original.c.id)
                ).scalars()
                assert len(set(ids)) == TURNS * ROWS_PER_TURN
            history = store.load_window(app, 1000, start_at_user=False)
            expected_turns(history)
            assert not any(is_synthetic(message) for message in history)
            assert validate(history, "openai") == [] and validate(history, "anthropic") == []
            report = store.reload(app, 1000)
            assert (report.orphans_skipped, report.interrupted_answered) == (0, 0)
            assert store.memory(app).messages() == history
    finally:
        store.close()
