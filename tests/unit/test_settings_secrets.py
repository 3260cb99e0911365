"""Settings never show a password: not in their repr, not in a configuration error, not in the
error's cause or context (a traceback prints those)."""

from __future__ import annotations

import traceback

import pytest

from memstore import Settings
from memstore.config import redact_url
from memstore.errors import ConfigurationError

PASSWORD = "hunter2-PW"


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        (
            "postgresql+psycopg://app:hunter2-PW@db:5432/chat",
            "postgresql+psycopg://app:***@db:5432/chat",
        ),
        ("redis://:hunter2-PW@cache:6379/0", "redis://:***@cache:6379/0"),
        ("rediss://user:hunter2-PW@cache/0", "rediss://user:***@cache/0"),
        ("mysql+pymysql://root@db/test", "mysql+pymysql://root@db/test"),
        ("sqlite:///memstore.db", "sqlite:///memstore.db"),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


def test_repr_and_str_hide_passwords() -> None:
    settings = Settings(
        database_url=f"postgresql://app:{PASSWORD}@db/chat",
        redis_url=f"redis://:{PASSWORD}@cache:6379/0",
    )
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in str(settings)
    assert settings.database_url.endswith(f"{PASSWORD}@db/chat")  # the value itself is intact


@pytest.mark.parametrize(
    "values",
    [
        {"database_url": f"postgresql://app:{PASSWORD}@db:notaport/chat"},
        {"database_url": f"oracle://app:{PASSWORD}@db/chat"},
        {"database_url": f"postgresql://app:{PASSWORD}@db/chat", "window_size": 0},
        {"redis_url": f"http://:{PASSWORD}@cache:6379/0"},
    ],
)
def test_configuration_errors_hide_passwords(values: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings(**values)
    error = caught.value
    printed = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    assert PASSWORD not in printed
    assert error.__cause__ is None and error.__context__ is None


def test_from_env_errors_hide_passwords() -> None:
    env = {"MEMSTORE_DATABASE_URL": f"mysql://root:{PASSWORD}@db/x", "MEMSTORE_WINDOW_SIZE": "-3"}
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env(env)
    assert PASSWORD not in str(caught.value)
