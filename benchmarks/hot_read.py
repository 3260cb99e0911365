"""How much does memstore add on top of Redis for a hot window read?

A 60-message window (a realistic mix of user, AI text, parallel tool calls and results) is
cached in a real Redis; ``store.memory(app).messages()`` is timed against a raw redis-py
``LRANGE`` of the same key, call for call in alternating order, plus the pieces of memstore's
read path so the difference can be attributed. The history behind the window (only written
to fill it) lives in a temporary SQLite file; the app id is unique and purged afterwards.
With ``--profile`` it also prints a cProfile of the read and times what-if prototypes of the
suggested optimisations (benchmark-only code; memstore itself is not changed).

    python -m benchmarks.hot_read [--quick] [--profile] [--redis-url redis://127.0.0.1:6379/14]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, cast

import redis
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model, model_validator

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
from memstore import MemoryStore, Settings
from memstore.cache import keys
from memstore.cache.base import CachedWindow, WindowPolicy, decode_entries
from memstore.cache.redis_window import RedisWindowCache
from memstore.core.window import answer_open_group
from memstore.messages import (
    AiMessage,
    Message,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)

WINDOW_SIZE = 60
RATIO_TARGET = 2.0
"""memstore's hot read / the raw LRANGE must be at most this."""


@dataclass(frozen=True)
class Plan:
    rounds: int
    warmup: int
    profile_calls: int


FULL = Plan(rounds=6_000, warmup=500, profile_calls=3_000)
QUICK = Plan(rounds=1_500, warmup=200, profile_calls=1_000)


def fill_window(store: MemoryStore, app_id: str, seed: int) -> int:
    """Write a conversation and cache a window of exactly ``WINDOW_SIZE`` messages if the trim
    rule allows (a tool group at the edge is kept whole); return the cached length."""
    texts = TextSource(seed)
    maker = TurnMaker(texts)
    rng = random.Random(f"{seed}-hot")
    written = 0
    while written < 2 * WINDOW_SIZE:
        turn = maker.turn(rng)
        store.append(app_id, turn)
        written += len(turn)
    store.memory(app_id).messages()  # a miss: rebuilt from SQL and cached
    cache = store.cache
    assert isinstance(cache, RedisWindowCache)
    length = int(cache.client.llen(keys.window_key(app_id)))
    for _ in range(20):  # appends trim the cached window to WINDOW_SIZE, group-safe
        if length == WINDOW_SIZE:
            break
        store.append(app_id, maker.turn(rng))
        question = UserMessage(text=texts.text(rng, 120, 600))
        store.append(app_id, [question, AiMessage(text=texts.text(rng, 300, 900))])
        length = int(cache.client.llen(keys.window_key(app_id)))
    return length


def profile_read(read: Callable[[], object], calls: int, top: int = 18) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        read()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


class _PlainModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_shape(self: Any) -> Any:
    original_check: Any = vars(AiMessage)["_check_shape"]  # the plain function
    return original_check(self)


def validator_free_adapter(*, keep_shape_check: bool) -> TypeAdapter[list[Any]]:
    """A what-if: the message models with the same fields and config, minus the per-instance
    ``_typed_errors`` wrap validator (and ``AiMessage._check_shape`` unless kept)."""

    def clone(model: type[BaseModel], **overrides: Any) -> type[BaseModel]:
        fields: dict[str, Any] = {
            name: (overrides.get(name, info.annotation), info)
            for name, info in model.model_fields.items()
        }
        validators: dict[str, Any] = {}
        if model is AiMessage and keep_shape_check:
            validators["_check_shape"] = model_validator(mode="after")(_check_shape)
        return create_model(
            f"WhatIf{model.__name__}",
            __base__=_PlainModel,
            __validators__=validators,
            **fields,
        )

    request = clone(ToolRequest)
    models = (
        clone(UserMessage),
        clone(AiMessage, tool_requests=list[request]),  # type: ignore[valid-type]
        clone(ToolResult),
        clone(SystemMessage),
    )
    union: Any = Union[models]  # noqa: UP007 - a union of classes made at run time
    return TypeAdapter(list[Annotated[union, Field(discriminator="type")]])


