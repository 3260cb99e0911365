"""Smoke test of ``python -m benchmarks.breakdown``: a few rounds on SQLite complete and
print every piece. Nothing is timed or compared here; the numbers are not checked."""

from __future__ import annotations

import pytest

pytest.importorskip("benchmarks.breakdown")

from benchmarks import breakdown
from benchmarks.common import Options

pytestmark = pytest.mark.slow


def test_a_few_rounds_print_every_piece() -> None:
    options = Options(
        quick=True, databases=("sqlite",), postgres_url="", redis_url="", seed=1, profile=False
    )
    text = breakdown.run(options, log=lambda _line: None, rounds=4).render()
    for piece in (
        "sqlite: load_window(app, 50)",
        "no decoded-row memo",
        "edge check",
        "sqlite: durable 20-message append",
        "validate + display rows + plan",
    ):
        assert piece in text
