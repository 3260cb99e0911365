"""The hot reads are index range scans bounded by their limit, whatever the planner knows.

On a database of the test's own (a SQLite file, a scratch PostgreSQL or MariaDB database), a
history with one big app whose rows are all older than every other app's, many small apps,
and one big app whose rows are the newest, is read with each hot statement under EXPLAIN:
first with no statistics at all (PostgreSQL: a table never analyzed, autovacuum off;
MariaDB: the persistent statistics of the empty table, never recalculated; SQLite: no
``sqlite_stat1``), then after ``ANALYZE``. Every read must walk the ``(app_id, id)`` index
(reads of one message type: ``(app_id, message_type, id)``) in order and stop at its limit:
no sort of the app's rows, no other index, no full scan. On PostgreSQL the generic plan of the
prepared statement (planned without the values) is checked too, and a read may touch only a
few pages beyond one per row it returns (EXPLAIN ANALYZE's buffers). Every statement must
return exactly the rows plain equality on ``app_id`` selects.

Known and not checked: on PostgreSQL a read for rows newer than an id that finds fewer rows
than its limit goes on through the app's older index entries (see docs/guarantees.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg.sql
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memstore import MemoryStore, Settings
from memstore.core.loader import RowRequest
from memstore.guard import LoopGuard
from memstore.sql import migrate
from memstore.sql.direct import _newest_id, _request_page
from memstore.sql.engine import make_engine
from memstore.sql.queries import (
    NEWEST_IDS,
    history_query,
    newest_rows_query,
    oldest_first_query,
    request_scan_query,
    summary_statement,
    window_statement,
)
from memstore.sql.schema import DISPLAY_TABLE, ORIGINAL_TABLE, display, original

DATABASES = ["sqlite", "postgres", "mysql"]

BIG = 12_000
"""Rows of each big app: enough that reading one whole app is far more than a window."""
SMALL_APPS = 200
SMALL_ROWS = 30
LIMIT = 132
"""A window of 100 messages with the loader's look-ahead."""
PAGE_SLACK = 30
"""Shared buffers (8 KB pages) a bounded PostgreSQL read may touch beyond one per row it
returns (its index pages; rows of one type lie a page or more apart): a window of the big
app is about ten pages, the whole app ~800."""

OLD_APP = "app-a-old"  # sorts first, rows oldest
NEW_APP = "app-z-new"  # sorts last, rows newest
SMALL_APP = "app-m-007"
PAYLOAD = "x" * 400

APP_ID_ID = {
    ORIGINAL_TABLE: "ix_chat_history_original_app_id_id",
    DISPLAY_TABLE: "ix_chat_history_app_id_id",
}
SUMMARY_INDEX = "ix_chat_history_original_app_id_message_type_id"


def message_type(row_id: int) -> str:
    if row_id % 997 == 0:
        return "summary"
    if row_id % 50 == 0:
        return "toolExecutionRequest"
    return "user" if row_id % 2 else "ai"


def layout() -> dict[str, list[int]]:
    """Each app's ids, ascending: the old big app, the small apps interleaved, the new one."""
    apps: dict[str, list[int]] = {OLD_APP: list(range(1, BIG + 1))}
    first_small = BIG + 1
    for offset in range(SMALL_APPS * SMALL_ROWS):
        apps.setdefault(f"app-m-{offset % SMALL_APPS:03d}", []).append(first_small + offset)
    first_new = first_small + SMALL_APPS * SMALL_ROWS
    apps[NEW_APP] = list(range(first_new, first_new + BIG))
    return apps


def fill(engine: Engine, apps: dict[str, list[int]]) -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    original_rows: list[dict[str, Any]] = []
    display_rows: list[dict[str, Any]] = []
    for app, ids in apps.items():
        for row_id in ids:
            common = {"id": row_id, "app_id": app, "user_id": "u", "created_at": now}
            original_rows.append(
                {
                    **common,
                    "message_type": message_type(row_id),
                    "payload": PAYLOAD,
                    "updated_at": now,
                    "is_deleted": row_id % 101 == 0,
                }
            )
            display_rows.append({**common, "role": "user", "content": PAYLOAD, "updated_at": now})
    original_rows.sort(key=lambda row: row["id"])
    display_rows.sort(key=lambda row: row["id"])
    with engine.begin() as conn:
        for start in range(0, len(original_rows), 5000):
            conn.execute(original.insert(), original_rows[start : start + 5000])
            conn.execute(display.insert(), display_rows[start : start + 5000])