class MemoizedDecodeCache(RedisWindowCache):
    """A what-if: ``RedisWindowCache`` whose reads reuse the message decoded from the same
    entry bytes last time (the in-process cache shares instances the same way)."""

    def __init__(self, client: redis.Redis, policy: WindowPolicy) -> None:
        super().__init__(client, policy)
        self._decoded: dict[bytes, Message] = {}

    def _decode(self, raw: list[bytes]) -> list[Message]:
        missing = [item for item in raw if item not in self._decoded]
        if missing:
            if len(self._decoded) > 10_000:
                self._decoded.clear()
            self._decoded.update(zip(missing, decode_entries(missing), strict=True))
        return [self._decoded[item] for item in raw]

    def read(self, app_id: str) -> CachedWindow:
        def action() -> CachedWindow:
            pipe = self.client.pipeline(transaction=False)
            pipe.lrange(keys.window_key(app_id), 0, -1)
            pipe.get(keys.version_key(app_id))
            raw, version = pipe.execute()
            token = version.decode() if version is not None else ""
            return CachedWindow(self._decode(raw) if raw else None, token)

        result = self._call("read", app_id, action, dirty=False)
        return result if result is not None else CachedWindow(None, "\x00unavailable")


def what_if(
    store: MemoryStore, app_id: str, raw: list[bytes], client: redis.Redis, plan: Plan
) -> str:
    """Time prototypes of the suggested optimisations against the same raw baseline."""
    body = b"[" + b",".join(item[item.index(b"\x1e") + 1 :] for item in raw) + b"]"
    no_wrap = validator_free_adapter(keep_shape_check=True)
    no_validators = validator_free_adapter(keep_shape_check=False)
    reference = [m.model_dump() for m in decode_entries(raw)]
    for adapter in (no_wrap, no_validators):
        if [m.model_dump() for m in adapter.validate_json(body)] != reference:
            raise RuntimeError("a what-if adapter decodes the window differently")
    policy = WindowPolicy(WINDOW_SIZE, store.settings.cache_ttl_seconds)
    memo_store = MemoryStore(
        store.settings, engine=store.engine, cache=MemoizedDecodeCache(client, policy)
    )
    key = keys.window_key(app_id)
    calls: list[Callable[[], object]] = [
        lambda: client.lrange(key, 0, -1),
        lambda: store.memory(app_id).messages(),
        lambda: memo_store.memory(app_id).messages(),
        lambda: decode_entries(raw),
        lambda: no_wrap.validate_json(body),
        lambda: no_validators.validate_json(body),
    ]
    raw_s, ours, memo, decode, decode_no_wrap, decode_none = time_interleaved(
        calls, warmup=plan.warmup, rounds=max(1_000, plan.rounds // 3)
    )
    base = raw_s.median
    rows = [
        [
            "memstore today (`store.memory(app).messages()`)",
            us(ours.median),
            ratio(ours.median / base),
            "measured",
        ]
    ]
    for text, sample in (
        ("without the `_typed_errors` wrap validator (messages.py)", decode_no_wrap),
        ("without `_typed_errors` and `AiMessage._check_shape`", decode_none),
    ):
        estimate = ours.median - (decode.median - sample.median)
        rows.append(
            [
                text,
                us(estimate),
                ratio(estimate / base),
                f"estimated: decode {us(decode.median)} -> {us(sample.median)} µs",
            ]
        )
    rows.append(
        [
            "decode memo per entry bytes (shared frozen instances)",
            us(memo.median),
            ratio(memo.median / base),
            "measured",
        ]
    )
    return (
        f"What-if prototypes (benchmark-only code, not memstore), raw LRANGE = {us(base)} µs:"
        "\n\n" + markdown_table(["read path", "median µs", "vs raw", "how"], rows, align="lrrl")
    )


def run(options: Options, log: Callable[[str], None] = print) -> Report:
    plan = QUICK if options.quick else FULL
    report = Report("hot_read: cached window read vs raw redis-py LRANGE")
    app_id = f"memstore-bench-hot-{uuid.uuid4().hex}"
    raw_client = redis.Redis.from_url(options.redis_url)
    raw_client.ping()
    settings_kwargs = {
        "redis_url": options.redis_url,
        "window_size": WINDOW_SIZE,
        "reload_max": WINDOW_SIZE,
    }
    with (
        scratch_database("sqlite", options, "hot") as url,
        MemoryStore(Settings(database_url=url, **settings_kwargs)) as store,
    ):
        try:
            length = fill_window(store, app_id, options.seed)
            cache = store.cache
            assert isinstance(cache, RedisWindowCache)
            key = keys.window_key(app_id)
            raw = cast(list[bytes], raw_client.lrange(key, 0, -1))
            size = sum(len(item) for item in raw)
            expected = store.memory(app_id).messages()
            if decode_entries(raw) != expected:
                raise RuntimeError("the raw window does not decode to what memstore returned")

            calls: dict[str, Callable[[], object]] = {
                "memstore": lambda: store.memory(app_id).messages(),
                "raw": lambda: raw_client.lrange(key, 0, -1),
                "cache.read": lambda: cache.read(app_id),
                "decode": lambda: decode_entries(raw),
                "answer_open_group": lambda: answer_open_group(expected),
            }
            log(f"hot_read: timing {plan.rounds:,} alternating rounds ...")
            samples = dict(
                zip(
                    calls,
                    time_interleaved(list(calls.values()), warmup=plan.warmup, rounds=plan.rounds),
                    strict=True,
                )
            )
            profile = what_if_table = ""
            if options.profile:
                log("hot_read: profiling and timing the what-if prototypes ...")
                profile = profile_read(calls["memstore"], plan.profile_calls)
                what_if_table = what_if(store, app_id, raw, raw_client, plan)
        finally:
            store.purge(app_id)
            raw_client.close()

    ours, base = samples["memstore"], samples["raw"]
    measured = ours.median / base.median
    report.checks.append(
        Check(
            "redis",
            "memstore read / raw LRANGE",
            f"<= {RATIO_TARGET:.0f}x",
            ratio(measured),
            measured <= RATIO_TARGET,
        )
    )
    parser = "hiredis" if redis.utils.HIREDIS_AVAILABLE else "pure-Python RESP parser"
    report.blocks.append(
        f"Window: {length} messages, {size:,} bytes in Redis ({parser}, redis-py "
        f"{redis.__version__}). Times in µs per call, {ours.runs:,} calls each, alternating."
    )
    overhead = ours.median - base.median
    rows = [
        ["`client.lrange(window_key, 0, -1)` (baseline)", us(base.median), us(base.p95), "1.00x"],
        ["`store.memory(app).messages()`", us(ours.median), us(ours.p95), ratio(measured)],
    ]
    report.blocks.append(markdown_table(["read", "median µs", "p95 µs", "vs raw"], rows))
    report.blocks.append(
        f"memstore adds {us(overhead)} µs per hot read over the raw `LRANGE` (difference of "
        "the medians)."
    )
    parts = [
        ("`decode_entries` (pydantic, 60 messages, no I/O)", "decode"),
        ("`answer_open_group` (no I/O)", "answer_open_group"),
        ("`RedisWindowCache.read` (round trip + decode)", "cache.read"),
    ]
    report.blocks.append(
        markdown_table(
            ["where the time goes", "median µs", "share of memstore read"],
            [
                [text, us(samples[name].median), f"{samples[name].median / ours.median:.0%}"]
                for text, name in parts
            ],
        )
    )
    report.blocks.append(checks_table(report.checks))
    if profile:
        report.blocks.append(
            "cProfile of the memstore read (top by own time):\n\n```\n" + profile.strip() + "\n```"
        )
        report.blocks.append(what_if_table)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(run, argv, __doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
