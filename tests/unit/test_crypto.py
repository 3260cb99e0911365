"""The envelope codec and the key setting (pure; no database)."""

from __future__ import annotations

import base64

import pytest

from memstore import ConfigurationError, DecryptionError, Settings, UnknownKeyError
from memstore.cache.base import WindowPolicy, decode_entries, encode_entry
from memstore.core.crypto import (
    CACHE_ENTRY,
    ENVELOPE_PREFIX,
    ORIGINAL_PAYLOAD,
    PLAIN,
    PLAIN_ESCAPE,
    EncryptionKey,
    RowCipher,
    new_key,
    parse_keys,
    sealed_key_id,
)
from memstore.core.window import entry_for
from memstore.messages import UserMessage

K1 = base64.b64encode(b"\x11" * 32).decode()
K2 = base64.b64encode(b"\x22" * 32).decode()


def cipher(spec: str) -> RowCipher:
    return RowCipher(parse_keys(spec))


def test_seal_round_trips_and_hides_the_text() -> None:
    c = cipher(f"k1:{K1}")
    sealed = c.seal("héllo secret", ORIGINAL_PAYLOAD, "app", 42)
    assert sealed.startswith(f"{ENVELOPE_PREFIX}k1:") and "secret" not in sealed
    assert sealed != c.seal("héllo secret", ORIGINAL_PAYLOAD, "app", 42)  # fresh nonce
    assert c.open(sealed, ORIGINAL_PAYLOAD, "app", 42) == "héllo secret"
    assert sealed_key_id(sealed) == "k1" and sealed_key_id("{}") is None
    assert c.open("plain text", ORIGINAL_PAYLOAD, "app", 42) == "plain text"


@pytest.mark.parametrize(
    ("column", "app", "row"),
    [(ORIGINAL_PAYLOAD, "other", 42), (ORIGINAL_PAYLOAD, "app", 43), (CACHE_ENTRY, "app", 42)],
)
def test_a_value_moved_elsewhere_fails(column: str, app: str, row: int) -> None:
    c = cipher(f"k1:{K1}")
    sealed = c.seal("text", ORIGINAL_PAYLOAD, "app", 42)
    with pytest.raises(DecryptionError) as raised:
        c.open(sealed, column, app, row)
    assert raised.value.key_id == "k1"


def test_every_altered_character_fails() -> None:
    c = cipher(f"k1:{K1}")
    sealed = c.seal("some text", ORIGINAL_PAYLOAD, "app", 1)
    body_start = len(ENVELOPE_PREFIX) + 3
    for i in range(body_start, len(sealed)):
        altered = sealed[:i] + ("B" if sealed[i] == "A" else "A") + sealed[i + 1 :]
        with pytest.raises(DecryptionError):
            c.open(altered, ORIGINAL_PAYLOAD, "app", 1)
    with pytest.raises(DecryptionError):
        c.open(sealed[:-20], ORIGINAL_PAYLOAD, "app", 1)
    with pytest.raises(DecryptionError):
        c.open(ENVELOPE_PREFIX + "garbage", ORIGINAL_PAYLOAD, "app", 1)


def test_unused_low_bits_of_the_last_character_are_not_ignored() -> None:
    """Base64 decoders ignore the unused bits of a final partial group: an envelope that
    differs only there must still be refused (one stored form per row)."""
    c = cipher(f"k1:{K1}")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    for text in ("x", "xy", "some text"):
        sealed = c.seal(text, ORIGINAL_PAYLOAD, "app", 1)
        body = sealed.rstrip("=")
        padding = len(sealed) - len(body)
        if not padding:
            continue
        last = alphabet.index(body[-1])
        unused = (1 << (2 * padding)) - 1  # 2 bits per "=" are spare in the last character
        assert last & unused == 0
        altered = body[:-1] + alphabet[last | 1] + "=" * padding
        with pytest.raises(DecryptionError):
            c.open(altered, ORIGINAL_PAYLOAD, "app", 1)


def test_unknown_keys_are_named() -> None:
    sealed = cipher(f"k1:{K1}").seal("t", ORIGINAL_PAYLOAD, "a", 1)
    with pytest.raises(UnknownKeyError) as raised:
        cipher(f"k2:{K2}").open(sealed, ORIGINAL_PAYLOAD, "a", 1)
    assert raised.value.key_id == "k1" and "'k1'" in str(raised.value)
    with pytest.raises(UnknownKeyError, match="encryption is off"):
        PLAIN.open(sealed, ORIGINAL_PAYLOAD, "a", 1)
    rotated = cipher(f"k2:{K2},k1:{K1}")
    assert rotated.open(sealed, ORIGINAL_PAYLOAD, "a", 1) == "t"
    assert not rotated.current(sealed) and rotated.current(rotated.seal("t", "c", "a", 1))
    assert PLAIN.current("plain") and not PLAIN.current(sealed) and rotated.current(None)


