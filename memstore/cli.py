"""The ``memstore`` command line (also ``python -m memstore``)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import click

from memstore import __version__, operations
from memstore.cache.keys import WINDOW_PATTERN
from memstore.cache.memory_cache import NoWindowCache
from memstore.cache.redis_window import RedisWindowCache
from memstore.config import Settings
from memstore.core.fingerprint import GUARD_MARK
from memstore.core.inputs import MAX_WINDOW_MESSAGES, normalize_app_id
from memstore.core.summary import summary_info
from memstore.demo import describe
from memstore.errors import ConfigurationError, MemstoreError
from memstore.ids import id_timestamp_ms
from memstore.importers import SOURCES, SessionImport, convert, import_session
from memstore.messages import Message, ToolResult
from memstore.reload_workers import MAX_WORKERS as MAX_RELOAD_WORKERS
from memstore.reload_workers import reload_in_workers
from memstore.reports import DisplayEntry
from memstore.sql import admin
from memstore.store import MemoryStore

audit = logging.getLogger("memstore.audit")

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


def _settings(database_url: str | None, redis_url: str | None) -> Settings:
    overrides: dict[str, str] = {}
    if database_url:
        overrides["database_url"] = database_url
    if redis_url:
        overrides["redis_url"] = redis_url
    return Settings.from_env(None, **overrides)


database_option = click.option(
    "--database-url", envvar="MEMSTORE_DATABASE_URL", help="SQLAlchemy URL (MEMSTORE_DATABASE_URL)."
)
redis_option = click.option(
    "--redis-url", envvar="MEMSTORE_REDIS_URL", help="Redis URL (MEMSTORE_REDIS_URL)."
)


@click.group()
@click.version_option(__version__, prog_name="memstore")
def cli() -> None:
    """memstore: chat memory for tool-calling agents that survives restarts."""


@cli.command()
@click.option(
    "--database-url",
    default=None,
    help="Run the story on this database instead of a throwaway SQLite file.",
)
def demo(database_url: str | None) -> None:
    """Show an agent turn with tool calls surviving a restart that loses the cache."""
    from memstore.demo import run_demo

    run_demo(database_url)


@cli.command()
@click.argument("action", type=click.Choice(["upgrade", "downgrade", "current"]), default="upgrade")
@click.argument("revision", required=False)
@click.option("--yes", is_flag=True, help="Downgrade without asking; required without a terminal.")
@database_option
def migrate(action: str, revision: str | None, yes: bool, database_url: str | None) -> None:
    """Bring the schema to head (default), downgrade to REVISION, or print the current one.

    A downgrade drops the tables and columns of every revision after REVISION, with their
    data: it lists them and asks first (--yes without a terminal).
    """
    from memstore.sql import migrate as migrations

    store = MemoryStore(_settings(database_url, None))
    try:
        if action == "current":
            click.echo(migrations.current_revision(store.engine) or "none")
        elif action == "downgrade":
            if not revision:
                raise click.UsageError("downgrade needs a REVISION (e.g. base)")
            current = migrations.current_revision(store.engine)
            undone = migrations.revisions_undone(current, revision)
            if not undone:
                click.echo(f"already at {revision}; nothing to undo", err=True)
                return
            click.echo(f"downgrade from {current} to {revision} undoes:", err=True)
            for rev, description in undone:
                click.echo(f"  {rev}  {description}", err=True)
            if not yes:
                if not sys.stdin.isatty():
                    click.echo("refusing to downgrade without a terminal; pass --yes", err=True)
                    raise SystemExit(EXIT_FINDINGS)
                if not click.confirm("Drop these tables and columns with their data?", err=True):
                    raise SystemExit(EXIT_FINDINGS)
            migrations.downgrade(store.engine, revision)
            click.echo(f"downgraded to {revision}")
        else:
            migrations.upgrade(store.engine, revision or "head")
            click.echo(f"upgraded to {migrations.current_revision(store.engine)}")
    finally:
        store.close()


def _open(database_url: str | None, redis_url: str | None) -> MemoryStore:
    settings = _settings(database_url, redis_url)
    _require_existing_sqlite(settings.database_url)
    if settings.redis_url:
        return MemoryStore(settings)
    # Without Redis the windows live in the service's own process: a window this command
    # built would die with it (and `reload --all` would hold every app's window in memory).
    return MemoryStore(settings, cache=NoWindowCache())


def _require_existing_sqlite(database_url: str) -> None:
    """Commands other than ``migrate`` and ``demo`` never create a database: a SQLite path
    that does not exist (a typo, another folder) is named instead of becoming an empty file."""
    from sqlalchemy.engine import make_url

    from memstore.sql.engine import is_memory_sqlite

    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or is_memory_sqlite(url) or url.database is None:
        return
    path = url.database
    if path.startswith("file:"):
        return  # a URI: SQLite's own options decide
    if not os.path.exists(path):
        raise ConfigurationError(
            f"no SQLite database at {path!r}; create it with `memstore migrate`"
        )


def _emit_json(data: object) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, default=str, indent=2))


def _apps(app_ids: tuple[str, ...], all_apps: bool) -> list[str] | None:
    """The explicit apps (normalized), or ``None`` for ``--all``; usage errors first."""
    if all_apps and app_ids:
        raise click.UsageError("give APP_IDs or --all, not both")
    if not all_apps and not app_ids:
        raise click.UsageError("give at least one APP_ID, or --all")
    return None if all_apps else [normalize_app_id(app) for app in app_ids]


class Skipped:
    """The apps a bulk command (``--all``) could not handle: it reports each and goes on, and
    exits 1 with the list at the end instead of stopping at the first."""

    def __init__(self) -> None:
        self.apps: list[tuple[str, str]] = []

    def add(self, app_id: str, error: Exception) -> None:
        self.apps.append((app_id, f"{type(error).__name__}: {error}"))

    def json(self) -> list[dict[str, str]]:
        return [{"app_id": app, "error": why} for app, why in self.apps]

    def finish(self) -> None:
        """Print the skipped apps (stderr) and exit 1 when there are any."""
        if not self.apps:
            return
        click.echo(f"skipped {len(self.apps)} app(s) that could not be handled:", err=True)
        for app, why in self.apps:
            click.echo(f"  {terminal_safe(repr(app))}: {terminal_safe(why)}", err=True)
        raise SystemExit(EXIT_FINDINGS)


missing_ok_option = click.option(
    "--missing-ok", is_flag=True, help="Accept an APP_ID that has no rows (else exit 1)."
)


def _require_known(store: MemoryStore, apps: list[str] | None, missing_ok: bool) -> None:
    """An explicit APP_ID with no rows at all is a typo until told otherwise: name it and
    exit 1 before doing anything (``--missing-ok`` accepts it)."""
    if missing_ok or not apps:
        return
    unknown = admin.unknown_apps(store.engine, apps)
    if unknown:
        names = ", ".join(terminal_safe(repr(app)) for app in unknown)
        click.echo(f"no rows for app id(s) {names}; pass --missing-ok to accept that", err=True)
        raise SystemExit(EXIT_FINDINGS)


def _walk(
    store: MemoryStore, apps: list[str] | None, label: str, skipped: Skipped | None = None
) -> Iterator[str]:
    """The apps to act on; with ``--all`` a progress bar on a terminal, paging through apps,
    and a stored app id that is not valid (an empty one another tool wrote, say) is passed
    over into ``skipped``."""
    if apps is not None:
        yield from apps
        return
    total = admin.count_apps(store.engine)
    with click.progressbar(
        admin.iter_app_ids(store.engine), length=total, label=label, file=sys.stderr
    ) as bar:
        for app in bar:
            try:
                yield normalize_app_id(app)
            except MemstoreError as error:
                if skipped is None:
                    raise
                skipped.add(app, error)


PROVIDER_FORMATS = ("openai", "anthropic", "langchain4j")
IMPORT_SOURCES = tuple(SOURCES)


@cli.command()
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
@missing_ok_option
@database_option
@redis_option
def show(
    app_id: str,
    window: bool,
    original: bool,
    display: bool,
    executions: bool,
    fmt: str,
    limit: int | None,
    missing_ok: bool,
    database_url: str | None,
    redis_url: str | None,
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
    with _open(database_url, redis_url) as store:
        app = normalize_app_id(app_id)
        _require_known(store, [app], missing_ok)
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


_TERMINAL_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""What a terminal acts on instead of showing: C0 and C1 controls (ESC starts colour changes,
screen clears, OSC 52 clipboard writes; newlines and tabs are kept) and the bidirectional
overrides that make text read differently from its order."""


