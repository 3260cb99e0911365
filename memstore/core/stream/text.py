"""Text the store accepts: fragments joined verbatim, and what the store would refuse (a NUL,
a lone surrogate, too many bytes) refused or, for a tool result, fitted with visible markers."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memstore.errors import InvalidMessageError, MessageTooLargeError

_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def join_parts(parts: Sequence[str]) -> str:
    """Concatenate verbatim; UTF-16 surrogate halves split across deltas are re-paired."""
    text = "".join(parts)
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (which UTF-8 cannot encode)."""
    return _SURROGATE.search(text) is not None


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def storable_text(text: str) -> str:
    """``text`` with every NUL character and lone surrogate (what databases refuse) replaced
    by U+FFFD; a storable text comes back unchanged."""
    return _UNSTORABLE.sub("\ufffd", text)


def fit_tool_result(text: str, limit: int) -> str:
    """``text`` made storable, with visible markers for every change (the ``truncate=True``
    of ``on_tool_executed``).

    NUL characters and lone surrogates (what a binary file read as text leaves) become U+FFFD
    and a line ``[memstore: N NUL or invalid characters replaced with U+FFFD]`` is added; a
    text still over ``limit`` UTF-8 bytes is cut at a character boundary and ends with
    ``[memstore: result truncated from N bytes]``. A text that is already storable comes back
    unchanged. Raises :class:`~memstore.errors.MessageTooLargeError` when ``limit`` cannot
    even hold the markers.

    >>> print(fit_tool_result("abc\\x00", 100))
    abc�
    [memstore: 1 NUL or invalid characters replaced with U+FFFD]
    >>> print(fit_tool_result("x" * 100, 60))
    xxxxxxxxxxxxxxxx
    [memstore: result truncated from 100 bytes]
    """
    cleaned, replaced = _UNSTORABLE.subn("\ufffd", text)
    markers: list[str] = []
    if replaced:
        markers.append(f"[memstore: {replaced} NUL or invalid characters replaced with U+FFFD]")
    data = cleaned.encode("utf-8")
    if len(data) + _utf8_size("".join("\n" + m for m in markers)) > limit:
        markers.append(f"[memstore: result truncated from {len(data)} bytes]")
        suffix = "".join("\n" + m for m in markers)
        room = limit - _utf8_size(suffix)
        if room < 0:
            raise MessageTooLargeError(
                f"a limit of {limit} bytes cannot hold the truncation marker",
                size=len(data),
                limit=limit,
            )
        cleaned = data[:room].decode("utf-8", "ignore")  # drops a character cut in half
    return cleaned + "".join("\n" + m for m in markers)


def check_fragment(what: str, value: str | None) -> None:
    """Refuse a streamed fragment with a NUL character (``what`` names it in the error)."""
    if value is not None and "\x00" in value:
        raise InvalidMessageError(f"{what} contains a NUL character, which databases reject")


def check_result(id: str, result: str, limit: int) -> None:
    """Refuse the result of tool call ``id`` when the store would: a NUL character, a lone
    surrogate, or more than ``limit`` UTF-8 bytes."""
    if "\x00" in result:
        raise InvalidMessageError(
            f"the result of tool call {id!r} contains a NUL character, which databases "
            "reject; report it again cleaned up, or with truncate=True"
        )
    if has_lone_surrogate(result):
        raise InvalidMessageError(
            f"the result of tool call {id!r} is not valid unicode (a lone surrogate); "
            "report it again cleaned up, or with truncate=True"
        )
    size = len(result.encode("utf-8"))
    if size > limit:
        raise MessageTooLargeError(
            f"the result of tool call {id!r} is {size} bytes; the limit is {limit} "
            "bytes (MEMSTORE_MAX_TEXT_BYTES); report it again shortened, or with "
            "truncate=True",
            size=size,
            limit=limit,
        )
