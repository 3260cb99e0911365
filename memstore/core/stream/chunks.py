"""Reading a stream chunk (a JSON object or an SDK object alike): its fields, checked for
type, and its description for an error message, which names the chunk's shape and never its
values (a chunk carries chat text, and errors never do)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from memstore.errors import StreamProtocolError

Op: TypeAlias = tuple[Any, ...]
"""One change a chunk asks for: its name, then its arguments (see ``StreamAssembler._apply``)."""


_SHOWN_FIELDS = 12
_FIELD_NAME_CHARS = 40
_NOT_RECORDS = (str, bytes, bytearray, int, float, list, tuple, set, frozenset, type(None))


def describe_chunk(chunk: object) -> str:
    """The chunk's shape (its type, its field names, its length), never its values: a chunk
    carries chat text, and errors never do."""
    if isinstance(chunk, (str, bytes, bytearray)):
        return f"a {type(chunk).__name__} of {len(chunk)} characters"
    if isinstance(chunk, Mapping):
        names = [key for key in chunk if _is_field_name(key)]
        shown = ", ".join(sorted(names)[:_SHOWN_FIELDS])
        more = len(chunk) - min(len(names), _SHOWN_FIELDS)
        tail = f" and {more} more" if more > 0 else ""
        return f"a {type(chunk).__name__} with fields [{shown}]{tail}"
    if isinstance(chunk, (list, tuple)):
        return f"a {type(chunk).__name__} of {len(chunk)} items"
    return f"a {type(chunk).__name__}"


def got(value: object) -> str:
    """A wrong-typed argument for an error message: small scalars as they are, else the type."""
    if value is None or isinstance(value, (bool, int)):
        return repr(value)[:24]
    if isinstance(value, str):
        return "an empty str" if not value else f"a str of {len(value)} characters"
    return f"a {type(value).__name__}"


def _is_field_name(key: object) -> bool:
    return isinstance(key, str) and len(key) <= _FIELD_NAME_CHARS and key.isidentifier()


def describe_kind(kind: object) -> str:
    """A chunk's ``type`` value when it looks like a protocol name, else only its length."""
    if _is_field_name(kind):
        return repr(kind)
    return f"<a {type(kind).__name__} of {len(kind)} characters>" if isinstance(kind, str) else "?"


def get(obj: object, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` for SDK objects; ``None`` when absent."""
    if type(obj) is dict or isinstance(obj, Mapping):  # the common case first: no ABC check
        return obj.get(key)
    return getattr(obj, key, None)


def is_record(obj: object) -> bool:
    """A JSON object or an SDK object: something with named fields, not a scalar or list."""
    return type(obj) is dict or isinstance(obj, Mapping) or not isinstance(obj, _NOT_RECORDS)


def is_list(obj: object) -> bool:
    """A JSON array or another sequence that is not text."""
    if type(obj) is list:
        return True
    return isinstance(obj, Sequence) and not isinstance(obj, (str, bytes, bytearray))


def malformed(chunk: object, why: str) -> StreamProtocolError:
    """The error for a chunk that is not of its protocol's shape (``why`` says how)."""
    return StreamProtocolError(f"malformed chunk ({why}): {describe_chunk(chunk)}")


def str_field(chunk: object, obj: object, key: str, *, required: bool) -> str | None:
    """``obj``'s string field ``key`` (``None`` when absent and not ``required``)."""
    value = get(obj, key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise malformed(chunk, f"{key} must be a string, got {type(value).__name__}")
    return value


def index_field(chunk: object, obj: object, key: str) -> int | None:
    """An optional ``int >= 0`` field (``None`` when absent)."""
    value = get(obj, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise malformed(chunk, f"{key} must be an int >= 0, got {got(value)}")
    return value


def record_field(chunk: object, obj: object, key: str, *, required: bool) -> Any:
    """``obj``'s object field ``key`` (``None`` when absent and not ``required``)."""
    value = get(obj, key)
    if value is None and not required:
        return None
    if not is_record(value):
        raise malformed(chunk, f"{key} must be an object, got {type(value).__name__}")
    return value


def list_field(chunk: object, obj: object, key: str) -> Sequence[Any]:
    """``obj``'s list field ``key`` (empty when absent)."""
    value = get(obj, key)
    if value is None:
        return []
    if not is_list(value):
        raise malformed(chunk, f"{key} must be a list, got {type(value).__name__}")
    return value  # type: ignore[no-any-return]
