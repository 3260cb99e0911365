"""Loaded at start-up when this folder is on ``PYTHONPATH`` (see ``tests/install/simulate.py``):
modules named in the block list behave as if their distribution were not installed."""

from __future__ import annotations

import json
import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any


class _NotInstalled(MetaPathFinder):
    def __init__(self, prefixes: list[str]) -> None:
        self.prefixes = frozenset(prefixes)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        parts = fullname.split(".")
        if not any(".".join(parts[:depth]) in self.prefixes for depth in (1, 2)):
            return None
        spec = PathFinder.find_spec(fullname, path)
        where = (spec.origin if spec else None) or ""
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not any("-packages" in place for place in [where, *locations]):
            return None  # not an installed distribution's module (the checkout's tests/, say)
        raise ModuleNotFoundError(
            f"No module named {fullname!r} (simulated install)", name=fullname
        )


_blocklist = os.environ.get("SIMULATED_INSTALL_BLOCKLIST")
if _blocklist:
    with open(_blocklist, encoding="utf-8") as _file:
        sys.meta_path.insert(0, _NotInstalled(json.load(_file)))
