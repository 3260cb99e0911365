"""Metadata is plain JSON data, checked at construction, bounded at append, typed on error."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import (
    AiMessage,
    InvalidMessageError,
    MemoryStore,
    MessageTooLargeError,
    Settings,
    ToolResult,
    UserMessage,
)
from memstore.core.metadata import MAX_METADATA_DEPTH, freeze_metadata, metadata_size
from memstore.sql.schema import display, original

# Every Unicode code point, lone surrogates included.
ANY_TEXT = st.one_of(
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=8),
    st.sampled_from(["\ud800", "ok\udfff", "\ud83d", "\x00", "é🌍"]),  # lone surrogates, NUL
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**1000, max_value=2**1100),
    st.floats(allow_nan=True, allow_infinity=True),
    ANY_TEXT,
    st.binary(max_size=4),
    st.sets(st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.complex_numbers(max_magnitude=10),
    st.decimals(allow_nan=True, places=2),
    st.dates(),
    st.builds(object),
    st.just(Ellipsis),
)
KEYS = st.one_of(ANY_TEXT, st.integers(), st.none(), st.booleans(), st.floats(), st.binary())

ANYTHING = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(KEYS, inner, max_size=3),
    ),
    max_leaves=12,
)


def nested(depth: int) -> dict[str, Any]:
    """Metadata whose lists and objects nest exactly ``depth`` levels (the top object is 1)."""
    value: Any = {"leaf": 1}
    for wrapper in range(depth - 1):
        value = {"n": value} if (depth - 2 - wrapper) % 2 == 0 else [value]
    assert isinstance(value, dict)
    return value


def rows(store: MemoryStore, app_id: str) -> tuple[int, int]:
    with store.engine.connect() as conn:
        o = conn.execute(sa.select(sa.func.count()).where(original.c.app_id == app_id)).scalar()
        d = conn.execute(sa.select(sa.func.count()).where(display.c.app_id == app_id)).scalar()
    return int(o or 0), int(d or 0)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    value=st.one_of(ANYTHING, st.dictionaries(KEYS, ANYTHING, max_size=4)), as_dict=st.booleans()
)
def test_any_metadata_is_accepted_or_refused_with_a_typed_error(
    sqlite_store: MemoryStore, value: Any, as_dict: bool
) -> None:
    app = f"meta-{uuid.uuid4().hex[:12]}"
    sqlite_store.append(app, [UserMessage(text="before")])
    sqlite_store.memory(app).messages()
    before = (rows(sqlite_store, app), sqlite_store.memory(app).messages())
    message: Any = {"type": "user", "text": "hi", "metadata": value}
    try:
        if not as_dict:
            message = UserMessage(text="hi", metadata=value)
        sqlite_store.append(app, [UserMessage(text="fine"), message])
    except InvalidMessageError as error:
        assert "Traceback" not in str(error)
        assert (rows(sqlite_store, app), sqlite_store.memory(app).messages()) == before
        return
    stored = sqlite_store.load_window(app)[-1]
    assert sqlite_store.memory(app).messages()[-1] == stored
    assert stored.metadata == freeze_metadata(value)  # a JSON round trip changes nothing


@pytest.mark.parametrize(
    "bad",
    [
        {"x": "\ud800"},
        {"\udfff": 1},
        {"x": b"bytes"},
        {"x": {1, 2}},
        {"x": object()},
        {"x": math.nan},
        {"x": -math.inf},
        {"x": Decimal("1.5")},
        {1: "int key"},
        {"x": 2**2000},
        nested(MAX_METADATA_DEPTH + 1),
        ["not", "a", "dict"],
        "text",
    ],
)
def test_bad_metadata_is_an_invalid_message_error(bad: Any) -> None:
    for build in (
        lambda: UserMessage(text="x", metadata=bad),
        lambda: AiMessage(text="x", metadata=bad),
        lambda: ToolResult(id="c", tool_name="t", text="x", metadata=bad),
    ):
        with pytest.raises(InvalidMessageError) as caught:
            build()
        assert "ud800" not in str(caught.value) and "bytes'" not in str(caught.value)


def test_the_deepest_accepted_nesting() -> None:
    assert UserMessage(text="x", metadata=nested(MAX_METADATA_DEPTH)).metadata


def test_errors_name_positions_not_keys_or_values() -> None:
    with pytest.raises(InvalidMessageError) as caught:
        UserMessage(text="x", metadata={"secret-key": {"ok": 1, "k2": [1, b"secret"]}})
    assert "secret" not in str(caught.value)
    assert "metadata[key 0][key 1][1]" in str(caught.value)


def test_oversized_metadata_is_refused_and_leaves_the_store_unchanged(
    sqlite_store: MemoryStore,
) -> None:
    """The regression: 5 MB of metadata was stored and served in every window."""
    app = "meta-big"
    sqlite_store.append(app, [UserMessage(text="ok")])
    huge = UserMessage(text="x", metadata={"blob": "a" * (5 * 1024 * 1024)})
    with pytest.raises(MessageTooLargeError):
        sqlite_store.append(app, [UserMessage(text="fine"), huge])
    assert rows(sqlite_store, app) == (1, 1)
    assert sqlite_store.memory(app).messages() == [UserMessage(text="ok")]


def test_the_metadata_limit_is_a_setting(tmp_path: Any) -> None:
    limit = 100
    settings = Settings.from_env(
        {"MEMSTORE_MAX_METADATA_BYTES": str(limit)}, database_url=f"sqlite:///{tmp_path}/m.db"
    )
    assert settings.max_metadata_bytes == limit
    with MemoryStore(settings) as store:
        store.migrate()
        fits = {"k": "é" * ((limit - len('{"k":""}')) // 2)}
        assert metadata_size(fits) <= limit
        store.append("a", [UserMessage(text="x", metadata=fits)])
        with pytest.raises(MessageTooLargeError) as caught:
            store.append("a", [UserMessage(text="x", metadata={"k": "é" * limit})])
        assert "é" not in str(caught.value)
        assert caught.value.limit == limit
        assert caught.value.size == metadata_size({"k": "é" * limit})
    assert Settings().max_metadata_bytes == 64 * 1024