@dataclass(frozen=True)
class Read:
    name: str
    statement: Any
    params: dict[str, Any]
    expected: list[int]
    """The ids it must return, in order (sorted when the statement's order is not defined)."""
    ordered: bool = True
    width: int = 1
    """Result columns that are ids (the newest ids of both histories: 2)."""


def reads(app: str, ids: list[int], guard: LoopGuard) -> list[Read]:
    """The hot reads of ``app`` (whose ids are ``ids``, ascending), with their answers."""
    kept = [i for i in ids if i % 101]
    newest = kept[::-1]
    rows = [i for i in newest if message_type(i) != "summary"]
    summaries = [i for i in newest if message_type(i) == "summary"]
    requests = [i for i in newest if message_type(i) == "toolExecutionRequest"]
    middle = ids[len(ids) // 2]
    before = middle if len(ids) > 2 * LIMIT else None
    after = ids[len(ids) // 4] if len(ids) > 2 * LIMIT else ids[0] - 1
    out: list[Read] = []
    for literal in (True, False):
        for b in (False, True):
            for a in (False, True):
                for s, r in ((False, False), (True, False), (False, True)):
                    if b and before is None:
                        continue
                    params: dict[str, Any] = {"w_app": app}
                    if not literal:
                        params["w_limit"] = LIMIT
                    window = rows
                    if b:
                        params["w_before"] = before
                        window = [i for i in window if i < before]
                    if a:
                        params["w_after"] = after
                        window = [i for i in window if i > after]
                    if r:  # the tool requests alone (the widening read's probe)
                        window = [i for i in requests if (not b or i < before)]
                        window = [i for i in window if not a or i > after]
                    expected = window[:LIMIT]
                    if s:
                        expected = sorted(expected + summaries[:1])
                    shape = f"window(before={b}, after={a}, summary={s}, requests_only={r}, "
                    shape += f"literal={literal})"
                    out.append(
                        Read(
                            shape,
                            window_statement(b, a, s, LIMIT if literal else None, r),
                            params,
                            expected,
                            ordered=not s,
                        )
                    )
    for request in (RowRequest(LIMIT, summary=True), RowRequest(LIMIT, before, after)):
        expected = [
            i
            for i in rows
            if (request.before_id is None or i < request.before_id)
            and (request.after_id is None or i > request.after_id)
        ][:LIMIT]
        if request.summary:
            expected = sorted(expected + summaries[:1])
        out.append(
            Read(
                f"core {request}",
                newest_rows_query(app, request),
                {},
                expected,
                ordered=not request.summary,
            )
        )
    out.append(Read("newest summary", summary_statement(), {"w_app": app}, summaries[:1]))
    out.append(Read("newest ids", NEWEST_IDS, {"app_id": app}, [ids[-1], ids[-1]], width=2))
    out.append(Read("direct newest id", sa.select(_newest_id(original)), {"d_app": app}, ids[-1:]))
    out.append(Read("request scan", request_scan_query(app, None), {}, requests[:200]))
    out.append(Read("direct request page", _request_page(False), {"d_app": app}, requests[:200]))
    if before is not None:
        out.append(
            Read(
                "request scan before",
                request_scan_query(app, before),
                {},
                [i for i in requests if i < before][:200],
            )
        )
        out.append(
            Read(
                "direct request page before",
                _request_page(True),
                {"d_app": app, "d_before": before},
                [i for i in requests if i < before][:200],
            )
        )
    shown = ids[::-1]  # no display row is deleted
    out.append(Read("history", history_query(app, LIMIT, None), {}, shown[:LIMIT]))
    if before is not None:
        out.append(
            Read(
                "history before",
                history_query(app, LIMIT, before),
                {},
                [i for i in shown if i < before][:LIMIT],
            )
        )
    oldest = kept[:LIMIT]
    out.append(Read("oldest first", oldest_first_query(app, 0, LIMIT), {}, oldest))
    out.append(
        Read(
            "oldest first after",
            oldest_first_query(app, after, LIMIT),
            {},
            [i for i in kept if i > after][:LIMIT],
        )
    )
    out.append(
        Read(
            "loop guard history",
            guard._history_query,
            {"app_id": app},
            newest[: guard.history_rows],
        )
    )
    return out


# -- reading plans -----------------------------------------------------------------------------


def postgres_plan_problems(plan: Any) -> list[str]:
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]["Plan"]
    problems: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        kind = node["Node Type"]
        relation = node.get("Relation Name")
        if kind in ("Sort", "Incremental Sort"):
            problems.append(f"a {kind} node")
        if relation is not None:
            index = node.get("Index Name")
            wanted = {APP_ID_ID[relation]}
            if relation == ORIGINAL_TABLE:
                wanted.add(SUMMARY_INDEX)
            if kind not in ("Index Scan", "Index Only Scan") or index not in wanted:
                problems.append(f"{kind} on {relation} using {index}")
        for child in node.get("Plans", []):
            walk(child)

    walk(top)
    pages = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    if pages > PAGE_SLACK + top["Actual Rows"]:
        problems.append(f"{pages} pages touched")
    return problems


EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY OFF, FORMAT JSON)"


