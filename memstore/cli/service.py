"""The deployment around the data: ``memstore demo`` (the story on a scratch database),
``memstore health`` (a readiness probe) and ``memstore workers`` (leased worker ids)."""

from __future__ import annotations

import click

from memstore.cli._common import (
    EXIT_FINDINGS,
    _settings,
    database_option,
    json_option,
    redis_option,
)
from memstore.cli._output import _emit_json
from memstore.store import MemoryStore


@click.command()
@click.option(
    "--database-url",
    default=None,
    help="Run the story on this database instead of a throwaway SQLite file.",
)
def demo(database_url: str | None) -> None:
    """Show an agent turn with tool calls surviving a restart that loses the cache."""
    from memstore.demo import run_demo

    run_demo(database_url)


@click.command()
@click.option("--all", "show_all", is_flag=True, help="Also list leases that have lapsed.")
@json_option("Print as JSON.")
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


@click.command()
@json_option("Print the report as JSON.")
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
