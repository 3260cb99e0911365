"""Smoke test of ``python -m benchmarks.compare``: a tiny run on SQLite completes and prints
its table and targets. Nothing is timed or compared here; the numbers are not checked."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("benchmarks.compare")

from benchmarks import compare
from benchmarks.common import Options

pytestmark = pytest.mark.slow


def test_tiny_compare_run_prints_every_measure() -> None:
    options = Options(
        quick=True,
        databases=("sqlite",),
        postgres_url="",
        redis_url="",
        seed=1,
        profile=False,
    )
    report = compare.run(options, log=lambda _line: None, plan=compare.TINY)
    text = report.render()
    assert "sqlite: newest 50 of 100" in text
    assert "memstore load_window" in text
    assert "raw sqlite3 LIMIT 50" in text
    assert "sqlite: durable 20-message turn" in text
    assert "8 writers" in text
    assert any(check.what == "async / sync" for check in report.checks)
    checked = {(check.scope, check.what) for check in report.checks}
    turn, writers = "sqlite: durable 20-message turn", "sqlite: 20-message turn, 8 writers"
    assert (turn, "memstore append / raw") in checked
    if compare.have("agents.memory.sqlite_session"):  # issue 29's peer targets
        assert (turn, "memstore append / Agents SQLiteSession") in checked
        assert (writers, "memstore / Agents SQLiteSession") in checked
    if shutil.which("redis-server"):
        assert (turn, "Redis window update / no-op EVALSHA") in checked
        whats = {what for _scope, what in checked}
        assert "memstore reload / raw floor" in whats
        assert any(what.endswith("/ one process") for what in whats)


def test_the_documented_smoke_run_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m benchmarks.compare --tiny`` (the docs' smoke run) exits 0 once every measure
    ran: the targets are sized for full data and not judged on tiny data."""
    assert compare.main(["--tiny", "--databases", "sqlite"]) == 0
    assert "targets are not judged" in capsys.readouterr().out
