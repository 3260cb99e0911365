"""Moving histories in and out: ``memstore export`` (memstore JSON Lines or provider formats)
and ``memstore import`` (an export file, or another framework's store with ``--from``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import click

from memstore.cli._common import (
    EXIT_FINDINGS,
    Target,
    _open,
    all_option,
    audit,
    database_option,
    json_option,
    redis_option,
    store_options,
)
from memstore.cli._output import PROVIDER_FORMATS, _emit_json, _provider_format, progress_bar
from memstore.core.inputs import normalize_app_id
from memstore.importers import SOURCES, SessionImport, convert, import_session
from memstore.sql import admin
from memstore.store import MemoryStore

IMPORT_SOURCES = tuple(SOURCES)


@click.command("export")
@click.argument("app_ids", nargs=-1)
@all_option
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
@store_options
def export_command(
    app_ids: tuple[str, ...],
    all_apps: bool,
    user_id: str | None,
    fmt: str,
    output: str,
    store_target: Target,
) -> None:
    """Write every message of APP_IDs (or --all, or --user-id) as JSON Lines: both histories
    and the loop guard's records, ids and timestamps kept (`memstore import` reads it back)."""
    if [bool(app_ids), all_apps, user_id is not None].count(True) != 1:
        raise click.UsageError("give APP_IDs, --all or --user-id (one of them)")
    if fmt != "jsonl" and user_id is not None:
        raise click.UsageError(f"--format {fmt} exports whole apps: give APP_IDs or --all")
    with store_target.open() as store:
        apps = [normalize_app_id(a) for a in app_ids] if app_ids else None
        if apps:  # before the output file is created
            store_target.require_known(store, apps)
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
    if fmt == "jsonl" and apps is None:  # --user-id: records of unknown number, a moving bar
        with progress_bar(store.export(None, user_id), length=None, label="exporting") as bar:
            for record in bar:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
        return written
    assert apps is not None
    with progress_bar(length=len(apps), label="exporting") as bar:
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


@click.command("import")
@click.argument("file")
@json_option("Print the report as JSON.")
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
        with progress_bar(_records(file, None), length=lines, label="importing") as bar:
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
        progress_bar(read(path, **options), length=sessions, label="importing sessions") as bar,
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
