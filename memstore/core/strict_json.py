"""Strict JSON reading: the ``NaN``/``Infinity`` literals Python's ``json`` accepts are refused,
as providers and tool-call arguments never take them."""

from __future__ import annotations

import json
import math
from typing import Any


def reject_constant(name: str) -> Any:
    """``json``'s ``parse_constant`` hook: ``NaN``, ``Infinity`` and ``-Infinity`` raise."""
    raise ValueError(f"{name} is not valid JSON")


def loads_json(text: str | bytes) -> Any:
    """``json.loads`` that rejects the ``NaN``/``Infinity`` literals."""
    return json.loads(text, parse_constant=reject_constant)


def loads_strict(text: str | bytes) -> Any:
    """:func:`loads_json` that also rejects numbers too large for a double."""
    value = loads_json(text)
    if not _finite(value):
        raise ValueError("a number overflows to infinity")
    return value


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(item) for item in value.values())
    if isinstance(value, list):
        return all(_finite(item) for item in value)
    return True
