"""What does encryption at rest (``MEMSTORE_ENCRYPTION_KEYS``) cost?

On each database, two stores share one scratch database: one without keys, one with a key.
Each has its own app holding the same messages. In alternating rounds it times, for both:

* ``load_window(app, 60)``: 60 rows read from SQL, each payload opened (AES-256-GCM) and parsed;
* a hit of a Redis-cached window (fakeredis, in-process: the codec's share without network
  noise), each entry opened;
* ``append`` of one user message (one payload and one display text sealed).

The ratio sealed / plain of each pair is the figure; both sides run in the same rounds.

    python -m benchmarks.encryption [--quick] [--databases sqlite,postgres]
"""

from __future__ import annotations

import base64
import os
import random
import uuid
from collections.abc import Callable, Sequence

import fakeredis

from benchmarks.common import (
    Check,
    Options,
    Report,
    checks_table,
    markdown_table,
    ratio,
    run_main,
    scratch_database,
    time_interleaved,
    us,
)
from benchmarks.dataset import TextSource, TurnMaker
from memstore import MemoryStore, Settings, UserMessage
from memstore.cache.base import WindowPolicy
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.crypto import parse_keys
from memstore.messages import Message

WINDOW = 60
LOAD_RATIO_TARGET = 2.0
"""``load_window`` with encryption must cost at most this many times the plain one."""


def _store(url: str, keys: str | None) -> MemoryStore:
    settings = Settings(
        database_url=url,
        window_size=WINDOW,
        reload_max=WINDOW,
        encryption_keys=parse_keys(keys),
    )
    cache = RedisWindowCache(fakeredis.FakeRedis(), WindowPolicy.from_settings(settings))
    return MemoryStore(settings, cache=cache)


def measure(url: str, seed: int, rounds: int, warmup: int) -> list[tuple[str, float, float]]:
    """``(call, median sealed / median plain, median plain)`` per timed call pair, and the
    samples' medians in seconds."""
    key = base64.b64encode(os.urandom(32)).decode()
    plain, sealed = _store(url, None), _store(url, f"bench:{key}")
    try:
        rng = random.Random(seed)
        maker = TurnMaker(TextSource(seed))
        turns: list[Message] = []
        while len(turns) < WINDOW + 10:
            turns.extend(maker.turn(rng))
        apps = {}
        for name, store in (("plain", plain), ("sealed", sealed)):
            app = f"bench-crypto-{name}-{uuid.uuid4().hex[:8]}"
            for start in range(0, len(turns), 8):
                store.append(app, turns[start : start + 8])
            store.memory(app).messages()  # cached
            apps[name] = app
        writes = {name: f"{apps[name]}-w" for name in apps}

        def calls(store: MemoryStore, name: str) -> list[Callable[[], object]]:
            app = apps[name]
            return [
                lambda: store.load_window(app, WINDOW),
                lambda: store.memory(app).messages(),
                lambda: store.append(writes[name], [UserMessage(text="hello there")]),
            ]

        samples = time_interleaved(
            [*calls(plain, "plain"), *calls(sealed, "sealed")], warmup=warmup, rounds=rounds
        )
        names = ["`load_window(app, 60)`", "Redis-cached window hit", "`append` 1 message"]
        return [(names[i], samples[i].median, samples[i + 3].median) for i in range(len(names))]
    finally:
        plain.close()
        sealed.close()


def run(options: Options, log: Callable[[str], None] = print) -> Report:
    rounds, warmup = (100, 10) if options.quick else (600, 50)
    report = Report("encryption: AES-256-GCM at rest, sealed vs plain")
    rows: list[list[str]] = []
    for database in options.databases:
        log(f"encryption: {database}, {rounds:,} alternating rounds ...")
        with scratch_database(database, options, "crypto") as url:
            results = measure(url, options.seed, rounds, warmup)
        for name, plain, sealed in results:
            rows.append([database, name, us(plain), us(sealed), ratio(sealed / plain)])
        load_plain, load_sealed = results[0][1], results[0][2]
        report.checks.append(
            Check(
                database,
                "load_window sealed / plain",
                f"<= {LOAD_RATIO_TARGET:.1f}",
                f"{load_sealed / load_plain:.2f}",
                load_sealed / load_plain <= LOAD_RATIO_TARGET,
            )
        )
    report.blocks.append(
        f"Window of {WINDOW} messages; median µs per call, plain and sealed in the same "
        "alternating rounds."
    )
    report.blocks.append(
        markdown_table(["database", "call", "plain µs", "sealed µs", "sealed / plain"], rows)
    )
    if report.checks:
        report.blocks.append(checks_table(report.checks))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
