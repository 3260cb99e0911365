"""Every integer input of the public API is range-checked before any I/O (issue 9, item 8).

Before the fix, ``load_window(max_messages=2**63)`` or ``history(before_id=2**63)`` raised
``OverflowError`` on SQLite, a ``StorageError`` on PostgreSQL, and MariaDB took them. Now an
out-of-range int, a bool or a non-int is an ``InvalidInputError`` (``ConfigurationError`` for
settings and constructor options) on every backend, raised before the database is touched:
the "before any I/O" half is shown on a store whose database cannot even be opened.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore import MemoryStore, Settings, UserMessage
from memstore.cli import cli
from memstore.core.inputs import MAX_ROW_ID, MAX_WINDOW_MESSAGES
from memstore.errors import ConfigurationError, InvalidInputError
from memstore.guard import Budgets, LoopGuard

OUT_OF_RANGE = [2**63, 2**64, 10**30, 10**5000, -1, -(2**63) - 1, True, False, 1.0, "5", 0]
"""Bad for every entry point below."""
NONE_MEANS_DEFAULT = {
    "load_window(max_messages)",
    "load_window(max_tokens)",
    "messages(max_tokens)",
    "reload(max_messages)",
    "history(before_id)",
    "LoopGuard(history_rows)",
}


def value_id(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"{value.bit_length()}-bit"
    return repr(value)


# name -> call(store, app, value); every one takes a positive bounded integer
STORE_ENTRY_POINTS: dict[str, Callable[[Any, str, Any], object]] = {
    "load_window(max_messages)": lambda s, app, v: s.load_window(app, v),
    "load_window(max_tokens)": lambda s, app, v: s.load_window(app, max_tokens=v),
    "messages(max_tokens)": lambda s, app, v: s.memory(app).messages(max_tokens=v),
    "reload(max_messages)": lambda s, app, v: s.reload(app, v),
    "history(limit)": lambda s, app, v: s.history(app, limit=v),
    "history(before_id)": lambda s, app, v: s.history(app, before_id=v),
}
GUARD_ENTRY_POINTS: dict[str, Callable[[Any, str, Any], object]] = {
    "LoopGuard(max_identical_repeats)": lambda s, app, v: LoopGuard(s, max_identical_repeats=v),
    "LoopGuard(history_rows)": lambda s, app, v: LoopGuard(s, history_rows=v),
    "LoopGuard.executions(limit)": lambda s, app, v: LoopGuard(s).executions(app, limit=v),
}
SETTINGS_INTS = [
    "window_size",
    "window_max_tokens",
    "reload_max",
    "cache_ttl_seconds",
    "worker_id",
    "max_text_bytes",
    "clock_backwards_max_wait_ms",
]


def rejects(call: Callable[[], object], error: type[Exception] = InvalidInputError) -> None:
    with pytest.raises(error):
        call()


@pytest.mark.parametrize("name", list(STORE_ENTRY_POINTS))
@pytest.mark.parametrize("value", [*OUT_OF_RANGE, None], ids=value_id)
def test_store_integer_inputs_are_checked_on_every_backend(
    store: Any, app_id: str, name: str, value: object
) -> None:
    if value is None and name in NONE_MEANS_DEFAULT:
        return
    store.append(app_id, [UserMessage(text="hello")])
    rejects(lambda: STORE_ENTRY_POINTS[name](store, app_id, value))
    assert [m.text for m in store.load_window(app_id)] == ["hello"]  # unchanged, still usable


def test_the_largest_accepted_values_work_on_every_backend(store: Any, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hello")])
    assert len(store.load_window(app_id, MAX_WINDOW_MESSAGES)) == 1
    assert store.reload(app_id, MAX_WINDOW_MESSAGES).messages == 1
    assert [entry.text for entry in store.history(app_id, before_id=MAX_ROW_ID)] == ["hello"]
    assert store.history(app_id, before_id=1) == []


@pytest.fixture
def unopenable(tmp_path: Path) -> Iterator[MemoryStore]:
    """A store any I/O of which fails: its SQLite file lies in a directory that is missing."""
    url = f"sqlite:///{tmp_path / 'no-such-dir' / 'm.db'}"
    with MemoryStore(Settings(database_url=url)) as store:
        yield store


bad_ints = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=MAX_ROW_ID + 1),
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: n * 2**64),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=bad_ints, name=st.sampled_from(sorted(STORE_ENTRY_POINTS)))
def test_bad_integers_are_rejected_before_any_io(
    unopenable: MemoryStore, value: object, name: str
) -> None:
    # the database cannot be opened, so reaching it would be a StorageError
    rejects(lambda: STORE_ENTRY_POINTS[name](unopenable, "app-1", value))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_WINDOW_MESSAGES + 1)),
    name=st.sampled_from(["load_window(max_messages)", "reload(max_messages)"]),
)
def test_window_sizes_are_bounded_before_any_io(
    unopenable: MemoryStore, value: int, name: str
) -> None:
    rejects(lambda: STORE_ENTRY_POINTS[name](unopenable, "app-1", value))


@pytest.mark.parametrize("name", list(GUARD_ENTRY_POINTS))
@pytest.mark.parametrize("value", [*OUT_OF_RANGE, None], ids=value_id)
def test_loop_guard_integer_inputs_are_checked_before_any_io(
    unopenable: MemoryStore, name: str, value: object
) -> None:
    if value is None and name in NONE_MEANS_DEFAULT:
        return
    error = InvalidInputError if name.endswith("executions(limit)") else ConfigurationError
    rejects(lambda: GUARD_ENTRY_POINTS[name](unopenable, "app-1", value), error)


@pytest.mark.parametrize("field", SETTINGS_INTS)
@pytest.mark.parametrize("value", [2**63, 10**5000, -1, True, False], ids=value_id)
def test_settings_integers_are_range_checked(field: str, value: object) -> None:
    # False is refused even where 0 is valid (worker_id): a bool is not an int
    rejects(lambda: Settings(**{field: value}), ConfigurationError)


def test_settings_integers_from_the_environment_are_range_checked() -> None:
    for field in SETTINGS_INTS:
        env = {f"MEMSTORE_{field.upper()}": str(2**63)}
        rejects(lambda env=env: Settings.from_env(env), ConfigurationError)
        rejects(
            lambda field=field: Settings.from_env({f"MEMSTORE_{field.upper()}": "9" * 5000}),
            ConfigurationError,
        )


@pytest.mark.parametrize("field", ["tool_rounds", "tool_calls", "side_effect_calls"])
@pytest.mark.parametrize("value", [True, False, -1, 1.5, "x"], ids=value_id)
def test_budget_integers_are_checked(field: str, value: object) -> None:
    rejects(lambda: Budgets(**{field: value}), ConfigurationError)


@pytest.mark.parametrize("value", [10**128, -(10**128), 10**5000], ids=value_id)
def test_huge_integer_app_ids_are_invalid_ids(unopenable: MemoryStore, value: int) -> None:
    rejects(lambda: unopenable.append(value, [UserMessage(text="x")]))
    rejects(lambda: unopenable.load_window(value))


@pytest.mark.parametrize(
    "args",
    [
        ["show", "app-1", "--limit", str(2**63)],
        ["show", "app-1", "--original", "--limit", str(2**63)],
        ["show", "app-1", "--limit", "0"],
        ["show", "app-1", "--limit", str(MAX_WINDOW_MESSAGES + 1)],
        ["reload", "app-1", "--max", str(2**63)],
        ["reload", "app-1", "--max", "-5"],
    ],
    ids=" ".join,
)
def test_cli_integer_options_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'no-such-dir' / 'm.db'}"
    result = CliRunner().invoke(cli, [*args, "--database-url", url])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_adapter_limits_are_checked(store: Any) -> None:
    if not isinstance(store, MemoryStore):
        pytest.skip("the adapters take the sync store here; their async paths share the checks")
    pytest.importorskip("langchain_core")
    from memstore.adapters.langchain import MemstoreChatMessageHistory

    for value in (2**63, 0, True, MAX_WINDOW_MESSAGES + 1):
        rejects(
            lambda value=value: MemstoreChatMessageHistory(
                store, "s-1", window=True, max_messages=value
            )
        )


def test_openai_session_limits_are_checked(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    import asyncio

    from memstore.adapters.openai_agents import MemstoreSession

    with MemoryStore(Settings(database_url=f"sqlite:///{tmp_path / 'o.db'}")) as store:
        store.migrate()
        session = MemstoreSession(f"s-{uuid.uuid4().hex[:6]}", store)
        for value in (2**63, MAX_WINDOW_MESSAGES + 1, True, 1.5):
            rejects(lambda value=value: asyncio.run(session.get_items(limit=value)))
        assert asyncio.run(session.get_items(limit=-3)) == []
        assert asyncio.run(session.get_items(limit=MAX_WINDOW_MESSAGES)) == []