def terminal_safe(text: str) -> str:
    """Chat text for a terminal: every control character shown as its escape (``\x1b``,
    ``\u202e``), never acted on. JSON output escapes them already."""
    return _TERMINAL_CONTROLS.sub(lambda match: ascii(match.group())[1:-1], text)


def _provider_format(messages: list[Message], fmt: str) -> object:
    from memstore import formats

    if fmt == "openai":
        return formats.to_openai(messages)
    if fmt == "anthropic":
        system, turns = formats.to_anthropic(messages)
        return {"system": system, "messages": turns}
    return formats.to_langchain4j(messages)


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


@cli.command()
@click.argument("app_ids", nargs=-1)
@click.option("--all", "all_apps", is_flag=True, help="Every app with history.")
@click.option(
    "--max",
    "max_messages",
    type=click.IntRange(min=1, max=MAX_WINDOW_MESSAGES),
    default=None,
    help="Messages per window (default MEMSTORE_RELOAD_MAX).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=MAX_RELOAD_WORKERS),
    default=1,
    show_default=True,
    help="Processes rebuilding windows side by side (about one per free core).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@missing_ok_option
@database_option
@redis_option
def reload(
    app_ids: tuple[str, ...],
    all_apps: bool,
    max_messages: int | None,
    workers: int,
    as_json: bool,
    missing_ok: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Rebuild cached windows from SQL with the edge check.

    Without a Redis URL there is no shared cache to fill: the windows are rebuilt and checked
    (the report counts hold) but kept nowhere; the service's own in-process windows rebuild
    themselves on their next miss. With --workers N, N processes rebuild the windows, each
    with its own connections (the reports keep the apps' order).
    """
    apps = _apps(app_ids, all_apps)
    with _open(database_url, redis_url) as store:
        _require_known(store, apps, missing_ok)
        if not store.settings.redis_url:
            click.echo(
                "note: no Redis URL; windows are rebuilt and checked but not cached", err=True
            )
        totals = {
            "apps": 0,
            "messages": 0,
            "widened_groups": 0,
            "interrupted_answered": 0,
            "orphans_skipped": 0,
        }
        reports: list[dict[str, Any]] = []
        skipped = Skipped()
        try:
            with _signals_stop_cleanly(), operations.bulk_collection():
                walk = _walk(store, apps, "reloading", skipped)
                reloaded = (
                    operations.reload_apps(store, walk, max_messages)
                    if workers == 1
                    else reload_in_workers(store.settings, walk, max_messages, workers=workers)
                )
                for report in reloaded:
                    if not all_apps:
                        reports.append(report.model_dump())
                    totals["apps"] += 1
                    for key in (
                        "messages",
                        "widened_groups",
                        "interrupted_answered",
                        "orphans_skipped",
                    ):
                        totals[key] += getattr(report, key)
        except KeyboardInterrupt as error:
            stopped = _stopped(error, f"after {totals['apps']} apps")
            _summary(totals, as_json)
            raise stopped from None
        if as_json:
            document: dict[str, Any] = {"summary": totals, "skipped": skipped.json()}
            if not all_apps:  # --all reports the summary only (one report per app is a lot)
                document = {"reports": reports, **document}
            _emit_json(document)
        else:
            for done in reports:
                click.echo(
                    f"{done['app_id']}: {done['messages']} messages, "
                    f"{done['widened_groups']} groups widened, "
                    f"{done['interrupted_answered']} interrupted calls answered, "
                    f"{done['orphans_skipped']} orphans skipped"
                    + ("" if done["cached"] else " (not cached)")
                )
            _summary(totals, False)
        skipped.finish()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a long command: it stops as on Ctrl-C (worker processes
    ended, what was done reported), then exits with ``128 + signal``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _signals_stop_cleanly() -> Iterator[None]:
    """SIGTERM and SIGHUP (``timeout``, ``kill``, systemd, Kubernetes) raise
    :class:`Terminated` in the main thread for the block, so the Ctrl-C path runs instead of
    the process dying with its workers left behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    wanted = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {signum: signal.signal(signum, stop) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _stopped(error: KeyboardInterrupt, done: str) -> SystemExit:
    """How a long command ends after Ctrl-C or a termination signal."""
    if isinstance(error, Terminated):
        click.echo(f"terminated by {signal.Signals(error.signum).name} {done}", err=True)
        return SystemExit(128 + error.signum)
    click.echo(f"interrupted {done}", err=True)
    return SystemExit(EXIT_FINDINGS)


def _summary(totals: dict[str, int], as_json: bool) -> None:
    if as_json:
        _emit_json({"summary": totals})
    else:
        click.echo(", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in totals.items()))


@cli.command()
@click.argument("app_ids", nargs=-1)
@click.option("--all", "all_apps", is_flag=True, help="Every app with history.")
@click.option("--repair", is_flag=True, help="Fix what has a fix, one transaction per app.")
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
@missing_ok_option
@database_option
@redis_option
def check(
    app_ids: tuple[str, ...],
    all_apps: bool,
    repair: bool,
    as_json: bool,
    missing_ok: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Report provider-invalid spots of original histories.

    Exit 1 when any is found (with --repair: when any remains that has no automatic fix).
    """
    apps = _apps(app_ids, all_apps)
    with _open(database_url, redis_url) as store:
        _require_known(store, apps, missing_ok)
        found = 0
        results = []
        skipped = Skipped()
        try:
            for app in _walk(store, apps, "checking", skipped):
                try:
                    if repair:
                        result = operations.repair_app(store, app)
                    else:
                        result = operations.CheckResult(app, operations.check_app(store, app))
                except MemstoreError as error:
                    if apps is not None:
                        raise
                    skipped.add(app, error)
                    continue
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


@cli.command()
@click.argument("app_ids", nargs=-1)
@click.option("--user-id", default=None, help="Purge every row written for this user instead.")
@click.option("--dry-run", is_flag=True, help="Only print what would be deleted.")
@click.option("--yes", is_flag=True, help="Do not ask; required without a terminal.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@missing_ok_option
@database_option
@redis_option
def purge(
    app_ids: tuple[str, ...],
    user_id: str | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    missing_ok: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Hard-delete APP_IDs (or --user-id) in both tables and the cache. Ids are exact."""
    if bool(app_ids) == (user_id is not None):
        raise click.UsageError("give APP_IDs or --user-id (one of them)")
    with _open(database_url, redis_url) as store:
        if user_id is not None:
            user = normalize_app_id(user_id, what="user_id")
            targets = [("user", user, admin.counts_for(store.engine, user_id=user))]
        else:
            named = [normalize_app_id(a) for a in app_ids]
            _require_known(store, named, missing_ok)
            targets = [("app", app, admin.counts_for(store.engine, app_id=app)) for app in named]
        for kind, target, counts in targets:
            click.echo(
                f"{kind} {target!r}: {counts.original_rows} original rows, "
                f"{counts.display_rows} display rows",
                err=as_json,
            )
        if dry_run:
            if as_json:
                _emit_json(
                    [
                        {
                            kind: t,
                            "original_rows": c.original_rows,
                            "display_rows": c.display_rows,
                            "dry_run": True,
                        }
                        for kind, t, c in targets
                    ]
                )
            return
        if not yes:
            if not sys.stdin.isatty():
                click.echo("refusing to purge without a terminal; pass --yes", err=True)
                raise SystemExit(EXIT_FINDINGS)
            if not click.confirm("Delete these rows permanently?", err=True):
                raise SystemExit(EXIT_FINDINGS)
        done = []
        for kind, target, _counts in targets:
            executions = 0
            if kind == "user":
                counts, _apps_touched = operations.purge_user(store, target)
                original_rows, display_rows = counts.original_rows, counts.display_rows
            else:
                report = store.purge(target)
                original_rows, display_rows = report.original_rows, report.display_rows
                executions = report.tool_executions
            audit.info(
                "purge %s=%r original_rows=%d display_rows=%d tool_executions=%d",
                kind,
                target,
                original_rows,
                display_rows,
                executions,
            )
            done.append(
                {
                    kind: target,
                    "original_rows": original_rows,
                    "display_rows": display_rows,
                    "tool_executions": executions,
                }
            )
            if not as_json:
                click.echo(
                    f"purged {kind} {target!r}: {original_rows} original rows, "
                    f"{display_rows} display rows, {executions} tool executions"
                )
        if as_json:
            _emit_json(done)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
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


@cli.command()
@click.option("--all", "show_all", is_flag=True, help="Also list leases that have lapsed.")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@database_option
def workers(show_all: bool, as_json: bool, database_url: str | None) -> None:
    """Leased snowflake worker ids: id, holder (host:pid), epoch, seconds until it lapses."""
    from memstore.sql.engine import make_engine
    from memstore.sql.leases import read_leases

    engine = make_engine(_settings(database_url, None).database_url)
    try:
        rows = [row for row in read_leases(engine) if show_all or not row.expired]
    finally:
        engine.dispose()
    data = [
        {
            "worker_id": row.worker_id,
            "holder": row.holder,
            "epoch": row.epoch,
            "expires_in_seconds": round(row.expires_in_seconds, 1),
            "expired": row.expired,
        }
        for row in rows
    ]
    if as_json:
        _emit_json(data)
        return
    if not data:
        click.echo("no live worker leases" if not show_all else "no worker leases")
        return
    click.echo(f"{'id':>4}  {'epoch':>6}  {'expires in':>10}  holder")
    for item in data:
        seconds = item["expires_in_seconds"]
        expires = "lapsed" if item["expired"] else f"{seconds:.1f}s"
        click.echo(f"{item['worker_id']:>4}  {item['epoch']:>6}  {expires:>10}  {item['holder']}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True, max=3600),
    default=5.0,
    show_default=True,
    help="Seconds to wait for the database and for the cache (probed at once).",
)
@click.option(
    "--cache-optional",
    is_flag=True,
    help="Exit 0 when only the cache fails (the store serves from SQL meanwhile).",
)
@database_option
@redis_option
def health(
    as_json: bool,
    timeout: float,
    cache_optional: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Check the database, its schema revision, the cache and the worker-id lease, for a
    readiness probe. Exit 0 when ready, 1 when not ready, 2 on a configuration error."""
    store = MemoryStore(_settings(database_url, redis_url))
    try:
        report = store.health(timeout)
    finally:
        store.close()
    ready = report.ok or (cache_optional and report.degraded)
    status = "ok" if report.ok else "degraded" if report.degraded else "failed"
    checks = {
        "database": report.database,
        "migrations": report.migrations,
        "cache": report.cache,
        "lease": report.lease,
    }
    if as_json:
        _emit_json(
            {
                "ready": ready,
                "status": status,
                "checks": {name: check.model_dump() for name, check in checks.items()},
                "seconds": report.seconds,
            }
        )
    else:
        for name, check in checks.items():
            click.echo(f"{name:<11} {check.status:<8} {check.detail or ''}".rstrip())
        click.echo(f"{'ready' if ready else 'not ready'} ({status}, {report.seconds:.2f}s)")
    if not ready:
        raise SystemExit(EXIT_FINDINGS)


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


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name, level in (("memstore", logging.WARNING), ("memstore.audit", logging.INFO)):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = False


def main() -> None:
    """Console-script entry point: typed memstore errors become exit code 2 on stderr."""
    _configure_logging()
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FINDINGS)
    except click.ClickException as error:
        error.show()
        sys.exit(EXIT_USAGE)
    except MemstoreError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(EXIT_OK)


# -- data lifecycle: prune ----------------------------------------------------------------------

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _duration(value: str | None) -> timedelta | None:
    """``90d``, ``12h``, ``30m``, ``45s`` or ``2w``."""
    if value is None:
        return None
    text = value.strip().lower()
    unit = _DURATION_UNITS.get(text[-1:]) if text else None
    if unit is None or not text[:-1].isdigit():
        raise click.BadParameter(
            f"{value!r} is not a duration like 90d, 12h, 30m, 45s or 2w", param_hint="--older-than"
        )
    return timedelta(seconds=int(text[:-1]) * unit)


@cli.command()
@click.argument("app_ids", nargs=-1)
@click.option("--all", "all_apps", is_flag=True, help="Every app with history.")
@click.option(
    "--older-than",
    default=None,
    help="Remove messages older than this (90d, 12h, 2w...; default MEMSTORE_RETENTION_DAYS).",
)
@click.option(
    "--keep-last", type=click.IntRange(min=1), default=None, help="Keep the newest N messages."
)
@click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
@click.option("--yes", is_flag=True, help="Do not ask; required without a terminal.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
@missing_ok_option
@database_option
@redis_option
def prune(
    app_ids: tuple[str, ...],
    all_apps: bool,
    older_than: str | None,
    keep_last: int | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    missing_ok: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Hard-delete the oldest messages of APP_IDs (or --all) in both histories.

    A tool exchange goes whole or stays whole; display rows go by the same age; with an age
    the loop guard's older records go too. Deletes run in short batches while traffic flows.
    """
    age = _duration(older_than)
    apps = _apps(app_ids, all_apps)
    with _open(database_url, redis_url) as store:
        _require_known(store, apps, missing_ok)
        if age is None and keep_last is None:
            if store.settings.retention_days is None:
                raise click.UsageError(
                    "give --older-than and/or --keep-last (or set MEMSTORE_RETENTION_DAYS)"
                )
            age = timedelta(days=store.settings.retention_days)
        rule = operations.retention_rule(age, keep_last)
        what = ", ".join(
            part
            for part in (
                f"older than {older_than or f'{store.settings.retention_days}d'}"
                if age is not None
                else "",
                f"all but the newest {keep_last}" if keep_last is not None else "",
            )
            if part
        )
        scope = "every app" if apps is None else f"{len(apps)} app(s)"
        click.echo(f"prune {what} in {scope}" + (" (dry run)" if dry_run else ""), err=True)
        if not dry_run and not yes:
            if not sys.stdin.isatty():
                click.echo("refusing to prune without a terminal; pass --yes", err=True)
                raise SystemExit(EXIT_FINDINGS)
            if not click.confirm("Delete these messages permanently?", err=True):
                raise SystemExit(EXIT_FINDINGS)
        totals = {"apps": 0, "original_rows": 0, "display_rows": 0, "tool_executions": 0}
        reports: list[dict[str, Any]] = []
        skipped = Skipped()
        try:
            for app in _walk(store, apps, "pruning", skipped):
                try:
                    report = operations.prune_app(store, app, rule, dry_run=dry_run)
                except MemstoreError as error:
                    if apps is not None:
                        raise
                    skipped.add(app, error)
                    continue
                totals["apps"] += 1
                for key in ("original_rows", "display_rows", "tool_executions"):
                    totals[key] += getattr(report, key)
                removed = report.original_rows or report.display_rows or report.tool_executions
                if not dry_run and removed:  # audit lines only for changes
                    audit.info(
                        "prune app=%r rule=%r original_rows=%d display_rows=%d tool_executions=%d",
                        app,
                        what,
                        report.original_rows,
                        report.display_rows,
                        report.tool_executions,
                    )
                if apps is not None or report.original_rows or report.display_rows:
                    reports.append(report.model_dump())
        except KeyboardInterrupt:
            click.echo(f"interrupted after {totals['apps']} apps", err=True)
            _summary(totals, as_json)
            raise SystemExit(EXIT_FINDINGS) from None
        if as_json:
            _emit_json(
                {
                    "reports": reports,
                    "summary": totals,
                    "dry_run": dry_run,
                    "skipped": skipped.json(),
                }
            )
            skipped.finish()
            return
        verb = "would remove" if dry_run else "removed"
        for done in reports:
            click.echo(
                f"{done['app_id']}: {verb} {done['original_rows']} original rows, "
                f"{done['display_rows']} display rows, {done['tool_executions']} tool executions"
            )
        _summary(totals, False)
        skipped.finish()


# -- data lifecycle: export and import -----------------------------------------------------------


@cli.command("export")
@click.argument("app_ids", nargs=-1)
@click.option("--all", "all_apps", is_flag=True, help="Every app with history.")
@click.option("--user-id", default=None, help="Every row written for this user instead.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", *PROVIDER_FORMATS]),
    default="jsonl",
    help="memstore-export JSON Lines (default, importable), or one provider-format "
    "conversation per app and line.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True),
    default="-",
    help="File to write (default: standard output).",
)
@missing_ok_option
@database_option
@redis_option
def export_command(
    app_ids: tuple[str, ...],
    all_apps: bool,
    user_id: str | None,
    fmt: str,
    output: str,
    missing_ok: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Write every message of APP_IDs (or --all, or --user-id) as JSON Lines: both histories
    and the loop guard's records, ids and timestamps kept (`memstore import` reads it back)."""
    if [bool(app_ids), all_apps, user_id is not None].count(True) != 1:
        raise click.UsageError("give APP_IDs, --all or --user-id (one of them)")
    if fmt != "jsonl" and user_id is not None:
        raise click.UsageError(f"--format {fmt} exports whole apps: give APP_IDs or --all")
    with _open(database_url, redis_url) as store:
        apps = [normalize_app_id(a) for a in app_ids] if app_ids else None
        if apps:  # before the output file is created
            _require_known(store, apps, missing_ok)
        if all_apps:
            apps = list(admin.iter_app_ids(store.engine))
        with click.open_file(output, "w", encoding="utf-8") as out:
            written = _export_records(store, out, apps, user_id, fmt)
    click.echo(f"exported {written} records", err=True)


def _export_records(
    store: MemoryStore, out: Any, apps: list[str] | None, user_id: str | None, fmt: str
) -> int:
    """Write the export's lines to ``out`` (a progress bar over the apps on a terminal's
    stderr); return how many."""
    written = 0
    if fmt == "jsonl" and apps is None:  # --user-id
        for record in store.export(None, user_id):
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
        return written
    assert apps is not None
    with click.progressbar(length=len(apps), label="exporting", file=sys.stderr) as bar:
        if fmt == "jsonl":
            current = None
            for record in store.export(apps):
                app = record.get("app_id")
                if app is not None and app != current:
                    if current is not None:
                        bar.update(1)
                    current = app
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
            return written
        for app in apps:
            written += _export_conversation(store, out, app, fmt)
            bar.update(1)
    return written


def _export_conversation(store: MemoryStore, out: Any, app: str, fmt: str) -> int:
    """One app's whole history as one provider-format line; returns 1."""
    rows = admin.counts_for(store.engine, app_id=app).original_rows
    # the whole history: every original message, no compaction summary
    messages = store.load_window(app, max(1, rows), summaries=False)
    line = {"app_id": app, "format": fmt, "conversation": _provider_format(messages, fmt)}
    out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return 1


@cli.command("import")
@click.argument("file")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--from",
    "source",
    type=click.Choice(["memstore", *IMPORT_SOURCES]),
    default="memstore",
    help="What FILE is: a `memstore export` file (default), an OpenAI Agents SDK "
    "SQLiteSession file, the URL of the SDK's SQLAlchemySession tables (openai-agents-sql) "
    "or of a LangChain SQLChatMessageHistory table (langchain-sql), or LangChain4j "
    "ChatMessageSerializer JSON (langchain4j-json).",
)
@click.option("--app-prefix", default="", help="Prefix for the app id of each imported session.")
@click.option(
    "--table",
    default=None,
    help="With --from langchain-sql: the history table (default message_store).",
)
@click.option(
    "--app-id",
    default=None,
    help="With --from langchain4j-json: the app of a file holding one memory (a JSON array).",
)
@database_option
@redis_option
def import_command(
    file: str,
    as_json: bool,
    source: str,
    app_prefix: str,
    table: str | None,
    app_id: str | None,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """Import a `memstore export` file. Idempotent: rows already stored (same id) are skipped,
    so a second run, or a rerun after an interruption, only adds what is missing.

    The whole file is validated before anything is written; then it is written in batches,
    each committed whole or not at all.
    """
    if source != "memstore":
        options = _source_options(source, table, app_id, app_prefix)
        _import_sessions(source, file, options, app_prefix, as_json, database_url, redis_url)
        return
    if not os.path.isfile(file):
        raise click.BadParameter(f"no file at {file!r}", param_hint="FILE")
    with _open(database_url, redis_url) as store:
        lines = sum(1 for _ in _records(file, store))  # validates every record first
        with click.progressbar(
            _records(file, None), length=lines, label="importing", file=sys.stderr
        ) as bar:
            report = store.import_records(bar)
        audit.info(
            "import file=%r original_rows=%d display_rows=%d tool_executions=%d",
            file,
            report.total.original_inserted,
            report.total.display_inserted,
            report.total.tool_executions_inserted,
        )
        if as_json:
            _emit_json(report.model_dump())
            return
        for app, counts in report.apps.items():
            skipped = counts.original_skipped + counts.display_skipped
            skipped += counts.tool_executions_skipped
            click.echo(
                f"{app}: {counts.original_inserted} original rows, {counts.display_inserted} "
                f"display rows, {counts.tool_executions_inserted} tool executions imported; "
                f"{skipped} already stored"
            )
        total = report.total
        click.echo(
            f"records: {report.records}, inserted: "
            f"{total.original_inserted + total.display_inserted + total.tool_executions_inserted}"
            f", skipped: "
            f"{total.original_skipped + total.display_skipped + total.tool_executions_skipped}"
        )


def _records(path: str, check: MemoryStore | None) -> Iterator[dict[str, Any]]:
    """The file's records, one per line; with ``check`` each is validated as it is read."""
    from memstore.core.export import check_header, parse_record
    from memstore.errors import ImportRecordError

    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            try:
                data = json.loads(line)
            except ValueError:
                raise ImportRecordError("not a JSON line", line=line_number) from None
            if check is not None:
                if line_number == 1:
                    check_header(data, 1)
                else:
                    parse_record(data, line_number, check.settings.max_text_bytes)
            yield data


def _source_options(
    source: str, table: str | None, app_id: str | None, app_prefix: str
) -> dict[str, Any]:
    """The reader options of ``--from SOURCE`` (each option belongs to one source)."""
    if table is not None and source != "langchain-sql":
        raise click.UsageError("--table is an option of --from langchain-sql")
    if app_id is not None and source != "langchain4j-json":
        raise click.UsageError("--app-id is an option of --from langchain4j-json")
    if app_id is not None and app_prefix:
        raise click.UsageError("--app-id names the app itself: give it or --app-prefix")
    if source == "langchain-sql":
        return {"table": table or "message_store"}
    if source == "langchain4j-json":
        return {"app_id": app_id}
    return {}


def _import_sessions(
    source: str,
    path: str,
    options: dict[str, Any],
    app_prefix: str,
    as_json: bool,
    database_url: str | None,
    redis_url: str | None,
) -> None:
    """``--from SOURCE``: one app per session, one transaction each. Every session is read
    and converted (and its app id checked) first, so a source the importer cannot read
    writes nothing."""
    read = SOURCES[source].read
    sessions = 0
    for session_id, items in read(path, **options):
        normalize_app_id(app_prefix + session_id)
        convert(source, session_id, items)
        sessions += 1
    reports: list[SessionImport] = []
    interrupted = False
    with (
        _open(database_url, redis_url) as store,
        click.progressbar(
            read(path, **options),
            length=sessions,
            label="importing sessions",
            file=sys.stderr,
        ) as bar,
    ):
        try:
            for session_id, items in bar:
                report = import_session(store, source, app_prefix + session_id, session_id, items)
                reports.append(report)
                audit.info(
                    "import source=%s app=%r messages=%d skipped=%s",
                    source,
                    report.app_id,
                    0 if report.skipped else report.messages,
                    report.skipped,
                )
        except KeyboardInterrupt:
            interrupted = True
    if as_json:
        _emit_json([vars(report) for report in reports])
    else:
        for report in reports:
            state = "already imported, skipped" if report.skipped else f"{report.messages} messages"
            found = ", ".join(f"{code}: {n}" for code, n in sorted(report.findings.items()))
            click.echo(
                f"{report.session_id} -> {report.app_id}: {state}"
                + (f" ({found})" if found else "")
            )
        done = [r for r in reports if not r.skipped]
        click.echo(
            f"sessions: {len(reports)}, imported: {len(done)}, "
            f"skipped: {len(reports) - len(done)}, messages: {sum(r.messages for r in done)}"
        )
    if interrupted:
        click.echo(
            f"interrupted after {len(reports)} of {sessions} sessions; "
            "run the same command again to resume",
            err=True,
        )
        raise SystemExit(EXIT_FINDINGS)


# -- encryption at rest: rekey --------------------------------------------------------------------


@cli.command()
@click.argument("app_ids", nargs=-1)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=100_000),
    default=500,
    show_default=True,
    help="Rows per batch (one short transaction each).",
)
@click.option("--dry-run", is_flag=True, help="Only count the values that would be sealed.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@missing_ok_option
@database_option
def rekey(
    app_ids: tuple[str, ...],
    batch_size: int,
    dry_run: bool,
    as_json: bool,
    missing_ok: bool,
    database_url: str | None,
) -> None:
    """Seal every stored text that is plaintext or under an older key with the first key of
    MEMSTORE_ENCRYPTION_KEYS (all of APP_IDs, or every app when none is given).

    Batches commit one by one with a compare-and-set per row, so service traffic keeps
    flowing and no concurrent write is lost; rerun it after an interruption to resume.
    """
    with _open(database_url, None) as store:
        if not store.cipher.enabled:
            raise click.UsageError("set MEMSTORE_ENCRYPTION_KEYS first (the first key seals)")
        from memstore.sql.rekey import count_stale

        apps = [normalize_app_id(a) for a in app_ids] or None
        _require_known(store, apps, missing_ok)
        total = count_stale(store.engine, store.cipher, apps)
        key_id = store.cipher.current_key_id
        click.echo(
            f"rekey {total} values to key id {key_id!r}" + (" (dry run)" if dry_run else ""),
            err=True,
        )
        with click.progressbar(length=total, label="rekeying", file=sys.stderr) as bar:
            try:
                report = store.rekey(
                    batch_size,
                    dry_run=dry_run,
                    app_ids=apps,
                    progress=lambda _table, rows: bar.update(rows),
                )
            except KeyboardInterrupt:
                click.echo("interrupted: run it again to resume", err=True)
                raise SystemExit(EXIT_FINDINGS) from None
        if not dry_run:
            audit.info(
                "rekey key_id=%r %s",
                key_id,
                " ".join(f"{name}={c.rekeyed}" for name, c in report.tables.items()),
            )
        if as_json:
            _emit_json(report.model_dump())
            return
        verb = "would seal" if dry_run else "sealed"
        for name, counts in report.tables.items():
            conflicts = f" ({counts.conflicts} changed meanwhile)" if counts.conflicts else ""
            click.echo(f"{name}: {verb} {counts.rekeyed}{conflicts}")
