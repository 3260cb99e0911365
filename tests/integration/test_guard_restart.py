"""The loop guard across a service restart: a child process is killed with SIGKILL and a new
process takes over the same database.

* A side-effecting tool whose execution succeeded (recorded, then the process died before the
  result reached the history) is not executed again: the new process gets the first result.
* One killed in the middle of the tool (started, outcome never recorded) is not executed again
  either: the new process gets ``human_review_required`` until a person resolves the key.
* No-progress blocking reads the history, so a new process blocks a repeat it never saw.

The "side effect" is a line appended to an outbox file, so the test counts real executions.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from memstore import AiMessage, MemoryStore, Settings, ToolRequest, ToolResult, UserMessage
from memstore.core.window import is_synthetic
from memstore.guard import LoopGuard
from tests.conftest import migrated_engine

REPO = Path(__file__).resolve().parents[2]
DATABASES = ["sqlite", "postgres", "mysql"]

# Runs in a child process; argv[1] is the job as JSON.
CHILD = r"""
import json, os, sys, time
from memstore import AiMessage, MemoryStore, Settings, ToolRequest
from memstore.guard import LoopGuard

job = json.loads(sys.argv[1])
store = MemoryStore(Settings(database_url=job["url"], worker_id=job["worker"]))
guard = LoopGuard(store, side_effect_tools={"send_email"})
app = job["app_id"]

if job["action"] == "check":
    print(json.dumps(guard.check(app, job["tool"], job["arguments"]).model_dump()), flush=True)
    store.close()
    sys.exit(0)

def send_email():
    with open(job["outbox"], "a", encoding="utf-8") as outbox:
        outbox.write("mail to bob\n")
        outbox.flush()
        os.fsync(outbox.fileno())
    if job["die"] == "mid_tool":
        print("READY", flush=True)  # the mail left; the outcome is not recorded yet
        time.sleep(120)
    return "mail 42 sent to bob"

call_id = job["call_id"]
store.append(app, [AiMessage(tool_requests=[
    ToolRequest(id=call_id, name="send_email", arguments=job["arguments"])])])
outcome = guard.execute(app, "send_email", job["arguments"], send_email, call_id=call_id)
print(json.dumps({"status": outcome.verdict.status, "verdict": outcome.verdict.model_dump(),
                  "text": outcome.text, "executed": outcome.executed}), flush=True)
if job["die"] == "after_success":
    print("READY", flush=True)  # recorded as succeeded; the result never reaches the history
    time.sleep(120)
store.append(app, [outcome.tool_result(call_id, "send_email")])
store.close()
"""


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    engine = migrated_engine(request.param, tmp_path_factory)
    return engine.url.render_as_string(hide_password=False)


def child(job: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(job)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_child(job: dict[str, Any]) -> dict[str, Any]:
    """Run a child to the end; return the JSON it printed last."""
    process = child(job)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    printed: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return printed


def kill_when_ready(job: dict[str, Any]) -> list[str]:
    """Start a child, wait for its READY line, SIGKILL it; return the lines it printed."""
    process = child(job)
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    received = b""  # read the pipe itself: a buffered reader would hide lines from select
    deadline = time.monotonic() + 120
    try:
        while b"READY\n" not in received:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([descriptor], [], [], max(0.0, remaining))
            if not ready:
                pytest.fail(f"the child never got ready; it printed {received!r}")
            chunk = os.read(descriptor, 65536)
            if not chunk:
                pytest.fail(f"the child exited early; it printed {received!r}")
            received += chunk
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)  # reaps it and closes the pipes
    assert process.returncode == -signal.SIGKILL, stderr
    return received.decode().splitlines()


def job(url: str, app_id: str, outbox: Path, worker: int, **extra: Any) -> dict[str, Any]:
    return {
        "url": url,
        "app_id": app_id,
        "outbox": str(outbox),
        "worker": worker,
        "call_id": f"call_{uuid.uuid4().hex[:8]}",
        "die": None,
        "action": "execute",
        **extra,
    }


def mails(outbox: Path) -> int:
    return len(outbox.read_text(encoding="utf-8").splitlines()) if outbox.exists() else 0


def test_a_side_effect_that_succeeded_is_not_repeated_after_a_kill(
    database_url: str, app_id: str, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.txt"
    first = kill_when_ready(
        job(database_url, app_id, outbox, 931, arguments='{"to": "bob"}', die="after_success")
    )
    assert json.loads(first[0])["executed"] is True
    assert mails(outbox) == 1

    # the new process: the model, seeing the interrupted call, asks for it again
    retry = run_child(job(database_url, app_id, outbox, 932, arguments='{ "to" : "bob" }'))
    assert retry["status"] == "already_succeeded"
    assert retry["text"] == "mail 42 sent to bob" and retry["executed"] is False
    assert mails(outbox) == 1

    with MemoryStore(Settings(database_url=database_url, worker_id=933)) as store:
        results = [m for m in store.load_window(app_id) if isinstance(m, ToolResult)]
    # the killed call is answered as interrupted, the retry with the first result
    assert [is_synthetic(r) for r in results] == [True, False]
    assert results[1].text == "mail 42 sent to bob" and not results[1].is_error


def test_a_side_effect_killed_mid_tool_waits_for_a_person(
    database_url: str, app_id: str, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.txt"
    kill_when_ready(
        job(database_url, app_id, outbox, 934, arguments='{"to": "bob"}', die="mid_tool")
    )
    assert mails(outbox) == 1

    retry = run_child(job(database_url, app_id, outbox, 935, arguments='{"to":"bob"}'))
    assert retry["status"] == "human_review_required" and retry["executed"] is False
    assert retry["verdict"]["execution_state"] == "running"
    assert mails(outbox) == 1

    # a person checks the outbox, sees the mail left, and records it
    with MemoryStore(Settings(database_url=database_url, worker_id=936)) as store:
        guard = LoopGuard(store, side_effect_tools={"send_email"})
        key = retry["verdict"]["idempotency_key"]
        assert guard.execution(app_id, key) is not None
        guard.succeed(app_id, key, "operator: mail 42 did go out")

    after = run_child(job(database_url, app_id, outbox, 937, arguments='{"to": "bob"}'))
    assert after["status"] == "already_succeeded"
    assert after["text"] == "operator: mail 42 did go out"
    assert mails(outbox) == 1


def test_no_progress_blocking_holds_in_a_new_process(database_url: str, app_id: str) -> None:
    with MemoryStore(Settings(database_url=database_url, worker_id=938)) as store:
        guard = LoopGuard(store)
        store.append(app_id, [UserMessage(text="read a.txt")])
        for attempt in range(2):
            call_id = f"c{attempt}"
            store.append(
                app_id,
                [
                    AiMessage(
                        tool_requests=[
                            ToolRequest(id=call_id, name="read_file", arguments='{"p": "a"}')
                        ]
                    ),
                    ToolResult(id=call_id, tool_name="read_file", text="same"),
                ],
            )
        assert guard.check(app_id, "read_file", '{"p": "a"}').status == "blocked_no_progress"

    printed = run_child(
        {
            "url": database_url,
            "app_id": app_id,
            "worker": 939,
            "action": "check",
            "tool": "read_file",
            "arguments": '{ "p":"a" }',
        }
    )
    assert printed["status"] == "blocked_no_progress"
    assert printed["reason"] == "same_tool_same_arguments_no_state_change"