def postgres_problems(conn: Connection, sql: str, params: Any) -> list[str]:
    """The plan for these values, and the generic plan of the prepared statement (what a
    statement prepared by the driver, run five times or more, may be given: planned without
    the values, as without statistics)."""
    plan = conn.exec_driver_sql(f"{EXPLAIN} {sql}", params).scalar_one()
    problems = postgres_plan_problems(plan)
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    numbered = sql
    for number, name in enumerate(names, start=1):
        numbered = numbered.replace(f"%({name})s", f"${number}")
    driver = conn.connection.driver_connection  # EXECUTE takes literals, not parameters
    arguments = ", ".join(psycopg.sql.Literal(params[name]).as_string(driver) for name in names)
    conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
    conn.exec_driver_sql(f"PREPARE memstore_plan AS {numbered}")
    try:
        execute = f"EXECUTE memstore_plan({arguments})" if names else "EXECUTE memstore_plan"
        generic = conn.exec_driver_sql(f"{EXPLAIN} {execute}").scalar_one()
    finally:
        conn.exec_driver_sql("DEALLOCATE memstore_plan")
        conn.exec_driver_sql("RESET plan_cache_mode")
    problems += [f"generic plan: {problem}" for problem in postgres_plan_problems(generic)]
    return problems


def mysql_problems(conn: Connection, sql: str, params: Any) -> list[str]:
    result = conn.exec_driver_sql(f"EXPLAIN {sql}", params)
    problems: list[str] = []
    for row in result.mappings():
        extra = row["Extra"] or ""
        if "filesort" in extra or "temporary" in extra:
            problems.append(f"{row['table']}: {extra}")
        table = row["table"] or ""
        if table in APP_ID_ID:
            wanted = {APP_ID_ID[table]}
            if table == ORIGINAL_TABLE:
                wanted.add(SUMMARY_INDEX)
            if row["type"] not in ("range", "ref") or row["key"] not in wanted:
                problems.append(f"{table}: {row['type']} on {row['key']}")
    return problems


def sqlite_problems(conn: Connection, sql: str, params: Any) -> list[str]:
    lines = [row[3] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params)]
    problems = [line for line in lines if "TEMP B-TREE" in line]
    for line in lines:
        for table in APP_ID_ID:
            if f" {table} " not in f"{line} ":
                continue
            wanted = [APP_ID_ID[table]] + ([SUMMARY_INDEX] if table == ORIGINAL_TABLE else [])
            if not line.startswith("SEARCH") or not any(
                f"INDEX {index} (" in line for index in wanted
            ):
                problems.append(line)
    return problems


