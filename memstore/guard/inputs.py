"""Checks of what a caller hands the guard: arguments, names and keys, result texts."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from typing import Any

from memstore.errors import InvalidInputError


def _arguments_text(arguments: str | Mapping[str, Any]) -> str:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, Mapping):
        try:
            return json.dumps(dict(arguments), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"arguments are not JSON-serialisable: {error}") from error
    raise InvalidInputError(
        f"arguments must be the JSON text (str) or a mapping, got {type(arguments).__name__}"
    )


def _checked_name(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{what} must be a non-empty string")
    if len(value) > limit:
        raise InvalidInputError(f"{what} is longer than {limit} characters")
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        raise InvalidInputError(f"{what} contains a control character or a lone surrogate")
    return value


def _checked_text(value: object, what: str, limit_bytes: int) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise InvalidInputError(f"{what} is not valid unicode (lone surrogate)") from error
    if "\x00" in value:
        raise InvalidInputError(f"{what} contains a NUL character, which databases reject")
    if size > limit_bytes:
        raise InvalidInputError(f"{what} is {size} bytes; the limit is {limit_bytes} bytes")
    return value
