"""Encryption at rest: the key list and the envelope codec (AES-256-GCM). No I/O.

A sealed value is text, so it fits the same columns as the plaintext it replaces::

    \\x01ms1:<key id>:<standard base64 of nonce (12 bytes) + ciphertext + tag (16 bytes)>

``\\x01ms1:`` is the envelope's version prefix; a value without it is plaintext (a row written
before encryption was switched on) and is read as it is until ``memstore rekey`` seals it.
The associated data binds the value to where it is stored: the column (or the cache), the
app id and the row key (the row id, or the loop guard's idempotency key), and the key id. A
value copied to another row, app or column, or altered in any byte, fails with
:class:`~memstore.errors.DecryptionError`; a key id that is not configured fails with
:class:`~memstore.errors.UnknownKeyError` naming it. Never wrong plaintext.

The first configured key seals; every configured key opens. ``cryptography`` is imported only
when keys are configured.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memstore.errors import DecryptionError, EncryptionError, UnknownKeyError
from memstore.extras import missing_extra

ENVELOPE_PREFIX = "\x01ms1:"
"""Marks a sealed value (version 1 of the envelope)."""
ENVELOPE_PREFIX_BYTES = ENVELOPE_PREFIX.encode("ascii")
PLAIN_ESCAPE = "\x01ms0:"
"""Put before a plaintext value that would otherwise read as an envelope (a text starting
with ``ENVELOPE_PREFIX`` or ``PLAIN_ESCAPE``, stored with encryption off), and taken off when
it is read: stored values stay unambiguous whatever text users send."""
_RESERVED = "\x01ms"
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
KEY_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,32}")

ORIGINAL_PAYLOAD = "chat_history_original.payload"
DISPLAY_CONTENT = "chat_history.content"
EXECUTION_RESULT = "tool_executions.result"
CACHE_ENTRY = "window-cache.entry"
"""The columns (and the cache) a value is bound to: part of its associated data."""


@dataclass(frozen=True, slots=True)
class EncryptionKey:
    """One configured key: its id (stored in every value it seals) and 32 key bytes."""

    key_id: str
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not KEY_ID_PATTERN.fullmatch(self.key_id):
            raise ValueError("a key id is 1 to 32 characters of A-Z a-z 0-9 _ . -")
        if len(self.key) != KEY_BYTES:
            got = "empty" if not self.key else f"{len(self.key)} bytes"
            raise ValueError(
                f"key {self.key_id!r} is {got}; a key is {KEY_BYTES} random bytes (256 bits) "
                "in standard base64 (`memstore.core.crypto.new_key()` makes one)"
            )


def parse_keys(value: object) -> tuple[EncryptionKey, ...]:
    """``"kid1:BASE64,kid2:BASE64"`` (or a sequence of such entries or of
    :class:`EncryptionKey`) to keys. Errors name the entry's position or key id, never key
    material."""
    if value is None:
        return ()
    if isinstance(value, str):
        entries: Iterable[object] = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, (list, tuple)):
        entries = value
    else:
        raise ValueError("expected 'kid1:BASE64KEY,kid2:BASE64KEY'")
    keys: list[EncryptionKey] = []
    for position, entry in enumerate(entries, start=1):
        if isinstance(entry, EncryptionKey):
            keys.append(entry)
            continue
        if not isinstance(entry, str) or ":" not in entry:
            raise ValueError(f"entry {position} is not 'KEY_ID:BASE64KEY'")
        key_id, _, encoded = entry.strip().partition(":")
        if not KEY_ID_PATTERN.fullmatch(key_id):
            raise ValueError(
                f"entry {position}: a key id is 1 to 32 characters of A-Z a-z 0-9 _ . -"
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {key_id!r} is not standard base64") from None
        keys.append(EncryptionKey(key_id, key))
    ids = [key.key_id.lower() for key in keys]
    for entry_key in keys:
        if ids.count(entry_key.key_id.lower()) > 1:  # SQL LIKE ignores case (SQLite, MariaDB)
            raise ValueError(f"key id {entry_key.key_id!r} is given twice (ids ignore case)")
    return tuple(keys)


def new_key() -> str:
    """A fresh random 256-bit key in standard base64 (what an entry of
    ``MEMSTORE_ENCRYPTION_KEYS`` holds after ``KEY_ID:``)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def is_sealed(value: str) -> bool:
    """Whether a stored value is an envelope (else plaintext)."""
    return value.startswith(ENVELOPE_PREFIX)


def sealed_key_id(value: str) -> str | None:
    """The key id a stored value was sealed under; ``None`` for plaintext."""
    if not value.startswith(ENVELOPE_PREFIX):
        return None
    key_id, sep, _ = value[len(ENVELOPE_PREFIX) :].partition(":")
    return key_id if sep else None


_PREFIX_CHARS = len(ENVELOPE_PREFIX)


def _b64decode(text: str) -> bytes:
    """Strict, canonical standard base64: a stray character is an error, not skipped, and so
    is a last character whose unused low bits are set (decoders ignore those bits, so two
    different envelopes would otherwise open to the same row)."""
    if sys.version_info >= (3, 11):
        raw = binascii.a2b_base64(text, strict_mode=True)
    else:  # pragma: no cover - Python 3.10
        raw = base64.b64decode(text, validate=True)
    tail = raw[len(raw) - (len(raw) % 3 or 3) :]
    if tail and base64.b64encode(tail).decode("ascii") != text[-4:]:
        raise binascii.Error("non-canonical base64")
    return raw


