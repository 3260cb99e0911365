"""Rebuilding cached windows from SQL: ``memstore reload`` (one process or ``--workers N``)."""

from __future__ import annotations

from typing import Any

import click

from memstore import operations
from memstore.cli._bulk import (
    Skipped,
    _add_counts,
    _apps,
    _signals_stop_cleanly,
    _stopped,
    _summary,
    _walk,
)
from memstore.cli._common import Target, all_option, json_option, store_options
from memstore.cli._output import _emit_json
from memstore.core.inputs import MAX_WINDOW_MESSAGES
from memstore.reload_workers import MAX_WORKERS as MAX_RELOAD_WORKERS
from memstore.reload_workers import reload_in_workers


@click.command()
@click.argument("app_ids", nargs=-1)
@all_option
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
@json_option("Print the reports as JSON.")
@store_options
def reload(
    app_ids: tuple[str, ...],
    all_apps: bool,
    max_messages: int | None,
    workers: int,
    as_json: bool,
    store_target: Target,
) -> None:
    """Rebuild cached windows from SQL with the edge check.

    Without a Redis URL there is no shared cache to fill: the windows are rebuilt and checked
    (the report counts hold) but kept nowhere; the service's own in-process windows rebuild
    themselves on their next miss. With --workers N, N processes rebuild the windows, each
    with its own connections (the reports keep the apps' order).
    """
    apps = _apps(app_ids, all_apps)
    with store_target.open() as store:
        store_target.require_known(store, apps)
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
                    _add_counts(totals, report)
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
