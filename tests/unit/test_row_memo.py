"""The decoded-row memo: what it hands back, what it refuses, and its budget."""

from __future__ import annotations

import threading

import pytest

from memstore.core.crypto import RowCipher
from memstore.core.row_memo import LARGEST_SHARE, RowMemo, estimated_bytes
from memstore.core.rows import FetchedRows, encode_payload
from memstore.core.window import StoredMessage
from memstore.errors import StorageError
from memstore.messages import AiMessage, ToolRequest, ToolResult, UserMessage

PLAIN = RowCipher(())


def row(row_id: int, text: str = "hi") -> tuple[StoredMessage, str]:
    message = UserMessage(text=text)
    return StoredMessage(row_id, message), encode_payload(message)


def test_hands_back_only_the_same_row_app_and_payload() -> None:
    memo = RowMemo(1 << 20)
    stored, payload = row(7)
    memo.put("a", payload, stored)
    assert memo.get("a", 7, payload) is stored
    assert memo.get("a", 7, payload + " ") is None  # payload changed
    assert memo.get("b", 7, payload) is None  # another app's row with that id
    assert memo.get("a", 8, payload) is None


def test_budget_forgets_oldest_first_and_skips_huge_rows() -> None:
    one = estimated_bytes(row(1)[1])
    memo = RowMemo(one * LARGEST_SHARE)  # room for LARGEST_SHARE rows like these
    for row_id in range(LARGEST_SHARE + 10):
        stored, payload = row(row_id)
        memo.put("a", payload, stored)
    assert len(memo) == LARGEST_SHARE
    assert memo.used_bytes <= memo.max_bytes
    assert memo.get("a", 0, row(0)[1]) is None
    newest = LARGEST_SHARE + 9
    assert memo.get("a", newest, row(newest)[1]) is not None
    big, big_payload = row(10_000, "x" * one)
    memo.put("a", big_payload, big)
    assert memo.get("a", 10_000, big_payload) is None
    assert len(memo) == LARGEST_SHARE


def test_replacing_a_row_keeps_the_accounting() -> None:
    memo = RowMemo(1 << 20)
    first, first_payload = row(1, "short")
    memo.put("a", first_payload, first)
    second, second_payload = row(1, "a longer text")
    memo.put("a", second_payload, second)
    assert len(memo) == 1
    assert memo.used_bytes == estimated_bytes(second_payload)
    assert memo.forget_app("a") == 1
    assert memo.used_bytes == 0 and len(memo) == 0


def test_forget_app_leaves_other_apps() -> None:
    memo = RowMemo(1 << 20)
    for row_id, app in enumerate(["a", "b", "a", "c"]):
        stored, payload = row(row_id)
        memo.put(app, payload, stored)
    assert memo.forget_app("a") == 2
    assert memo.forget_app("a") == 0
    assert memo.forget_app("never") == 0
    assert len(memo) == 2
    memo.clear()
    assert len(memo) == 0 and memo.used_bytes == 0


def test_zero_budget_remembers_nothing_and_negative_is_refused() -> None:
    memo = RowMemo(0)
    stored, payload = row(1)
    memo.put("a", payload, stored)
    assert not memo.enabled and len(memo) == 0
    with pytest.raises(ValueError):
        RowMemo(-1)


def fetched(memo: RowMemo, rows: list[tuple[int, str]], app: str = "a") -> FetchedRows:
    return FetchedRows.from_rows(
        [(row_id, payload, "user") for row_id, payload in rows], PLAIN, app, memo
    )


def test_fetched_rows_reuse_decoded_rows_and_decode_changed_ones() -> None:
    memo = RowMemo(1 << 20)
    payloads = [(i, encode_payload(UserMessage(text=f"m{i}"))) for i in range(10)]
    first = fetched(memo, payloads).tail(10)
    again = fetched(memo, payloads).tail(10)
    assert all(a is b for a, b in zip(first, again, strict=True))
    edited = [*payloads[:-1], (9, encode_payload(UserMessage(text="edited")))]
    latest = fetched(memo, edited)
    assert latest.tail(1)[0].message == UserMessage(text="edited")
    assert latest[0] is first[0]  # the indexed path uses the memo too
    other_app = fetched(memo, payloads, app="b").tail(10)
    assert all(a is not b for a, b in zip(first, other_app, strict=True))


def test_a_corrupt_row_is_still_a_storage_error_and_is_not_remembered() -> None:
    memo = RowMemo(1 << 20)
    good = encode_payload(UserMessage(text="ok"))
    with pytest.raises(StorageError):
        fetched(memo, [(1, good), (2, "{not json")]).tail(2)
    assert memo.get("a", 2, "{not json") is None


def test_groups_decode_to_equal_messages_through_the_memo() -> None:
    memo = RowMemo(1 << 20)
    messages = [
        UserMessage(text="go"),
        AiMessage(tool_requests=[ToolRequest(id="c1", name="t", arguments="{}")]),
        ToolResult(id="c1", tool_name="t", text="done"),
    ]
    payloads = [(i, encode_payload(m)) for i, m in enumerate(messages)]
    for _ in range(2):
        assert [r.message for r in fetched(memo, payloads).tail(3)] == messages


def test_threads_share_one_memo_without_losing_its_accounting() -> None:
    one = estimated_bytes(row(1)[1])
    memo = RowMemo(one * 200)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for row_id in range(offset, offset + 2_000):
                stored, payload = row(row_id)
                memo.put("a", payload, stored)
                memo.get("a", row_id, payload)
                if row_id % 500 == 0:
                    memo.forget_app("a")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i * 10_000,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert memo.used_bytes == len(memo) * one  # every row here has the same size
    assert memo.used_bytes <= memo.max_bytes
