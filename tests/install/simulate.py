"""Simulate an install of memstore with some extras inside the development environment.

``pip install -e '.[dev]'`` installs every extra, so a module that imports an optional
dependency at import time works in the test run and breaks a user's ``pip install .``. This
module computes what an install of ``memstore[EXTRAS]`` would hold (the closure of its
requirements, read from the installed metadata) and writes the modules of every other
installed distribution to a block list; ``sitecustomize/sitecustomize.py``, put on
``PYTHONPATH`` with :data:`BLOCKLIST_VARIABLE` naming that file, makes importing them fail as if
they were not installed, in that process and every Python process it starts.

The fresh-venv stage of ``.ci/run`` checks the real installs; this catches the same mistakes in
the plain ``pytest`` run, in seconds.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

BLOCKLIST_VARIABLE = "SIMULATED_INSTALL_BLOCKLIST"
"""Not a ``MEMSTORE_*`` name: ``check_install.py`` runs the demo and the examples without those,
and they must run in the simulated install too."""
SITECUSTOMIZE_DIR = Path(__file__).parent / "sitecustomize"

_MODULE_FILE = re.compile(
    r"^(?P<path>[A-Za-z_][\w/]*?)(?:/__init__)?(?:\.py|\.[\w-]+\.(?:so|pyd))$"
)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_closure(root: str, extras: Iterable[str]) -> set[str]:
    """The normalized names of the distributions ``root[extras]`` needs, transitively, as
    installed here (requirements whose markers do not hold are left out)."""
    needed: set[str] = set()
    pending: list[tuple[str, frozenset[str]]] = [(root, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, wanted = pending.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement of another platform or Python (its marker decides)
        needed.add(_normalized(dist.metadata["Name"]))
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(
                marker.evaluate({"extra": extra}) for extra in (*wanted, "")
            ):
                continue
            pending.append((requirement.name, frozenset(requirement.extras)))
    return needed


def _modules(dist: metadata.Distribution) -> set[str]:
    found: set[str] = set()
    for file in dist.files or []:
        path = str(file).replace("\\", "/")
        match = _MODULE_FILE.match(path)
        if match and ".dist-info/" not in path and not path.startswith(".."):
            found.add(match["path"].replace("/", "."))
    return found


@functools.cache
def _owners() -> dict[str, frozenset[str]]:
    """Module prefix (one and two levels) -> the installed distributions that provide it."""
    owners: dict[str, set[str]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        for module in _modules(dist):
            parts = module.split(".")
            for depth in (1, 2):
                if len(parts) >= depth:
                    owners.setdefault(".".join(parts[:depth]), set()).add(_normalized(name))
    return {prefix: frozenset(names) for prefix, names in owners.items()}


def blocked_modules(extras: Iterable[str]) -> list[str]:
    """Module prefixes only distributions outside ``memstore[extras]`` provide: a top-level
    name when no needed distribution shares it, else the second level (``google.adk`` beside
    ``google.protobuf``)."""
    needed = installed_closure("memstore", extras)
    outside = {prefix for prefix, names in _owners().items() if not names & needed}
    return sorted(
        prefix for prefix in outside if "." not in prefix or prefix.split(".")[0] not in outside
    )


def simulated_environment(
    extras: Iterable[str], folder: Path, base: dict[str, str]
) -> dict[str, str]:
    """``base`` (an environment) changed so Python processes see only ``memstore[extras]``; the
    block list is written under ``folder``."""
    names = sorted(extras)
    blocklist = folder / f"blocked-{'-'.join(names) or 'core'}.json"
    blocklist.write_text(json.dumps(blocked_modules(names)))
    env = dict(base)
    env[BLOCKLIST_VARIABLE] = str(blocklist)
    env["PYTHONPATH"] = ":".join(filter(None, [str(SITECUSTOMIZE_DIR), base.get("PYTHONPATH")]))
    return env
