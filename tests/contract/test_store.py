"""The store contract: every test runs on each database x cache pair (see conftest.BACKENDS)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memstore import (
    AiMessage,
    InvalidAppIdError,
    InvalidMessageError,
    MemoryStore,
    MemstoreError,
    MessageTooLargeError,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UnknownToolCallError,
    UserMessage,
)
from memstore.core.validate import validate
from memstore.core.window import entry_for, is_synthetic
from memstore.sql.schema import display, original
from tests.conftest import StoreFactory

ARGS_1 = '{"path": "a.txt",  "content": "héllo 🌍\\n"}'
ARGS_2 = '{ "path":"b.txt" , "mode" : 420 }'


def parallel_turn(prefix: str = "") -> list:
    return [
        UserMessage(text=f"{prefix}Create two files, ünïcødé 你好"),
        AiMessage(
            text="Creating both.",
            tool_requests=[
                ToolRequest(id=f"{prefix}call_1", name="write_file", arguments=ARGS_1),
                ToolRequest(id=f"{prefix}call_2", name="write_file", arguments=ARGS_2),
            ],
        ),
        ToolResult(id=f"{prefix}call_2", tool_name="write_file", text="ok b"),
        ToolResult(id=f"{prefix}call_1", tool_name="write_file", text="ok a"),
        AiMessage(text="I created a.txt and b.txt."),
    ]


def count_rows(store: MemoryStore, app_id: str) -> tuple[int, int]:
    with store.engine.connect() as conn:
        o = conn.execute(sa.select(sa.func.count()).where(original.c.app_id == app_id)).scalar()
        d = conn.execute(sa.select(sa.func.count()).where(display.c.app_id == app_id)).scalar()
    return int(o or 0), int(d or 0)


def test_round_trip_parallel_calls_byte_for_byte(store: MemoryStore, app_id: str) -> None:
    turn = parallel_turn()
    ids = store.append(app_id, turn)
    assert len(ids) == 5 and ids == sorted(ids) and all(0 < i < 2**63 for i in ids)
    assert store.load_window(app_id) == turn
    loaded = store.load_window(app_id)[1]
    assert isinstance(loaded, AiMessage)
    assert [r.arguments for r in loaded.tool_requests] == [ARGS_1, ARGS_2]
    assert store.memory(app_id).messages() == turn


def test_int_app_id_is_its_decimal_string(store: MemoryStore) -> None:
    number = int(__import__("uuid").uuid4().int % 10**12) + 1
    store.append(number, [UserMessage(text="x")])
    assert store.load_window(str(number)) == [UserMessage(text="x")]


def test_window_never_starts_with_a_tool_result(store: MemoryStore, app_id: str) -> None:
    turn = parallel_turn()
    store.append(app_id, turn)
    for n in range(1, 6):
        window = store.load_window(app_id, max_messages=n)
        assert not isinstance(window[0], ToolResult)
        assert validate(window, "openai") == []
    # N=2: the newest two are the final AI and a result -> widened to the whole group
    assert store.load_window(app_id, max_messages=2) == turn[1:]


def test_interrupted_call_gets_a_synthetic_error_result(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, parallel_turn()[:3])  # call_1 never answered: the process died
    window = store.load_window(app_id)
    assert len(window) == 4
    synthetic = window[-1]
    assert isinstance(synthetic, ToolResult) and synthetic.id == "call_1"
    assert synthetic.is_error and is_synthetic(synthetic)
    assert validate(window, "openai") == [] and validate(window, "anthropic") == []
    report = store.reload(app_id)
    assert report.interrupted_answered == 1


def test_late_result_replaces_the_synthetic_answer_in_the_cache(
    store: MemoryStore, app_id: str
) -> None:
    turn = parallel_turn()
    store.append(app_id, turn[:3])
    memory = store.memory(app_id)
    assert is_synthetic(memory.messages()[-1])  # rebuilt with the interrupted answer
    memory.add(turn[3])
    window = memory.messages()
    assert window == turn[:4]
    assert not any(is_synthetic(m) for m in window)


def test_result_for_unknown_request_is_rejected(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="hi")])
    with pytest.raises(UnknownToolCallError):
        store.append(app_id, [ToolResult(id="nope", tool_name="t", text="x")])
    with pytest.raises(UnknownToolCallError):  # a whole batch is refused, nothing half-written
        store.append(
            app_id, [UserMessage(text="again"), ToolResult(id="nope", tool_name="t", text="x")]
        )
    assert count_rows(store, app_id) == (1, 1)


def test_result_for_an_earlier_request_is_accepted(store: MemoryStore, app_id: str) -> None:
    turn = parallel_turn()
    store.append(app_id, turn[:2])
    store.append(app_id, [turn[2]])
    store.memory(app_id).add(turn[3])
    assert store.load_window(app_id) == turn[:4]


@pytest.mark.parametrize(
    ("bad_app", "error"),
    [
        ("", InvalidAppIdError),
        ("x" * 129, InvalidAppIdError),
        ("a\nb", InvalidAppIdError),
        ("a\x00", InvalidAppIdError),
        (None, InvalidAppIdError),
        (True, InvalidAppIdError),
    ],
)
def test_bad_app_ids(store: MemoryStore, bad_app: object, error: type[MemstoreError]) -> None:
    with pytest.raises(error):
        store.append(bad_app, [UserMessage(text="x")])  # type: ignore[arg-type]


def test_bad_messages_leave_the_store_unchanged(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(max_text_bytes=100)
    store.append(app_id, [UserMessage(text="ok")])
    bad_batches = [
        [UserMessage(text="fine"), UserMessage(text="x" * 101)],
        [UserMessage(text="fine"), {"type": "bogus", "text": "x"}],
        [
            UserMessage(text="fine"),
            {"type": "ai", "tool_requests": [{"id": "c", "name": "t", "arguments": {"a": 1}}]},
        ],
        [UserMessage(text="fine"), UserMessage(text="nul\x00")],
        [UserMessage(text="fine"), UserMessage(text="\ud800")],
        [UserMessage(text="fine"), 42],
    ]
    for batch in bad_batches:
        with pytest.raises(InvalidMessageError):
            store.append(app_id, batch)  # type: ignore[arg-type]
    with pytest.raises(MessageTooLargeError):
        store.append(app_id, [UserMessage(text="é" * 51)])
    assert count_rows(store, app_id) == (1, 1)
    assert store.memory(app_id).messages() == [UserMessage(text="ok")]


def test_memory_rebuilds_on_miss_and_equals_load_window(store: MemoryStore, app_id: str) -> None:
    for i in range(5):
        store.append(app_id, parallel_turn(f"t{i}-"))
    memory = store.memory(app_id)
    first = memory.messages()
    assert first == store.load_window(app_id, store.settings.reload_max)
    memory.invalidate()
    assert memory.messages() == first


def test_window_trims_group_safe(make_store: StoreFactory, app_id: str) -> None:
    store = make_store(window_size=4, reload_max=4)
    memory = store.memory(app_id)
    memory.add(UserMessage(text="start"))
    assert memory.messages() == [UserMessage(text="start")]  # cached from here on
    for message in parallel_turn():
        memory.add(message)
        window = memory.messages()
        assert not isinstance(window[0], ToolResult)
        assert validate(window, "openai") == []
        if not any(is_synthetic(m) for m in window):  # tools done: trimming == rebuilding
            assert window == store.load_window(app_id, 4)


def test_append_to_missing_window_does_not_create_a_partial_one(
    store: MemoryStore, app_id: str
) -> None:
    store.append(app_id, [UserMessage(text="one"), AiMessage(text="two")])
    memory = store.memory(app_id)
    memory.invalidate()
    memory.add(UserMessage(text="three"))
    assert memory.messages() == [
        UserMessage(text="one"),
        AiMessage(text="two"),
        UserMessage(text="three"),
    ]


def test_rebuild_racing_a_write_does_not_cache_a_stale_window(
    store: MemoryStore, app_id: str
) -> None:
    store.append(app_id, [UserMessage(text="one")])
    memory = store.memory(app_id)
    memory.invalidate()
    version = store.cache.read(app_id).version  # a reader misses and takes the version...
    stale = store.load_window(app_id, 50)  # ...reads SQL...
    store.append(app_id, [AiMessage(text="two")])  # ...a writer commits meanwhile...
    stored = store.cache.store(app_id, [entry_for(m) for m in stale], [], version)
    assert not stored  # ...so the stale window is refused
    assert store.memory(app_id).messages() == [UserMessage(text="one"), AiMessage(text="two")]


def test_history_pages_newest_first_with_tool_summaries(store: MemoryStore, app_id: str) -> None:
    store.register_formatter("write_file", lambda req, res: f"wrote file ({'ok' if res else '?'})")
    store.append(app_id, parallel_turn(), user_id="u-1")
    store.append(app_id, [UserMessage(text="thanks"), AiMessage(text="you're welcome")])
    page = store.history(app_id, limit=3)
    assert [e.role for e in page] == ["ai", "user", "ai"]
    assert page[0].text == "you're welcome" and page[1].text == "thanks"
    assert page[2].text.splitlines() == [
        "Creating both.",
        "wrote file (ok)",
        "wrote file (ok)",
        "I created a.txt and b.txt.",
    ]
    assert page[2].user_id == "u-1"
    rest = store.history(app_id, limit=3, before_id=page[-1].id)
    assert [e.role for e in rest] == ["user"] and rest[0].text.startswith("Create two files")


def test_soft_deleted_rows_are_invisible(store: MemoryStore, app_id: str) -> None:
    ids = store.append(app_id, [UserMessage(text="keep"), UserMessage(text="hide")])
    with store.engine.begin() as conn:
        conn.execute(original.update().where(original.c.id == ids[1]).values(is_deleted=True))
        conn.execute(
            display.update()
            .where(display.c.app_id == app_id, display.c.content == "hide")
            .values(is_deleted=True)
        )
    assert store.load_window(app_id) == [UserMessage(text="keep")]
    assert [e.text for e in store.history(app_id)] == ["keep"]


def test_start_at_user_option(store: MemoryStore, app_id: str) -> None:
    turn = parallel_turn()
    store.append(app_id, [SystemMessage(text="be brief"), *turn])
    window = store.load_window(app_id, 3, start_at_user=True)
    assert window == [] or isinstance(window[0], UserMessage)
    assert store.load_window(app_id, 5, start_at_user=True) == turn
    assert store.load_window(app_id, 6)[0] == SystemMessage(text="be brief")


def test_purge_is_exact(store: MemoryStore, app_id: str) -> None:
    neighbours = [app_id.upper(), app_id + " ", " " + app_id, app_id[:-1], app_id + "x"]
    for app in [app_id, *neighbours]:
        store.append(app, parallel_turn())
        store.memory(app).messages()
    for pattern in ["*", "%", app_id[:-1] + "%", app_id[:-1] + "_", app_id[:3] + "*"]:
        assert store.purge(pattern).original_rows == 0
    report = store.purge(app_id)
    assert (report.original_rows, report.display_rows) == (5, 2)
    assert count_rows(store, app_id) == (0, 0)
    assert store.memory(app_id).messages() == []
    for app in neighbours:
        assert store.load_window(app) == parallel_turn(), app
        assert count_rows(store, app) == (5, 2)
    again = store.purge(app_id)
    assert (again.original_rows, again.display_rows, again.cache_keys) == (0, 0, 0)


def test_ids_compare_byte_for_byte(store: MemoryStore, app_id: str) -> None:
    store.append(app_id, [UserMessage(text="lower")])
    store.append(app_id.upper(), [UserMessage(text="upper")])
    store.append(app_id + " ", [UserMessage(text="space")])
    assert store.load_window(app_id) == [UserMessage(text="lower")]
    assert store.load_window(app_id.upper()) == [UserMessage(text="upper")]
    assert store.load_window(app_id + " ") == [UserMessage(text="space")]


def test_reused_call_id_never_doubles_up_in_the_cached_window(
    store: MemoryStore, app_id: str
) -> None:
    memory = store.memory(app_id)
    memory.add(UserMessage(text="first"))
    memory.messages()  # cached from here on
    for turn in range(2):  # some models number their calls call_0, call_1... in every turn
        memory.add_all(
            [
                AiMessage(tool_requests=[ToolRequest(id="call_0", name="t", arguments="{}")]),
                ToolResult(id="call_0", tool_name="t", text=f"turn {turn}"),
                AiMessage(text=f"done {turn}"),
            ]
        )
        window = memory.messages()
        assert validate(window, "openai") == []
        assert window == store.load_window(app_id, store.settings.reload_max)


class _CollidingIds:
    """Hands out ids that are already taken once, then real ones: what a second process with
    the same MEMSTORE_WORKER_ID does in the same millisecond."""

    def __init__(self, taken: list[int], real: object) -> None:
        self._taken = list(taken)
        self._real = real

    def next_ids(self, count: int, above: int | None = None) -> list[int]:
        if self._taken:
            ids, self._taken = self._taken[:count], []
            return ids + self._real.next_ids(count - len(ids))  # type: ignore[attr-defined]
        return self._real.next_ids(count, above)  # type: ignore[attr-defined]


def test_id_collision_is_retried_with_fresh_ids(
    store: MemoryStore, app_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    store.append(app_id, [UserMessage(text="first"), AiMessage(text="second")])
    # ids the other process holds, above the app's newest (ids at or below it are issued
    # again before any insert: the write reads the app's newest id under its lock)
    taken = store.append(f"{app_id}-b", [UserMessage(text="elsewhere")])
    inner = getattr(store, "_store", store)  # the async store behind the test facade
    inner._ids = _CollidingIds(taken, inner._ids)
    with caplog.at_level("WARNING", logger="memstore"):
        ids = store.append(app_id, [UserMessage(text="third")])
    assert ids[0] not in taken
    assert "collision" in caplog.text
    assert [m.text for m in store.load_window(app_id)] == ["first", "second", "third"]


def test_purging_an_int_id_touches_no_lookalike(store: MemoryStore, app_id: str) -> None:
    number = int(app_id[-8:], 16) + 10**9  # unique per test, so shared databases stay clean
    lookalikes = [f"0{number}", f"{number} ", f"a{number}", f"{number}0", str(-number)]
    for app in [str(number), *lookalikes]:
        store.append(app, [UserMessage(text=app)])
    report = store.purge(number)  # an int is its decimal string
    assert (report.app_id, report.original_rows, report.display_rows) == (str(number), 1, 1)
    for app in lookalikes:
        assert store.load_window(app) == [UserMessage(text=app)], repr(app)
        store.purge(app)
    assert store.purge("never-written-" + app_id).model_dump() == {
        "app_id": "never-written-" + app_id,
        "original_rows": 0,
        "display_rows": 0,
        "tool_executions": 0,
        "cache_keys": 0,
    }
