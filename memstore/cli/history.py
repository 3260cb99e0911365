"""Reading what is stored: ``memstore show`` (one app's window, histories or guard records),
``memstore check`` (provider-invalid spots, with ``--repair``) and ``memstore stats``."""

from __future__ import annotations

from collections import deque
from datetime import datetime, timezone
from typing import Any

import click

from memstore import operations
from memstore.cache.keys import WINDOW_PATTERN
from memstore.cache.redis_window import RedisWindowCache
from memstore.cli._bulk import Skipped, _apps, _each_app
from memstore.cli._common import (
    EXIT_FINDINGS,
    Target,
    _open,
    all_option,
    database_option,
    json_option,
    redis_option,
    store_options,
)
from memstore.cli._output import PROVIDER_FORMATS, _emit_json, _provider_format, terminal_safe
from memstore.core.fingerprint import GUARD_MARK
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id
from memstore.core.summary import summary_info
from memstore.demo import describe
from memstore.ids import id_timestamp_ms
from memstore.messages import Message, ToolResult
from memstore.reports import DisplayEntry
from memstore.sql import admin
from memstore.store import MemoryStore


@click.command()
@click.argument("app_id")
@click.option("--window", is_flag=True, help="What the model gets (default).")
@click.option("--original", is_flag=True, help="The raw original history.")
@click.option("--display", is_flag=True, help="The display history.")
@click.option(
    "--executions", is_flag=True, help="The loop guard's records of side-effecting tool calls."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", *PROVIDER_FORMATS]),
    default="table",
    help="A readable table, memstore's JSON, or a provider's request format.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=MAX_WINDOW_MESSAGES),
    default=None,
    help="Most messages/rows.",
)
@store_options
def show(
    app_id: str,
    window: bool,
    original: bool,
    display: bool,
    executions: bool,
    fmt: str,
    limit: int | None,
    store_target: Target,
) -> None:
    """Show APP_ID's window, original history, display history or guard records.

    Tool results that are loop-guard verdicts are marked ``[guard: <status>]``; a
    compaction's summary is marked ``[summary of ids FIRST..LAST: N messages]`` (the range
    it covers).
    """
    chosen = [
        name
        for name, on in (
            ("window", window),
            ("original", original),
            ("display", display),
            ("executions", executions),
        )
        if on
    ]
    if len(chosen) > 1:
        raise click.UsageError(
            "give one view: " + " or ".join(f"--{name}" for name in chosen) + ", not several"
        )
    view = chosen[0] if chosen else "window"
    if fmt in PROVIDER_FORMATS and view not in ("window", "original"):
        raise click.UsageError(f"--format {fmt} applies to --window and --original only")
    with store_target.open() as store:
        app = normalize_app_id(app_id)
        store_target.require_known(store, [app])
        if view == "display":
            _show_display(store.history(app, limit=min(limit or 20, 1000)), fmt)
            return
        if view == "executions":
            _show_executions(store, app, limit or 100, fmt)
            return
        rows: list[tuple[int | None, Message]]
        if view == "window":
            messages = store.load_window(app, limit or store.settings.reload_max)
            rows = [(None, message) for message in messages]
        else:
            newest = deque(admin.iter_history(store.engine, app, store.cipher), limit)
            rows = [(row.id, row.message) for row in newest]
        if fmt in PROVIDER_FORMATS:
            _emit_json(_provider_format([message for _, message in rows], fmt))
        elif fmt == "json":
            _emit_json([{"id": row_id, **m.model_dump(mode="json")} for row_id, m in rows])
        else:
            for row_id, message in rows:
                prefix = f"{row_id}  " if row_id is not None else ""
                line = describe(message) + _guard_mark(message) + _summary_mark(message)
                line = terminal_safe(line)
                click.echo(prefix + line.replace("\n", "\n" + " " * len(prefix)))


def _guard_mark(message: Message) -> str:
    if isinstance(message, ToolResult) and GUARD_MARK in message.metadata:
        return f"  [guard: {message.metadata[GUARD_MARK]}]"
    return ""


def _summary_mark(message: Message) -> str:
    info = summary_info(message)
    if info is None:
        return ""
    return f"  [summary of ids {info.first_id}..{info.last_id}: {info.messages} messages]"


def _show_display(entries: list[DisplayEntry], fmt: str) -> None:
    if fmt == "json":
        _emit_json([entry.model_dump(mode="json") for entry in entries])
        return
    for entry in reversed(entries):
        click.echo(
            f"{entry.id}  {entry.role:<5} {entry.status:<6} "
            + terminal_safe(entry.text).replace("\n", "\n" + " " * 33)
        )


