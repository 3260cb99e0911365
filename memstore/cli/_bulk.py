"""What the commands that walk many apps (``APP_IDs`` or ``--all``) share: choosing the apps,
walking them with a progress bar, reporting the apps they could not handle, and stopping
cleanly on Ctrl-C or a termination signal."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

from memstore.cli._common import EXIT_FINDINGS
from memstore.cli._output import _emit_json, progress_bar, terminal_safe
from memstore.core.inputs import normalize_app_id
from memstore.errors import MemstoreError
from memstore.sql import admin
from memstore.store import MemoryStore

_T = TypeVar("_T")


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


def _walk(
    store: MemoryStore, apps: list[str] | None, label: str, skipped: Skipped | None = None
) -> Iterator[str]:
    """The apps to act on, with a progress bar over them on a terminal; with ``--all`` paging
    through the stored apps, and a stored app id that is not valid (an empty one another tool
    wrote, say) is passed over into ``skipped``."""
    if apps is not None:
        with progress_bar(apps, length=len(apps), label=label) as bar:
            yield from bar
        return
    total = admin.count_apps(store.engine)
    with progress_bar(admin.iter_app_ids(store.engine), length=total, label=label) as bar:
        for app in bar:
            try:
                yield normalize_app_id(app)
            except MemstoreError as error:
                if skipped is None:
                    raise
                skipped.add(app, error)


def _each_app(
    store: MemoryStore,
    apps: list[str] | None,
    label: str,
    skipped: Skipped,
    act: Callable[[str], _T],
) -> Iterator[tuple[str, _T]]:
    """``act`` on every app of :func:`_walk`, with its result. A memstore error stops a
    command given APP_IDs; with ``--all`` the app goes into ``skipped`` and the walk goes on."""
    for app in _walk(store, apps, label, skipped):
        try:
            result = act(app)
        except MemstoreError as error:
            if apps is not None:
                raise
            skipped.add(app, error)
            continue
        yield app, result


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


def _add_counts(totals: dict[str, int], report: object) -> None:
    """Count one more app in ``totals`` (``"apps"``) and add the report's field of the same
    name to each other total."""
    for key in totals:
        totals[key] += 1 if key == "apps" else getattr(report, key)