def _where(column: str, app_id: str, row_key: object) -> str:
    return f"{column} of row {row_key!s:.80} of app {app_id!r}"


def _associated(column: str, app_id: str, row_key: object, key_id: str) -> bytes:
    return f"memstore/1\x00{column}\x00{app_id}\x00{row_key}\x00{key_id}".encode()


class RowCipher:
    """Seals and opens stored values with the configured keys; with none it is the identity
    (and refuses sealed values, naming their key id)."""

    __slots__ = ("_aeads", "current_key_id", "enabled")

    def __init__(self, keys: Sequence[EncryptionKey] = ()) -> None:
        self.enabled = bool(keys)
        self.current_key_id: str | None = keys[0].key_id if keys else None
        """The key id new values are sealed under (the first key); ``None``: encryption off."""
        self._aeads: dict[str, Any] = {}
        if keys:
            try:
                from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            except ImportError as error:
                raise missing_extra("MEMSTORE_ENCRYPTION_KEYS", "crypto", error) from None
            self._aeads = {key.key_id: AESGCM(key.key) for key in keys}

    def __repr__(self) -> str:
        return f"RowCipher(key_ids={list(self._aeads)!r})"

    def seal(self, text: str, column: str, app_id: str, row_key: object) -> str:
        """``text`` sealed under the current key, bound to ``column``/``app_id``/``row_key``
        (``text`` itself when encryption is off)."""
        key_id = self.current_key_id
        if key_id is None:
            if text.startswith(_RESERVED) and text.startswith((ENVELOPE_PREFIX, PLAIN_ESCAPE)):
                return PLAIN_ESCAPE + text
            return text
        nonce = os.urandom(NONCE_BYTES)
        body = self._aeads[key_id].encrypt(
            nonce, text.encode("utf-8"), _associated(column, app_id, row_key, key_id)
        )
        return f"{ENVELOPE_PREFIX}{key_id}:{base64.b64encode(nonce + body).decode('ascii')}"

    def open(self, stored: str, column: str, app_id: str, row_key: object) -> str:
        """The plaintext of a stored value (a plaintext value as it is, an escaped one without
        its :data:`PLAIN_ESCAPE`)."""
        if not stored.startswith(ENVELOPE_PREFIX):
            return stored[len(PLAIN_ESCAPE) :] if stored.startswith(PLAIN_ESCAPE) else stored
        key_id, sep, encoded = stored[_PREFIX_CHARS:].partition(":")
        aead = self._aeads.get(key_id) if sep else None
        if aead is None:
            raise self._unopenable(key_id if sep else "", column, app_id, row_key)
        try:
            raw = _b64decode(encoded)
        except (binascii.Error, ValueError):
            raise DecryptionError(
                f"{_where(column, app_id, row_key)}: malformed encryption envelope", key_id=key_id
            ) from None
        try:
            plain: bytes = aead.decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated(column, app_id, row_key, key_id)
            )
        except Exception as error:  # InvalidTag: altered, moved or wrong key; or too short
            raise DecryptionError(
                f"{_where(column, app_id, row_key)} failed to decrypt under key id {key_id!r} "
                "(altered, copied from another row or app, or not the key that sealed it: "
                f"{type(error).__name__})",
                key_id=key_id,
            ) from None
        try:
            return plain.decode("utf-8")
        except UnicodeDecodeError:  # pragma: no cover - authenticated, so written by us
            raise EncryptionError(
                f"{_where(column, app_id, row_key)}: decrypted value is not UTF-8"
            ) from None

    def _unopenable(
        self, key_id: str, column: str, app_id: str, row_key: object
    ) -> DecryptionError:
        where = _where(column, app_id, row_key)
        if not KEY_ID_PATTERN.fullmatch(key_id):
            return DecryptionError(f"{where}: malformed encryption envelope")
        state = "is not configured" if self.enabled else "is needed but encryption is off"
        return UnknownKeyError(
            f"{where} is sealed under key id {key_id!r}, which {state} (MEMSTORE_ENCRYPTION_KEYS)",
            key_id=key_id,
        )

    def seal_bytes(self, data: bytes, column: str, app_id: str, row_key: object) -> bytes:
        """Like :meth:`seal` for a byte string that is UTF-8 text (cache entries)."""
        if self.current_key_id is None:
            return data
        return self.seal(data.decode("utf-8"), column, app_id, row_key).encode("ascii")

    def open_bytes(self, data: bytes, column: str, app_id: str, row_key: object) -> bytes:
        """Like :meth:`open` for a stored byte string."""
        if not data.startswith(ENVELOPE_PREFIX_BYTES):
            return data
        return self.open(data.decode("ascii", "replace"), column, app_id, row_key).encode("utf-8")

    def current(self, stored: str | None) -> bool:
        """Whether a stored value needs no rekey: ``None``, or sealed under the current key
        (with encryption off: plaintext)."""
        if stored is None:
            return True
        if self.current_key_id is None:
            return not stored.startswith(ENVELOPE_PREFIX)
        return stored.startswith(f"{ENVELOPE_PREFIX}{self.current_key_id}:")

    def seals(self, text: str) -> bool:
        """Whether :meth:`seal` changes ``text`` (encryption on, or a text that needs its
        escape): writers that skip sealing when it is off ask this first."""
        return self.enabled or text.startswith((ENVELOPE_PREFIX, PLAIN_ESCAPE))


PLAIN = RowCipher()
"""The cipher of a store without keys."""
