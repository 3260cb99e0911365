"""``memstore rekey``: seal every stored text under the current (first) key.

Walks each encrypted column in primary-key order, in keyset pages of ``batch_size`` rows whose
value is not sealed under the current key (plaintext rows and rows of older keys). Each page is
one short transaction; each row is rewritten with a compare-and-set on the value read
(``UPDATE ... WHERE id = :id AND payload = :old``), so a concurrent writer (a pop that rewrote
the row, a purge or prune that deleted it) always wins and nothing it wrote is lost: the row is
counted as a conflict and left to that writer (new values are sealed under the current key
anyway). Only the sealed text changes, never what it says, so windows and generations stay as
they are. Rerunning resumes: rows already under the current key are not selected again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memstore.core.crypto import (
    DISPLAY_CONTENT,
    ENVELOPE_PREFIX,
    EXECUTION_RESULT,
    ORIGINAL_PAYLOAD,
    RowCipher,
)
from memstore.errors import ConfigurationError
from memstore.reports import RekeyReport, RekeyTableCounts
from memstore.sql.engine import translated_errors
from memstore.sql.queries import in_app
from memstore.sql.schema import display, original, tool_executions

DEFAULT_BATCH = 500


@dataclass(frozen=True, slots=True)
class _Column:
    """One encrypted column: its table, value column, bound name and primary key."""

    name: str
    table: sa.Table
    value: str
    binding: str
    keys: tuple[str, ...]

    def row_key(self, row: Any) -> object:
        return row.id if self.keys == ("id",) else row.idempotency_key


COLUMNS = (
    _Column("chat_history_original", original, "payload", ORIGINAL_PAYLOAD, ("id",)),
    _Column("chat_history", display, "content", DISPLAY_CONTENT, ("id",)),
    _Column(
        "tool_executions",
        tool_executions,
        "result",
        EXECUTION_RESULT,
        ("app_id", "idempotency_key"),
    ),
)

Progress = Callable[[str, int], None]
"""Called after each batch with the table's name and the rows it looked at."""


def stale_condition(column: sa.ColumnElement[Any], cipher: RowCipher) -> sa.ColumnElement[bool]:
    """Values not sealed under the current key (``NULL`` results need nothing)."""
    current = f"{ENVELOPE_PREFIX}{cipher.current_key_id}:"
    return sa.and_(column.is_not(None), sa.not_(column.startswith(current, autoescape=True)))


def _page_query(
    spec: _Column, cipher: RowCipher, app_id: str | None, after: tuple[Any, ...] | None, limit: int
) -> Any:
    table = spec.table
    keys = [table.c[name] for name in spec.keys]
    query = (
        sa.select(*keys, table.c.app_id.label("owner_app"), table.c[spec.value].label("value"))
        .where(stale_condition(table.c[spec.value], cipher))
        .limit(limit)
    )
    if app_id is None:
        query = query.order_by(*keys)
    else:  # the (app_id, id) index order
        query = query.where(in_app(table, app_id)).order_by(table.c.app_id, *keys)
    if after is not None and len(keys) == 1:
        query = query.where(keys[0] > after[0])
    elif after is not None:
        query = query.where(sa.tuple_(*keys) > sa.tuple_(*after))
    return query


def _rewrite(conn: Connection, spec: _Column, cipher: RowCipher, rows: Sequence[Any]) -> int:
    """Rewrite one page in the caller's transaction; return the conflicts (rows changed or
    deleted since they were read)."""
    table = spec.table
    conflicts = 0
    for row in rows:
        row_key = spec.row_key(row)
        plain = cipher.open(row.value, spec.binding, row.owner_app, row_key)
        sealed = cipher.seal(plain, spec.binding, row.owner_app, row_key)
        condition = sa.and_(
            *(table.c[name] == getattr(row, name) for name in spec.keys),
            table.c[spec.value] == row.value,
        )
        changed = conn.execute(table.update().where(condition).values({spec.value: sealed}))
        if changed.rowcount != 1:
            conflicts += 1
    return conflicts


def rekey(
    engine: Engine,
    cipher: RowCipher,
    *,
    batch_size: int = DEFAULT_BATCH,
    dry_run: bool = False,
    app_ids: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> RekeyReport:
    """Seal every stored text not under ``cipher``'s current key with it (see the module).

    With ``dry_run`` only counts them; with ``app_ids`` only those apps' rows. Raises
    :class:`~memstore.errors.ConfigurationError` without keys and
    :class:`~memstore.errors.UnknownKeyError` for a value sealed under a key id that is not
    configured (the batches before it stay rekeyed; rerun once the key is added).
    """
    if not cipher.enabled:
        raise ConfigurationError("rekey needs MEMSTORE_ENCRYPTION_KEYS (the first key seals)")
    if not 1 <= batch_size <= 100_000:
        raise ConfigurationError("the batch size must be between 1 and 100000")
    counts: dict[str, RekeyTableCounts] = {}
    scopes: Sequence[str | None] = [None] if app_ids is None else list(app_ids)
    for spec in COLUMNS:
        rekeyed = conflicts = 0
        for app_id in scopes:
            after: tuple[Any, ...] | None = None
            while True:
                query = _page_query(spec, cipher, app_id, after, batch_size)
                with translated_errors("rekeying"), engine.begin() as conn:
                    page = conn.execute(query).all()
                    if page and not dry_run:
                        lost = _rewrite(conn, spec, cipher, page)
                        conflicts += lost
                        rekeyed += len(page) - lost
                    elif dry_run:
                        rekeyed += len(page)
                if progress is not None and page:
                    progress(spec.name, len(page))
                if len(page) < batch_size:
                    break
                after = tuple(getattr(page[-1], name) for name in spec.keys)
        counts[spec.name] = RekeyTableCounts(rekeyed=rekeyed, conflicts=conflicts)
    return RekeyReport(key_id=str(cipher.current_key_id), dry_run=dry_run, tables=counts)


def count_stale(engine: Engine, cipher: RowCipher, app_ids: Sequence[str] | None = None) -> int:
    """How many stored values are not sealed under the current key (for a progress bar)."""
    total = 0
    with translated_errors("counting rows to rekey"), engine.connect() as conn:
        for spec in COLUMNS:
            column = spec.table.c[spec.value]
            query = sa.select(sa.func.count()).where(stale_condition(column, cipher))
            if app_ids is not None:
                query = query.where(spec.table.c.app_id.in_(list(app_ids)))
            total += int(conn.execute(query).scalar() or 0)
    return total
