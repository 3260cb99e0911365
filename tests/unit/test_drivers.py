"""Which driver a database URL gets, and the typed error when that driver is not installed."""

from __future__ import annotations

import sys

import pytest

from memstore.errors import ConfigurationError, MissingExtraError
from memstore.sql.aio import async_url, make_async_engine
from memstore.sql.engine import make_engine, sync_url


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///x.db", "sqlite+pysqlite"),
        ("postgresql://u@h/d", "postgresql+psycopg"),
        ("mysql://u@h/d", "mysql+pymysql"),
        ("mariadb://u@h/d", "mariadb+pymysql"),
        ("postgresql+psycopg2://u@h/d", "postgresql+psycopg2"),  # an explicit driver is kept
        ("mysql+mysqldb://u@h/d", "mysql+mysqldb"),
        ("sqlite+aiosqlite:///x.db", "sqlite+pysqlite"),  # an async store's URL: its sync twin
        ("postgresql+asyncpg://u@h/d", "postgresql+psycopg"),
        ("mysql+asyncmy://u@h/d", "mysql+pymysql"),
        ("mariadb+aiomysql://u@h/d", "mariadb+pymysql"),
    ],
)
def test_sync_url(url: str, driver: str) -> None:
    assert sync_url(url).drivername == driver


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite"),
        ("postgresql://u@h/d", "postgresql+psycopg"),
        ("postgresql+psycopg://u@h/d", "postgresql+psycopg"),
        ("postgresql+asyncpg://u@h/d", "postgresql+asyncpg"),
        ("mysql+pymysql://u@h/d", "mysql+asyncmy"),
        ("mariadb://u@h/d", "mariadb+asyncmy"),  # the async extra installs asyncmy
        ("mysql+aiomysql://u@h/d", "mysql+aiomysql"),
    ],
)
def test_async_url(url: str, driver: str) -> None:
    assert async_url(url).drivername == driver


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [
        ("psycopg", "postgresql://u:s3cret@h/d", "postgres"),
        ("pymysql", "mariadb://u:s3cret@h/d", "mysql"),
    ],
)
def test_a_missing_driver_names_its_extra(
    module: str, url: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import module` fails
    with pytest.raises(MissingExtraError) as raised:
        make_engine(url)
    assert raised.value.extra == extra
    assert raised.value.install == f"pip install 'memstore[{extra}]'"
    assert raised.value.install in str(raised.value)
    assert "s3cret" not in str(raised.value) and "@h" not in str(raised.value)


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [
        ("aiosqlite", "sqlite:///never.db", "async"),
        ("asyncmy", "mysql://u:s3cret@h/d", "async"),
        ("asyncpg", "postgresql+asyncpg://u:s3cret@h/d", "asyncpg"),
        ("psycopg", "postgresql://u:s3cret@h/d", "postgres"),
    ],
)
def test_a_missing_async_driver_names_its_extra(
    module: str, url: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError) as raised:
        make_async_engine(url)
    assert raised.value.extra == extra
    assert "s3cret" not in str(raised.value)


def test_a_driver_no_extra_installs_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # no extra installs psycopg2
    with pytest.raises(ConfigurationError) as raised:
        make_engine("postgresql+psycopg2://u:s3cret@h/d")
    assert not isinstance(raised.value, MissingExtraError)
    assert "'psycopg2' driver" in str(raised.value)
    assert "postgresql+psycopg:// (memstore[postgres])" in str(raised.value)
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("?ssl=true&prepared_statement_cache_size=0", {"sslmode": "require"}),
        (
            "?ssl=verify-full&application_name=svc",
            {"sslmode": "verify-full", "application_name": "svc"},
        ),
        ("?command_timeout=5&sslmode=disable&ssl=require", {"sslmode": "disable"}),
        ("", {}),
    ],
)
def test_the_sync_twin_of_an_asyncpg_url_takes_psycopg_options(
    options: str, expected: dict[str, str]
) -> None:
    url = sync_url(f"postgresql+asyncpg://u:p@h/db{options}")
    assert url.drivername == "postgresql+psycopg" and dict(url.query) == expected


def test_an_asyncpg_ssl_value_psycopg_cannot_take_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="sslmode"):
        sync_url("postgresql+asyncpg://u@h/db?ssl=sometimes")
