"""What :class:`~memstore.MemoryStore` and :class:`~memstore.aio.AsyncMemoryStore` share for
their lifecycle and operator actions, decided once: the health report from the probes'
outcomes, the export's record sources, and the import's batching as sans-I/O steps (see
:mod:`memstore.store_writes`). The stores probe, iterate and drive."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from memstore.core import health
from memstore.core.export import (
    AppCounts,
    ImportRow,
    check_header,
    display_record,
    execution_record,
    export_scope,
    header_record,
    message_call_ids,
    original_record,
    parse_record,
)
from memstore.core.inputs import normalize_app_ids, normalize_user_id
from memstore.core.leases import LeaseRow
from memstore.core.rows import decode_row
from memstore.errors import InvalidInputError
from memstore.reports import HealthCheck, HealthReport, ImportReport
from memstore.sql.export import IMPORT_BATCH, import_report
from memstore.sql.schema import display, original
from memstore.store_steps import Steps
from memstore.store_writes import StoreWrites

if TYPE_CHECKING:
    from memstore.sql.health import DatabaseProbe

ExportSource = tuple[Any, Callable[[Mapping[str, Any]], dict[str, Any]]]
"""Rows of the store's export backend (an iterator, or an async iterator for the async
store) and how each becomes a record."""


class StoreLifecycle(StoreWrites):
    """The health verdicts, export sources and import steps both stores use."""

    # -- export and import ---------------------------------------------------------------------

    def _export_start(
        self, app_ids: Iterable[str | int] | None, user_id: str | None
    ) -> tuple[list[str] | None, str | None, dict[str, Any]]:
        """The export's apps (``None``: all), its user and its header record (the scope
        checked first)."""
        from memstore._version import __version__

        apps = None if app_ids is None else normalize_app_ids(app_ids)
        user = normalize_user_id(user_id)
        export_scope(apps, user)
        return apps, user, header_record(datetime.now(timezone.utc), __version__)

    def _original_record(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return original_record(
            row, decode_row(self.cipher, row["app_id"], row["id"], row["payload"])
        )

    def _display_record(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return display_record(row, self.cipher)

    def _execution_record(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return execution_record(row, self.cipher)

    def _app_sources(self, app: str) -> Iterator[ExportSource]:
        """An app's export, in order: its original history, display history and loop-guard
        records."""
        yield self._export.app_rows(original, app), self._original_record
        yield self._export.app_rows(display, app), self._display_record
        yield self._export.app_executions(app), self._execution_record

    def _user_sources(self, user: str) -> Iterator[ExportSource]:
        """A user's export, in order: their original and display rows and loop-guard records,
        then the records with no user id whose call id only the user's rows name (known once
        the original rows are read: take each source's rows before asking for the next)."""
        calls: dict[str, list[str]] = {}

        def original_row(row: Mapping[str, Any]) -> dict[str, Any]:
            message = decode_row(self.cipher, row["app_id"], row["id"], row["payload"])
            calls.setdefault(row["app_id"], []).extend(message_call_ids(message))
            return original_record(row, message)

        yield self._export.user_rows(original, user), original_row
        yield self._export.user_rows(display, user), self._display_record
        yield self._export.user_executions(user), self._execution_record
        for app, call_ids in sorted(calls.items()):
            rows = self._export.unowned_executions(app, user, sorted(set(call_ids)))
            yield rows, self._execution_record

    def _import_records_steps(self, records: Iterable[Mapping[str, Any]]) -> Steps[ImportReport]:
        """``import_records``: the records checked and written batch by batch."""
        counts: dict[str, AppCounts] = {}
        batch: list[ImportRow] = []
        seen = 0
        headed = False
        for line, data in enumerate(records, start=1):
            if not headed:
                check_header(data, line)
                headed = True
                continue
            seen += 1
            row = parse_record(data, line, self.settings.max_text_bytes)
            if row is not None:
                batch.append(row)
            if len(batch) >= IMPORT_BATCH:
                yield from self._import_steps(batch, counts)
                batch = []
        if not headed:
            check_header(None, 1)
        yield from self._import_steps(batch, counts)
        return import_report(seen, counts)

    # -- health (the verdicts; the stores probe) -----------------------------------------------

    def _lease_rows_needed(self) -> bool:
        """True when the health check must read the lease rows: a leasing store holding none."""
        return self._leasing and self._own_lease() is None

    def _lease_check(self, leases: list[LeaseRow] | None) -> HealthCheck:
        if not self._leasing:
            return health.fixed_worker_check(self._fixed_worker_id)
        lease = self._own_lease()
        if lease is not None:
            return health.held_lease_check(lease, time.monotonic())
        if leases is None:
            return health.skipped("needs the database, migrated to head")
        return health.free_lease_check(leases)

    def _health_report(
        self,
        started: float,
        timeout: float,
        database: DatabaseProbe | BaseException | None,
        cache: HealthCheck | BaseException | None,
    ) -> HealthReport:
        """The report from the probes' outcomes (``None``: no answer within ``timeout``)."""
        from memstore.sql.health import DatabaseProbe, head_revision, known_revision

        if isinstance(database, DatabaseProbe):
            db_check = health.passed(f"{database.dialect} answers")
            revision = database.revision
            known = revision is None or known_revision(revision)
            schema = health.schema_check(revision, head_revision(), known)
            lease = self._lease_check(database.leases)
        else:
            if database is None:
                db_check = health.timed_out(timeout)
            else:
                db_check = health.failed(
                    health.error_reason(database, getattr(database, "kind", None))
                )
            schema = health.skipped("the database is not reachable")
            lease = self._lease_check(None)
        if cache is None:
            cache_check = health.timed_out(timeout)
        elif isinstance(cache, BaseException):
            cache_check = health.failed(health.cache_reason(cache))
        else:
            cache_check = cache
        checks = (db_check, schema, cache_check, lease)
        return HealthReport(
            ok=all(check.ok for check in checks),
            database=db_check,
            migrations=schema,
            cache=cache_check,
            lease=lease,
            seconds=round(time.monotonic() - started, 3),
        )

    @staticmethod
    def _health_timeout(timeout: float) -> float:
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (0 < timeout <= 3600)
        ):
            raise InvalidInputError("timeout must be a number of seconds in (0, 3600]")
        return float(timeout)
