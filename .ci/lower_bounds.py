"""Read pyproject.toml's requirements for the fresh-install stage of ``.ci/run``.

    python3 .ci/lower_bounds.py extras                 the runtime extras, one per line
    python3 .ci/lower_bounds.py requirements NAME...   the dev extra's requirements of NAMEs
                                                       (test tools for a lowest-versions run)
    python3 .ci/lower_bounds.py check PINS EXTRA...    every requirement of the core and EXTRAs
                                                       is pinned in PINS (uv pip compile output)
                                                       at its lower bound; lists those that are
                                                       not and exits 1

``check --not-core`` checks only the extras' own requirements (the core's may be raised by an
extra's floor: openai-agents needs a newer pydantic than memstore does).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
NOT_RUNTIME = {"dev", "docs"}


def project() -> dict[str, object]:
    with PYPROJECT.open("rb") as file:
        data: dict[str, object] = tomllib.load(file)["project"]
    return data


def optional() -> dict[str, list[str]]:
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    return extras


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lower_bound(requirement: Requirement) -> Version | None:
    floors = [
        Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==")
    ]
    return max(floors) if floors else None


def pins(path: str) -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[normalized(name.split("[")[0])] = Version(version.split(";")[0].strip())
    return found


def check(path: str, extras: list[str], with_core: bool) -> int:
    pinned = pins(path)
    core = project()["dependencies"]
    assert isinstance(core, list)
    lines: list[str] = list(core) if with_core else []
    for extra in extras:
        lines += optional()[extra]
    wrong = []
    for line in lines:
        requirement = Requirement(line)
        floor = lower_bound(requirement)
        got = pinned.get(normalized(requirement.name))
        if floor is None or got is None:
            wrong.append(f"{requirement.name}: no lower bound in pyproject.toml or not pinned")
        elif got != floor:
            wrong.append(f"{requirement.name}: pyproject.toml says >={floor}, resolved {got}")
    for problem in wrong:
        print(f"lower bound not installable as declared: {problem}", file=sys.stderr)
    scope = ("the core, " if with_core else "") + ", ".join(extras)
    print(f"lower bounds of {scope}: {len(lines) - len(wrong)}/{len(lines)} at their floor")
    return 1 if wrong else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["extras"]:
        print("\n".join(name for name in optional() if name not in NOT_RUNTIME))
        return 0
    if argv[:1] == ["requirements"]:
        wanted = {normalized(name) for name in argv[1:]}
        print(
            "\n".join(
                line for line in optional()["dev"] if normalized(Requirement(line).name) in wanted
            )
        )
        return 0
    if argv[:1] == ["check"] and len(argv) >= 3:
        with_core = "--not-core" not in argv
        rest = [arg for arg in argv[2:] if arg != "--not-core"]
        return check(argv[1], rest, with_core)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
