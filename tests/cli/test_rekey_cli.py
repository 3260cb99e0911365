"""``memstore rekey`` with click's CliRunner on a private SQLite file."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from memstore import MemoryStore, Settings, UserMessage
from memstore.cli import cli
from memstore.core.crypto import ENVELOPE_PREFIX
from memstore.sql.schema import display, original

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(1, 33))).decode()


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("MEMSTORE_REDIS_URL", raising=False)
    monkeypatch.delenv("MEMSTORE_ENCRYPTION_KEYS", raising=False)
    url = f"sqlite:///{tmp_path / 'rekey.db'}"
    store = MemoryStore(Settings(database_url=url))
    store.migrate()
    for app in ("a", "b"):
        store.append(app, [UserMessage(text=f"plain secret {i}") for i in range(7)])
    store.close()
    yield url


def values(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            found = list(conn.execute(sa.select(original.c.payload)).scalars())
            return found + list(conn.execute(sa.select(display.c.content)).scalars())
    finally:
        engine.dispose()


def run(url: str, keys: str | None, *args: str) -> tuple[int, str, str]:
    env = {"MEMSTORE_ENCRYPTION_KEYS": keys} if keys else {}
    result = CliRunner().invoke(cli, ["rekey", *args, "--yes", "--database-url", url], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_rekey_dry_run_then_batches_then_rotation(url: str) -> None:
    code, out, err = run(url, f"k1:{K1}", "--dry-run", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["dry_run"] and report["tables"]["chat_history_original"]["rekeyed"] == 14
    assert not any(v.startswith(ENVELOPE_PREFIX) for v in values(url))

    code, out, err = run(url, f"k1:{K1}", "--batch-size", "3")
    assert code == 0, err
    assert "chat_history_original: sealed 14" in out
    assert all(v.startswith(f"{ENVELOPE_PREFIX}k1:") for v in values(url))
    assert not any("plain secret" in v for v in values(url))

    code, out, _ = run(url, f"k1:{K1}")  # a rerun finds nothing left
    assert "chat_history_original: sealed 0" in out

    code, out, _ = run(url, f"k2:{K2},k1:{K1}", "a")  # one app rotated
    assert "chat_history_original: sealed 7" in out
    store = MemoryStore(Settings(database_url=url, encryption_keys=f"k2:{K2},k1:{K1}"))
    try:
        assert [m.text for m in store.load_window("a")] == [f"plain secret {i}" for i in range(7)]
    finally:
        store.close()


def test_rekey_needs_keys_and_names_a_missing_key(url: str) -> None:
    code, _, err = run(url, None)
    assert code != 0 and "MEMSTORE_ENCRYPTION_KEYS" in err
    assert run(url, f"k1:{K1}")[0] == 0
    code, _, err = run(url, f"k2:{K2}")
    assert code != 0
    assert K2 not in err


def test_rekey_names_an_unknown_app_id(url: str) -> None:
    code, _, err = run(url, f"k1:{K1}", "a", "typo-app")
    assert code == 1 and "no rows for app id(s) 'typo-app'" in err
    assert not any(v.startswith(ENVELOPE_PREFIX) for v in values(url))  # nothing sealed
    code, _, err = run(url, f"k1:{K1}", "a", "typo-app", "--missing-ok")
    assert code == 0, err
