"""The fault soak, short form (issue 32, item 4); see docs/guarantees.md, "Fault soak".

Runs on PostgreSQL + Redis and on MariaDB + Redis when their URLs are set and
``redis-server`` is installed (a set URL that does not answer fails). ``MEMSTORE_TEST_SOAK_LONG=1``
runs the long form instead, ``MEMSTORE_TEST_SOAK_SECONDS=N`` stretches either to N seconds;
``python -m tests.soak`` runs it outside pytest and prints its figures.

The checker's own tests below feed it logs with a planted defect of each kind, so a soak that
reports nothing is known to be able to report something.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MYSQL_URL, POSTGRES_URL
from tests.integration.conftest import REDIS_SERVER
from tests.soak.checker import check
from tests.soak.controller import SoakParams, run_soak, schedule


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgres", "mysql"])
def test_fault_soak(db: str, tmp_path: Path) -> None:
    url = POSTGRES_URL if db == "postgres" else MYSQL_URL
    if not url:
        pytest.skip(f"MEMSTORE_TEST_{db.upper()}_URL is not set")
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (set MEMSTORE_TEST_REDIS_SERVER)")
    params = SoakParams.from_env()
    result = run_soak(db, url, params, tmp_path)
    print(json.dumps({**result.figures, "fault_log": result.faults}))  # shown with -s
    assert result.violations == [], "\n".join(result.violations[:50])
    figures = result.figures
    # the faults took effect and the load was real
    assert figures["commits_cut"] == params.reply_lost + params.before_commit
    assert figures["connections_killed"] > 0
    assert figures["messages"].get("ok", 0) > 100
    assert figures["reads_checked"] > 100
    assert figures["ops"].get("purge", 0) > 0 and figures["ops"].get("prune", 0) > 0
    assert figures["ops"].get("cli_reload", 0) == 1


def test_the_fault_schedule_is_seeded_and_never_overlaps() -> None:
    params = SoakParams.short()
    events = schedule(params)
    assert events == schedule(params)
    kinds = [kind for _, kind in events]
    assert kinds.count("kill") == params.kills and kinds[0] == "snapshot"
    offsets = [at for at, _ in events]
    assert offsets == sorted(offsets) and offsets[-1] < params.duration * 0.9
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert min(gaps) > 1.0  # one fault at a time


# -- the checker catches each kind of defect ---------------------------------------------------


def _append(
    key: str, app: str, t0: float, t1: float, outcome: str = "ok", row: int = 0
) -> dict[str, Any]:
    return {
        "op": "append",
        "w": 0,
        "app": app,
        "keys": [key],
        "t0": t0,
        "t1": t1,
        "outcome": outcome,
        "ids": [row] if outcome == "ok" else None,
        "doubts": [],
        "errors": [] if outcome == "ok" else ["StorageError"],
    }


def _read(keys: list[str], app: str, t0: float, kind: str = "cached") -> dict[str, Any]:
    return {"op": "read", "w": 1, "kind": kind, "app": app, "t0": t0, "t1": t0 + 0.01, "keys": keys}


def test_a_clean_log_has_no_violation() -> None:
    records = [_append("k1", "a", 0, 1, row=10), _append("k2", "a", 2, 3, row=11)]
    records += [_read(["k1", "k2"], "a", 20), _read(["k1"], "a", 3.5)]
    found = check(records, {"a": [(10, "k1"), (11, "k2")]}, cached_bound=4)
    assert found.violations == []


def test_the_checker_reports_a_lost_write() -> None:
    found = check([_append("k1", "a", 0, 1, row=10)], {"a": []}, cached_bound=4)
    assert [v.split(":")[0] for v in found.violations] == ["lost"]


def test_the_checker_reports_a_write_stored_twice() -> None:
    records = [_append("k1", "a", 0, 1, outcome="unknown")]
    found = check(records, {"a": [(10, "k1"), (12, "k1")]}, cached_bound=4)
    assert [v.split(":")[0] for v in found.violations] == ["stored twice"]


def test_the_checker_reports_a_failed_append_that_was_stored() -> None:
    records = [_append("k1", "a", 0, 1, outcome="failed")]
    found = check(records, {"a": [(10, "k1")]}, cached_bound=4)
    assert [v.split(":")[0] for v in found.violations] == ["failed but stored"]


def test_the_checker_reports_a_stale_window_only_past_the_bound() -> None:
    records = [_append("k1", "a", 0, 1, row=10), _append("k2", "a", 2, 3, row=11)]
    records += [_read(["k1"], "a", 6.5), _read(["k1"], "a", 8), _read(["k1"], "a", 3.5, "sql")]
    found = check(records, {"a": [(10, "k1"), (11, "k2")]}, cached_bound=4)
    assert [v.split(":")[0] for v in found.violations] == ["stale window", "stale window"]
    assert "at 8.000" in found.violations[0] and "sql read" in found.violations[1]


def test_the_checker_reports_purged_data_served() -> None:
    purge = {"op": "purge", "w": 2, "app": "a", "t0": 2.0, "t1": 2.5}
    records = [_append("k1", "a", 0, 1, row=10), purge, _read(["k1"], "a", 3.0)]
    found = check(records, {"a": []}, cached_bound=4)
    assert [v.split(":")[0] for v in found.violations] == ["purged data served"]
