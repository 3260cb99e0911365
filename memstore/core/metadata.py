"""Message metadata: plain JSON data, checked on the way in and frozen all the way down.

Metadata is stored in every row and served in every window, so it must survive a JSON round
trip unchanged and can never be changed after a message is built: a message handed to
``append`` or returned by ``messages()`` may be cached and shared by every later reader.

>>> meta = freeze_metadata({"trace": "t-1", "tags": ["a", "b"], "usage": {"tokens": 12}})
>>> meta["tags"] == ["a", "b"], isinstance(meta, dict)
(True, True)
>>> meta["tags"].append("c")
Traceback (most recent call last):
...
TypeError: metadata is immutable: build a new message with new metadata
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn, SupportsIndex

MAX_METADATA_DEPTH = 32
"""Deepest nesting of lists and objects accepted in metadata (the top-level object is 1)."""

MAX_INT_BITS = 1024
"""Largest integer magnitude accepted (JSON has no limit; Python's ``int`` <-> text has one)."""

DEFAULT_MAX_METADATA_BYTES = 64 * 1024
"""Default of the ``max_metadata_bytes`` setting: compact JSON size of one message's metadata."""


def _immutable(*_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError("metadata is immutable: build a new message with new metadata")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses every change; equal to (and serialised as) a plain dict.

    Deep copies and pickles stay frozen; ``dict(frozen)`` or ``copy.copy`` give a mutable copy
    of the top level.
    """

    __slots__ = ()

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _immutable
    __ior__ = _immutable

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self  # immutable all the way down: sharing is safe

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))


class FrozenList(list[Any]):
    """A ``list`` that refuses every change; equal to (and serialised as) a plain list."""

    __slots__ = ()

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = _immutable
    clear = reverse = sort = _immutable
    __iadd__ = __imul__ = _immutable

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (FrozenList, (list(self),))

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __mul__(self, count: SupportsIndex) -> list[Any]:
        return list(self) * count


EMPTY_METADATA = FrozenDict()


def thaw(value: Any) -> Any:
    """A mutable deep copy of frozen metadata (plain dicts and lists all the way down)."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value


class MetadataError(ValueError):
    """Why metadata was refused. The text gives the position (``metadata[key 0][2]``: the
    first key's value, its third item) and the problem, never a key or a value: keys can be
    user data too."""


def _where(path: Iterable[str]) -> str:
    return "metadata" + "".join(path)


def _string(value: str, path: list[str]) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MetadataError(f"{_where(path)} is not valid UTF-8 text (a lone surrogate)") from None
    return value


def _freeze(value: Any, path: list[str], depth: int) -> Any:
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        if value.bit_length() > MAX_INT_BITS:
            raise MetadataError(f"{_where(path)} is an integer of over {MAX_INT_BITS} bits")
        return value
    if kind is str:
        return _string(value, path)
    if kind is float:
        if not math.isfinite(value):
            raise MetadataError(f"{_where(path)} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, Mapping):
        if depth >= MAX_METADATA_DEPTH:
            raise MetadataError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
        return _freeze_object(value, path, depth + 1)
    if kind is list or kind is tuple or kind is FrozenList:
        if depth >= MAX_METADATA_DEPTH:
            raise MetadataError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
        return FrozenList(
            _freeze(item, [*path, f"[{index}]"], depth + 1) for index, item in enumerate(value)
        )
    raise MetadataError(
        f"{_where(path)} is a {kind.__name__}; metadata holds only JSON data "
        "(str, int, finite float, bool, None, list, dict with str keys)"
    )


def _freeze_object(value: Mapping[Any, Any], path: list[str], depth: int) -> FrozenDict:
    out: dict[str, Any] = {}
    for position, (key, item) in enumerate(value.items()):
        if type(key) is not str:
            raise MetadataError(
                f"{_where(path)} has a key of type {type(key).__name__}; keys are str"
            )
        where = [*path, f"[key {position}]"]
        _string(key, where)
        out[key] = _freeze(item, where, depth)
    return FrozenDict(out)


def freeze_metadata(value: Any) -> FrozenDict:
    """Check ``value`` is plain JSON data and return it frozen all the way down.

    Accepted: a mapping with ``str`` keys whose values are ``None``, ``bool``, ``int`` (up to
    :data:`MAX_INT_BITS` bits), finite
    ``float``, ``str`` (valid UTF-8: no lone surrogates), lists/tuples and mappings of the
    same, nested at most :data:`MAX_METADATA_DEPTH` levels. Tuples become (frozen) lists, as
    they would after a JSON round trip. Raises :class:`MetadataError` otherwise.
    """
    if not isinstance(value, Mapping):
        raise MetadataError(f"metadata must be a dict, not {type(value).__name__}")
    if not value:
        return EMPTY_METADATA
    return _freeze_object(value, [], 1)


def freeze_stored_metadata(value: Any) -> FrozenDict:
    """Freeze metadata decoded from a stored row or cache entry (already JSON, trusted).

    Never raises for JSON data, so rows written under older, looser rules stay readable.
    """
    if type(value) is not dict:
        return freeze_metadata(value)
    if not value:
        return EMPTY_METADATA
    return FrozenDict({key: _freeze_json(item) for key, item in value.items()})


def _freeze_json(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return FrozenDict({key: _freeze_json(item) for key, item in value.items()})
    if kind is list:
        return FrozenList(_freeze_json(item) for item in value)
    return value


def metadata_size(value: Mapping[str, Any]) -> int:
    """UTF-8 bytes of ``value`` as compact JSON (what the size limit counts).

    Raises :class:`MetadataError` when ``value`` is not JSON data (possible only for a message
    built around validation, e.g. with ``model_construct``).
    """
    if not value:
        return 2
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        raise MetadataError("metadata is not JSON data") from None
