"""One soak worker process: ``python -m tests.soak.worker CONFIG.json``.

It runs seeded random operations on the soak's apps until its deadline and logs, one JSON line
per call, what the call was told: the ids an append acknowledged, the errors it saw (by class
name only), the messages a window read served (by their unique texts). The checker
(:mod:`tests.soak.checker`) judges the logs against the database afterwards.

Appends that fail are retried as the docs allow: after a
:class:`~memstore.errors.CommitOutcomeUnknownError` only with ``retry_of=`` (never blindly);
after a plain :class:`~memstore.errors.StorageError` ("nothing was committed") as a fresh
append. A text that is stored twice therefore means a guarantee was broken.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any, TextIO

from memstore import (
    AiMessage,
    CommitOutcomeUnknownError,
    MemoryStore,
    Settings,
    StorageError,
    UserMessage,
)
from memstore.errors import MemstoreError
from memstore.messages import Message
from tests.soak.keys import message_key

APPEND_ATTEMPTS = 6
OPS = {  # operation: weight
    "append": 30,
    "add_all": 10,
    "turn": 12,
    "read": 22,
    "load_window": 10,
    "reload": 4,
    "side_append": 10,
    "prune": 1,
    "purge": 1,
}


class Worker:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.index: int = cfg["index"]
        self.rng = random.Random(f"{cfg['seed']}:{self.index}")
        self.seq = 0
        skew_ms: int = cfg["skew_ms"]
        settings = Settings(
            database_url=cfg["database_url"],
            redis_url=cfg["redis_url"],
            stale_window_max_seconds=cfg["stale_window_max_seconds"],
            redis_timeout_seconds=cfg["redis_timeout_seconds"],
            reload_max=cfg["reload_max"],
            window_max_tokens=None,
        )
        clock = (lambda: time.time_ns() // 1_000_000 - skew_ms) if skew_ms else None
        self.store = MemoryStore(settings, id_clock=clock)
        self.log: TextIO = open(cfg["log"], "a", encoding="utf-8")  # noqa: SIM115

    # -- logging -------------------------------------------------------------------------------

    def record(self, **fields: Any) -> None:
        self.log.write(json.dumps({"w": self.index, **fields}) + "\n")
        self.log.flush()

    def key(self, part: str) -> str:
        return f"{self.cfg['run']}:w{self.index}:n{self.seq}:{part}"

    # -- operations ----------------------------------------------------------------------------

    def append(self, app: str, messages: list[Message], via_memory: bool = False) -> str:
        """Append with the documented retries; logs and returns the outcome."""
        keys = [message_key(m) for m in messages]
        errors: list[str] = []
        doubt: CommitOutcomeUnknownError | None = None
        doubts: list[list[int]] = []
        t0 = time.time()
        outcome, ids = "failed", None
        for attempt in range(APPEND_ATTEMPTS):
            try:
                if via_memory and doubt is None:
                    ids = self.store.memory(app).add_all(messages)
                else:
                    ids = self.store.append(app, messages, retry_of=doubt)
                outcome = "ok"
                break
            except CommitOutcomeUnknownError as error:
                errors.append(type(error).__name__)
                doubt = None if self.cfg.get("blind_retry") else error
                doubts.append(list(error.ids))
            except StorageError as error:
                errors.append(type(error).__name__)
                # nothing was committed by this call; an earlier doubt, if any, was settled
                # as not committed before it failed: a fresh append is safe
                doubt = None
            time.sleep(0.05 * (attempt + 1))
        if outcome != "ok" and doubt is not None:
            outcome = "unknown"
        self.record(
            op="append",
            app=app,
            keys=keys,
            t0=t0,
            t1=time.time(),
            outcome=outcome,
            ids=ids,
            doubts=doubts,
            errors=errors,
        )
        return outcome

    def turn(self, app: str) -> None:
        """A user message, then one streamed turn through the collector: a tool call, its
        result (flushed when reported), the final text (flushed at the turn's end)."""
        if self.append(app, [UserMessage(text=self.key("user"))]) != "ok":
            return
        call = self.key("call")
        keys = [f"req:{call}", self.key("result"), self.key("answer")]
        errors: list[str] = []
        t0 = time.time()
        outcome = "ok"
        try:
            with self.store.collector(app, f"user-{self.index}") as turn:
                turn.on_tool_call_delta(0, id=call, name="lookup", arguments='{"q": 1}')
                try:
                    turn.on_tool_executed(call, keys[1])
                except StorageError as error:  # kept; the next flush writes (or settles) it
                    errors.append(type(error).__name__)
                turn.on_text(keys[2])
        except MemstoreError as error:
            errors.append(type(error).__name__)
            outcome = "failed"
        self.record(
            op="turn", app=app, keys=keys, t0=t0, t1=time.time(), outcome=outcome, errors=errors
        )

    def read(self, app: str, kind: str) -> None:
        t0 = time.time()
        try:
            if kind == "cached":
                window = self.store.memory(app).messages()
            else:
                window = self.store.load_window(app, self.cfg["reload_max"])
        except MemstoreError as error:
            self.record(
                op="read", kind=kind, app=app, t0=t0, t1=time.time(), error=type(error).__name__
            )
            return
        keys = [message_key(m) for m in window]
        self.record(op="read", kind=kind, app=app, t0=t0, t1=time.time(), keys=keys)

    def simple(self, op: str, app: str) -> None:
        t0 = time.time()
        fields: dict[str, Any] = {}
        try:
            if op == "reload":
                self.store.reload(app)
            elif op == "prune":
                reports = self.store.prune(keep_last=self.cfg["keep_last"], app_ids=[app])
                fields["deleted"] = sum(r.original_rows for r in reports)
            else:
                self.store.purge(app)
        except MemstoreError as error:
            fields["error"] = type(error).__name__
        self.record(op=op, app=app, t0=t0, t1=time.time(), **fields)

    def cli_reload(self, app: str) -> None:
        """``memstore reload APP`` in a child process (the CLI's path)."""
        t0 = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "memstore", "reload", app],
            env={
                **os.environ,
                "MEMSTORE_DATABASE_URL": self.cfg["database_url"],
                "MEMSTORE_REDIS_URL": self.cfg["redis_url"],
            },
            capture_output=True,
            timeout=120,
            check=False,
        )
        self.record(op="cli_reload", app=app, t0=t0, t1=time.time(), rc=done.returncode)

    # -- the loop ------------------------------------------------------------------------------

    def step(self) -> None:
        apps = self.cfg["apps"]
        op = self.rng.choices(list(OPS), weights=list(OPS.values()))[0]
        self.seq += 1
        main = self.rng.choice(apps["main"])
        if op in ("append", "add_all"):
            size = self.rng.randint(1, 3)
            batch: list[Message] = [UserMessage(text=self.key("u"))]
            batch += [AiMessage(text=self.key(f"a{k}")) for k in range(1, size)]
            self.append(main, batch, via_memory=op == "add_all")
        elif op == "turn":
            self.turn(main)
        elif op == "read":
            self.read(self.rng.choice(apps["main"] + apps["prune"] + apps["purge"]), "cached")
        elif op == "load_window":
            self.read(self.rng.choice(apps["main"] + apps["prune"] + apps["purge"]), "sql")
        elif op == "reload":
            self.simple("reload", main)
        elif op == "side_append":
            side = self.rng.choice(apps["prune"] + apps["purge"])
            self.append(side, [UserMessage(text=self.key("u")), AiMessage(text=self.key("a"))])
        elif op == "prune":
            self.simple("prune", self.rng.choice(apps["prune"]))
        else:
            self.simple("purge", self.rng.choice(apps["purge"]))

    def run(self) -> None:
        cfg = self.cfg
        time.sleep(max(0.0, cfg["start_at"] - time.time()))
        deadline = cfg["start_at"] + cfg["duration"]
        cli_at = cfg.get("cli_reload_at")
        while time.time() < deadline:
            if cli_at is not None and time.time() >= cfg["start_at"] + cli_at:
                cli_at = None
                self.cli_reload(cfg["apps"]["main"][0])
                continue
            self.step()
            time.sleep(cfg["pause"])
        self.record(op="done", t0=time.time())
        self.store.close()
        self.log.close()


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        cfg = json.load(handle)
    Worker(cfg).run()


if __name__ == "__main__":
    main()