def _show_executions(store: MemoryStore, app_id: str, limit: int, fmt: str) -> None:
    from memstore.guard import LoopGuard

    records = LoopGuard(store).executions(app_id, limit=limit)
    if fmt == "json":
        _emit_json([record.model_dump(mode="json") for record in records])
        return
    for record in records:
        click.echo(
            f"{record.updated_at:%Y-%m-%d %H:%M:%S}  {record.state:<9} "
            f"{terminal_safe(record.tool_name)}  "
            f"attempts={record.attempts}  key={record.idempotency_key[:24]}"
        )


@click.command()
@click.argument("app_ids", nargs=-1)
@all_option
@click.option("--repair", is_flag=True, help="Fix what has a fix, one transaction per app.")
@json_option("Print findings as JSON.")
@store_options
def check(
    app_ids: tuple[str, ...],
    all_apps: bool,
    repair: bool,
    as_json: bool,
    store_target: Target,
) -> None:
    """Report provider-invalid spots of original histories.

    Exit 1 when any is found (with --repair: when any remains that has no automatic fix).
    """
    apps = _apps(app_ids, all_apps)
    with store_target.open() as store:
        store_target.require_known(store, apps)
        found = 0
        results = []
        skipped = Skipped()

        def check_one(app: str) -> operations.CheckResult:
            if repair:
                return operations.repair_app(store, app)
            return operations.CheckResult(app, operations.check_app(store, app))

        try:
            for _app, result in _each_app(store, apps, "checking", skipped, check_one):
                if result.repaired is None:
                    found += len(result.findings)
                else:
                    found += result.repaired.unfixable
                if as_json and (result.findings or not all_apps):
                    results.append(_check_json(result))  # --all lists only apps with findings
                else:
                    _print_check(result)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise SystemExit(EXIT_FINDINGS) from None
        if as_json:
            _emit_json(results)
        skipped.finish()
        if found:
            raise SystemExit(EXIT_FINDINGS)


def _check_json(result: operations.CheckResult) -> dict[str, object]:
    data: dict[str, object] = {
        "app_id": result.app_id,
        "findings": [
            {"row_id": f.row_id, "code": f.code, "detail": f.detail, "call_id": f.call_id}
            for f in result.findings
        ],
    }
    if result.repaired is not None:
        data["answered"] = [answer.id for answer in result.repaired.answers]
        data["soft_deleted"] = result.repaired.soft_delete_row_ids
    return data


def _print_check(result: operations.CheckResult) -> None:
    for finding in result.findings:
        click.echo(f"{result.app_id}: row {finding.row_id}: {finding.code}: {finding.detail}")
    if result.repaired is not None and not result.repaired.empty:
        for answer in result.repaired.answers:
            click.echo(f"{result.app_id}: answered {answer.id!r} with an interrupted result")
        for row_id in result.repaired.soft_delete_row_ids:
            click.echo(f"{result.app_id}: soft-deleted orphan row {row_id}")


@click.command()
@json_option("Print as JSON.")
@database_option
@redis_option
def stats(as_json: bool, database_url: str | None, redis_url: str | None) -> None:
    """Apps, rows per table and type, cached windows, oldest and newest message."""
    with _open(database_url, redis_url) as store:
        numbers = admin.stats(store.engine)
        windows = _count_windows(store)
        data = {
            "apps": numbers.apps,
            "original_rows": numbers.original_rows,
            "display_rows": numbers.display_rows,
            "rows_by_type": numbers.rows_by_type,
            "redis_windows": windows,
            "oldest": _when(numbers.oldest_id),
            "newest": _when(numbers.newest_id),
        }
        if as_json:
            _emit_json(data)
            return
        by_type = ", ".join(
            f"{kind} {count}" for kind, count in sorted(numbers.rows_by_type.items())
        )
        for label, shown in (
            ("apps", numbers.apps),
            ("original rows", numbers.original_rows),
            ("display rows", numbers.display_rows),
            ("rows by type", by_type or "none"),
            ("redis windows", "no Redis configured" if windows is None else windows),
            ("oldest", _when_text(data["oldest"])),
            ("newest", _when_text(data["newest"])),
        ):
            click.echo(f"{label}: {shown}")


def _when(row_id: int | None) -> dict[str, Any] | None:
    """A message's time (from its snowflake id) and id, as separate fields."""
    if row_id is None:
        return None
    stamp = datetime.fromtimestamp(id_timestamp_ms(row_id) / 1000, tz=timezone.utc)
    return {"at": stamp.isoformat(timespec="seconds"), "id": row_id}


def _when_text(when: object) -> str:
    if not isinstance(when, dict):
        return "none"
    return f"{when['at']} (id {when['id']})"


def _count_windows(store: MemoryStore) -> int | None:
    cache = store.cache
    if not isinstance(cache, RedisWindowCache):
        return None
    return sum(1 for _ in cache.client.scan_iter(match=WINDOW_PATTERN, count=1000))
