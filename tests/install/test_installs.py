"""Each install alone: the core (``pip install memstore``) and every extra, simulated here.

``pip install -e '.[dev]'`` installs every extra, so the rest of the suite cannot see an
optional dependency imported where the core needs to run without it. Each test runs
``check_install.py`` in a Python that sees only what ``memstore[EXTRA]`` installs (see
``simulate.py``); ``.ci/run`` runs the same script in real fresh virtual environments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from memstore.extras import EXTRAS
from tests.install.simulate import simulated_environment

CHECK = Path(__file__).with_name("check_install.py")
INSTALLS = ["core", *EXTRAS]


def run_simulated(
    extras: list[str], args: list[str], folder: Path
) -> subprocess.CompletedProcess[str]:
    env = simulated_environment(extras, folder, dict(os.environ))
    return subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("install", INSTALLS)
def test_each_install_alone_works(install: str, tmp_path: Path) -> None:
    done = run_simulated([] if install == "core" else [install], [str(CHECK), install], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{install}: all checks passed" in done.stdout


@pytest.mark.parametrize(
    ("extras", "importable", "hidden"),
    [
        (
            [],
            ["sqlalchemy", "alembic", "redis", "pydantic", "click"],
            ["greenlet", "aiosqlite", "psycopg", "langchain_core", "google.adk"],
        ),
        (["async"], ["greenlet", "aiosqlite", "asyncmy"], ["asyncpg", "psycopg"]),
        (["google-adk"], ["google.adk", "google.genai"], ["langchain_core", "agents"]),
    ],
)
def test_the_simulation_hides_what_an_install_lacks(
    extras: list[str], importable: list[str], hidden: list[str], tmp_path: Path
) -> None:
    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1].split(','):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        print('hidden', name)\n"
        "    else:\n"
        "        print('found', name)\n"
    )
    done = run_simulated(extras, ["-c", probe, ",".join(importable + hidden)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [f"found {n}" for n in importable] + [
        f"hidden {n}" for n in hidden
    ]


def test_the_extras_table_is_pyprojects() -> None:
    declared = set(metadata.metadata("memstore").get_all("Provides-Extra") or [])
    assert set(EXTRAS) == declared - {"dev", "docs"}
