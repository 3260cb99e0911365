"""The inventory of where a user's data lives (``memstore.sql.user_data``) names every table
exactly once, so purge, export and erase by user cannot forget a new one."""

from __future__ import annotations

from memstore.sql.schema import metadata
from memstore.sql.user_data import NO_USER_DATA, USER_DATA


def test_every_table_is_in_the_inventory_exactly_once() -> None:
    with_users = [entry.table.name for entry in USER_DATA]
    assert len(with_users) == len(set(with_users))
    assert not set(with_users) & set(NO_USER_DATA)
    assert set(with_users) | set(NO_USER_DATA) == set(metadata.tables)


def test_every_table_with_user_data_has_a_user_column() -> None:
    for entry in USER_DATA:
        assert "user_id" in entry.table.c, entry.table.name
    for name, reason in NO_USER_DATA.items():
        assert reason, name


def test_every_cache_key_family_is_in_the_inventory() -> None:
    from memstore.cache.keys import app_keys
    from memstore.sql.user_data import CACHE_KEYS

    assert {key.rsplit(":", 1)[1] for key in app_keys("app")} == set(CACHE_KEYS)