def test_plain_cipher_is_the_identity() -> None:
    assert PLAIN.seal("x", ORIGINAL_PAYLOAD, "a", 1) == "x" and not PLAIN.enabled


@pytest.mark.parametrize(
    "text",
    [f"{ENVELOPE_PREFIX}k1:AAAA", ENVELOPE_PREFIX, PLAIN_ESCAPE, f"{PLAIN_ESCAPE}x", "\x01ms2:"],
)
def test_text_that_looks_sealed_round_trips_with_or_without_keys(text: str) -> None:
    stored = PLAIN.seal(text, ORIGINAL_PAYLOAD, "a", 1)
    assert PLAIN.seals(text) == (stored != text)
    assert PLAIN.open(stored, ORIGINAL_PAYLOAD, "a", 1) == text
    assert cipher(f"k1:{K1}").open(stored, ORIGINAL_PAYLOAD, "a", 1) == text
    sealed = cipher(f"k1:{K1}").seal(text, ORIGINAL_PAYLOAD, "a", 1)
    assert cipher(f"k1:{K1}").open(sealed, ORIGINAL_PAYLOAD, "a", 1) == text


@pytest.mark.parametrize(
    "bad",
    [
        f"k1:{K1[:-4]}",
        f"k1{K1}",
        f"k1:{K1},k1:{K2}",
        f"k1:{K1},K1:{K2}",
        "k1:!!!!",
        f"bad id:{K1}",
        f"{'x' * 33}:{K1}",
    ],
)
def test_bad_keys_are_a_configuration_error_without_key_material(bad: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Settings(encryption_keys=bad)
    text = str(raised.value)
    assert K1 not in text and K2 not in text and K1[:-4] not in text
    assert raised.value.__cause__ is None
    with pytest.raises(ConfigurationError) as from_env:
        Settings.from_env({"MEMSTORE_ENCRYPTION_KEYS": bad})
    assert K1[:10] not in str(from_env.value)


def test_settings_parse_and_never_show_keys() -> None:
    fresh = new_key()
    assert len(base64.b64decode(fresh)) == 32
    settings = Settings.from_env(
        {"MEMSTORE_ENCRYPTION_KEYS": f" k2:{K2} , k1:{K1} ", "MEMSTORE_ENCRYPT_CACHE": "false"}
    )
    assert [k.key_id for k in settings.encryption_keys] == ["k2", "k1"]
    assert settings.encrypt_cache is False
    assert K1 not in repr(settings) and K2 not in repr(settings) and K2 not in str(settings)
    assert settings.model_dump()["encryption_keys"] == ["k2", "k1"]
    assert K1 not in settings.model_dump_json() and "k1" in settings.model_dump_json()
    assert Settings().encryption_keys == () and Settings().encrypt_cache is True
    same = Settings(encryption_keys=[EncryptionKey("k", b"\x00" * 32)])
    assert same.encryption_keys[0].key == b"\x00" * 32


def test_cache_entries_are_sealed_per_app_and_header() -> None:
    policy = WindowPolicy.from_settings(Settings(encryption_keys=f"k1:{K1}"))
    assert policy.cipher.enabled
    assert not WindowPolicy.from_settings(
        Settings(encryption_keys=f"k1:{K1}", encrypt_cache=False)
    ).cipher.enabled
    entry = entry_for(UserMessage(text="cached secret"), tokens=3)
    raw = encode_entry(entry, "app", policy.cipher)
    header, _, body = raw.partition(b"\x1e")
    assert b"cached secret" not in raw and header == encode_entry(entry).partition(b"\x1e")[0]
    assert body.startswith(ENVELOPE_PREFIX.encode())
    assert decode_entries([raw], "app", policy.cipher) == [entry.message]
    with pytest.raises(DecryptionError):
        decode_entries([raw], "other", policy.cipher)
    assert decode_entries([encode_entry(entry)], "app", policy.cipher) == [entry.message]


def test_missing_cryptography_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from memstore.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(MissingExtraError) as raised:
        cipher(f"k1:{K1}")
    assert raised.value.extra == "crypto" and "memstore[crypto]" in str(raised.value)
    assert not RowCipher().enabled  # no keys: cryptography is never imported


@pytest.mark.parametrize(("spec", "words"), [("k2:", "is empty"), ("k2:QUJD", "is 3 bytes")])
def test_a_key_of_the_wrong_size_says_what_it_got_and_what_is_needed(spec: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings(encryption_keys=spec)
    assert words in str(caught.value) and "32 random bytes" in str(caught.value)
    assert "QUJD" not in str(caught.value)  # never key material