PROBLEMS = {"postgresql": postgres_problems, "mysql": mysql_problems, "mariadb": mysql_problems}


def plan_problems(conn: Connection, read: Read) -> list[str]:
    compiled = read.statement.compile(dialect=conn.dialect)
    params = compiled.construct_params(read.params)
    # the driver's own parameter form (positional for SQLite's qmark), processed as Core does
    processors = compiled._bind_processors
    values = {
        name: processors[name](value) if name in processors else value
        for name, value in params.items()
    }
    args: Any = values
    if compiled.positiontup is not None:
        args = tuple(values[name] for name in compiled.positiontup)
    check = PROBLEMS.get(conn.dialect.name, sqlite_problems)
    return check(conn, compiled.string, args)


# -- the test ----------------------------------------------------------------------------------


@pytest.fixture
def engine(scratch_database_url: str) -> Iterator[Engine]:
    engine = make_engine(scratch_database_url)
    migrate.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def drop_statistics(engine: Engine) -> None:
    """Keep the planner without statistics until :func:`gather_statistics`."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            for table in APP_ID_ID:
                conn.exec_driver_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        elif engine.dialect.name in ("mysql", "mariadb"):
            for table in APP_ID_ID:  # the statistics of the empty table, kept stale
                conn.exec_driver_sql(f"ALTER TABLE {table} STATS_AUTO_RECALC = 0")


def has_statistics(engine: Engine) -> bool:
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            count = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stats WHERE tablename = %(t)s", {"t": ORIGINAL_TABLE}
            ).scalar_one()
        elif engine.dialect.name in ("mysql", "mariadb"):
            count = conn.exec_driver_sql(
                "SELECT n_rows FROM mysql.innodb_table_stats "
                "WHERE database_name = DATABASE() AND table_name = %(t)s",
                {"t": ORIGINAL_TABLE},
            ).scalar_one()
        else:
            tables = conn.exec_driver_sql(
                "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'"
            ).scalar_one()
            count = (
                tables
                and conn.exec_driver_sql(
                    "SELECT count(*) FROM sqlite_stat1 WHERE tbl = ?", (ORIGINAL_TABLE,)
                ).scalar_one()
            )
    return bool(count)


def gather_statistics(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in APP_ID_ID:
            if engine.dialect.name in ("mysql", "mariadb"):
                conn.exec_driver_sql(f"ANALYZE TABLE {table}").all()
            else:
                conn.exec_driver_sql(f"ANALYZE {table}")


def check_reads(engine: Engine, guard: LoopGuard, apps: dict[str, list[int]]) -> list[str]:
    failures: list[str] = []
    with engine.connect() as conn:
        for app in (OLD_APP, NEW_APP, SMALL_APP):
            for read in reads(app, apps[app], guard):
                result = conn.execute(read.statement, read.params)
                ids = [value for row in result for value in row[: read.width]]
                if not read.ordered:
                    ids.sort()
                if ids != read.expected:
                    failures.append(f"{app} {read.name}: wrong rows")
                for problem in plan_problems(conn, read):
                    failures.append(f"{app} {read.name}: {problem}")
            conn.rollback()
    return failures


@pytest.mark.parametrize("scratch_database_url", DATABASES, indirect=True, ids=DATABASES)
def test_hot_reads_are_bounded_index_scans_with_and_without_statistics(
    scratch_database_url: str, engine: Engine
) -> None:
    apps = layout()
    drop_statistics(engine)
    fill(engine, apps)
    store = MemoryStore(Settings(database_url=scratch_database_url), engine=engine)
    guard = LoopGuard(store)
    try:
        assert not has_statistics(engine)
        before = check_reads(engine, guard, apps)
        gather_statistics(engine)
        assert has_statistics(engine)
        after = check_reads(engine, guard, apps)
    finally:
        store.close()
    failures = [f"without statistics: {line}" for line in before]
    failures += [f"with statistics: {line}" for line in after]
    assert not failures, "\n".join(failures)
