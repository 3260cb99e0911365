"""Changing what is stored: ``memstore migrate`` (the schema), ``memstore purge`` (apps or a
user, at once), ``memstore prune`` (retention) and ``memstore rekey`` (encryption at rest)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from memstore import operations
from memstore.cli._bulk import Skipped, _add_counts, _apps, _each_app, _summary
from memstore.cli._common import (
    EXIT_FINDINGS,
    Target,
    _confirm,
    _open,
    _require_known,
    _settings,
    all_option,
    audit,
    database_option,
    json_option,
    missing_ok_option,
    store_options,
    yes_option,
)
from memstore.cli._output import _emit_json, progress_bar
from memstore.core.inputs import normalize_app_id
from memstore.sql import admin
from memstore.store import MemoryStore


@click.command()
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
            _confirm(yes, "downgrade", "Drop these tables and columns with their data?")
            migrations.downgrade(store.engine, revision)
            click.echo(f"downgraded to {revision}")
        else:
            migrations.upgrade(store.engine, revision or "head")
            click.echo(f"upgraded to {migrations.current_revision(store.engine)}")
    finally:
        store.close()


@click.command()
@click.argument("app_ids", nargs=-1)
@click.option("--user-id", default=None, help="Purge every row written for this user instead.")
@click.option("--dry-run", is_flag=True, help="Only print what would be deleted.")
@yes_option
@json_option("Print the counts as JSON.")
@store_options
def purge(
    app_ids: tuple[str, ...],
    user_id: str | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    store_target: Target,
) -> None:
    """Hard-delete APP_IDs (or --user-id) in both tables and the cache. Ids are exact."""
    if bool(app_ids) == (user_id is not None):
        raise click.UsageError("give APP_IDs or --user-id (one of them)")
    with store_target.open() as store:
        if user_id is not None:
            user = normalize_app_id(user_id, what="user_id")
            targets = [("user", user, admin.counts_for(store.engine, user_id=user))]
        else:
            named = [normalize_app_id(a) for a in app_ids]
            store_target.require_known(store, named)
            targets = [("app", app, admin.counts_for(store.engine, app_id=app)) for app in named]
        for kind, target, counts in targets:
            click.echo(
                f"{kind} {target!r}: {counts.original_rows} original rows, "
                f"{counts.display_rows} display rows, {counts.tool_executions} tool executions",
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
                            "tool_executions": c.tool_executions,
                            "dry_run": True,
                        }
                        for kind, t, c in targets
                    ]
                )
            return
        _confirm(yes, "purge", "Delete these rows permanently?")
        done = []
        with progress_bar(targets, length=len(targets), label="purging") as bar:
            for kind, target, _counts in bar:
                done.append(_purge_one(store, kind, target))
        for entry in done if not as_json else ():
            kind, target = ("user", entry["user"]) if "user" in entry else ("app", entry["app"])
            click.echo(
                f"purged {kind} {target!r}: {entry['original_rows']} original rows, "
                f"{entry['display_rows']} display rows, {entry['tool_executions']} tool executions"
            )
        if as_json:
            _emit_json(done)


def _purge_one(store: MemoryStore, kind: str, target: str) -> dict[str, Any]:
    """Purge one app or one user; the audit line; what the command reports of it."""
    if kind == "user":
        counts, _apps_touched = operations.purge_user(store, target)
        original_rows, display_rows = counts.original_rows, counts.display_rows
        executions = counts.tool_executions
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
    return {
        kind: target,
        "original_rows": original_rows,
        "display_rows": display_rows,
        "tool_executions": executions,
    }


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


@click.command()
@click.argument("app_ids", nargs=-1)
@all_option
@click.option(
    "--older-than",
    default=None,
    help="Remove messages older than this (90d, 12h, 2w...; default MEMSTORE_RETENTION_DAYS).",
)
@click.option(
    "--keep-last", type=click.IntRange(min=1), default=None, help="Keep the newest N messages."
)
@click.option("--dry-run", is_flag=True, help="Only count what would be removed.")
@yes_option
@json_option("Print the reports as JSON.")
@store_options
def prune(
    app_ids: tuple[str, ...],
    all_apps: bool,
    older_than: str | None,
    keep_last: int | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    store_target: Target,
) -> None:
    """Hard-delete the oldest messages of APP_IDs (or --all) in both histories.

    A tool exchange goes whole or stays whole; display rows go by the same age; with an age
    the loop guard's older records go too. Deletes run in short batches while traffic flows.
    """
    age = _duration(older_than)
    apps = _apps(app_ids, all_apps)
    with store_target.open() as store:
        store_target.require_known(store, apps)
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
        _confirm(yes or dry_run, "prune", "Delete these messages permanently?")
        totals = {"apps": 0, "original_rows": 0, "display_rows": 0, "tool_executions": 0}
        reports: list[dict[str, Any]] = []
        skipped = Skipped()
        try:
            pruned = _each_app(
                store,
                apps,
                "pruning",
                skipped,
                lambda app: operations.prune_app(store, app, rule, dry_run=dry_run),
            )
            for app, report in pruned:
                _add_counts(totals, report)
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


@click.command()
@click.argument("app_ids", nargs=-1)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=100_000),
    default=500,
    show_default=True,
    help="Rows per batch (one short transaction each).",
)
@click.option("--dry-run", is_flag=True, help="Only count the values that would be sealed.")
@yes_option
@json_option("Print the report as JSON.")
@missing_ok_option
@database_option
def rekey(
    app_ids: tuple[str, ...],
    batch_size: int,
    dry_run: bool,
    yes: bool,
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
        if not dry_run and total:
            _confirm(yes, "rekey", "Rewrite these values under this key?")
        with progress_bar(length=total, label="rekeying") as bar:
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
