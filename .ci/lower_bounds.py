"""memstore's version floors, for the fresh-install stage of ``.ci/run``.

python3 .ci/lower_bounds.py requirements NAME...
    the dev extra's requirement lines of NAMEs (the test tools of a lowest-versions run),
    read from pyproject.toml
VENV/bin/python .ci/lower_bounds.py check [--core] EXTRA...
    in an environment resolved with uv's ``--resolution lowest-direct`` and memstore
    installed: every requirement of EXTRAs (and of the core) is installed at its floor, unless
    another installed distribution requires more (reported as raised); the ones that are not
    are listed and the exit status is 1. The requirements are read from the installed
    memstore's metadata.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floor_of(requirement: Requirement) -> Version | None:
    floors = [
        Version(spec.version)
        for spec in requirement.specifier
        if spec.operator in (">=", "==") and "*" not in spec.version
    ]
    return max(floors) if floors else None


def applies(requirement: Requirement, extras: set[str]) -> bool:
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras | {""})


def required_floors() -> dict[str, Version]:
    """Package -> the highest floor any installed distribution but memstore puts on it."""
    floors: dict[str, Version] = {}
    for dist in metadata.distributions():
        if normalized(dist.metadata["Name"] or "") == "memstore":
            continue
        for line in dist.requires or []:
            requirement = Requirement(line)
            floor = floor_of(requirement)
            if floor is not None and applies(requirement, set()):
                name = normalized(requirement.name)
                floors[name] = max(floor, floors.get(name, floor))
    return floors


def check(extras: list[str], with_core: bool) -> int:
    requirements = [Requirement(line) for line in metadata.requires("memstore") or []]
    ours = [
        requirement
        for requirement in requirements
        if (with_core and requirement.marker is None)
        or (requirement.marker is not None and applies(requirement, set(extras)))
    ]
    declared: dict[str, Version] = {}
    for requirement in ours:
        floor = floor_of(requirement)
        if floor is None:
            print(f"lower bounds: {requirement} has no floor", file=sys.stderr)
            return 1
        name = normalized(requirement.name)
        declared[name] = max(floor, declared.get(name, floor))
    others = required_floors()
    wrong = []
    for name, floor in sorted(declared.items()):
        expected = max(floor, others.get(name, floor))
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed")
            continue
        if expected == floor and installed != floor:
            wrong.append(f"{name}: declared >={floor}, installed {installed}")
    for problem in wrong:
        print(f"lower bounds: not at the floor: {problem}", file=sys.stderr)
    raised = sorted(name for name, floor in declared.items() if others.get(name, floor) > floor)
    note = f"; raised by other packages' floors: {', '.join(raised)}" if raised else ""
    at_floor = len(declared) - len(wrong) - len(raised)
    print(f"lower bounds: {at_floor}/{len(declared)} at their floor{note}")
    return 1 if wrong else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["requirements"]:
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        with pyproject.open("rb") as file:
            dev = tomllib.load(file)["project"]["optional-dependencies"]["dev"]
        wanted = {normalized(name) for name in argv[1:]}
        print("\n".join(line for line in dev if normalized(Requirement(line).name) in wanted))
        return 0
    if argv[:1] == ["check"]:
        extras = [arg for arg in argv[1:] if arg != "--core"]
        return check(extras, with_core="--core" in argv)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
