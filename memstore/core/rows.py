"""The row codec: canonical messages to and from ``chat_history_original`` rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any, overload

from pydantic import ValidationError

from memstore.core.crypto import DISPLAY_CONTENT, ORIGINAL_PAYLOAD, RowCipher, is_sealed
from memstore.core.display import DisplayDraft
from memstore.core.row_memo import NO_MEMO, RowMemo
from memstore.core.summary import is_summary
from memstore.core.window import StoredMessage
from memstore.errors import StorageError
from memstore.messages import MESSAGE_ADAPTER, STORED, AiMessage, Message, ToolResult

USER = "user"
AI = "ai"
TOOL_REQUEST = "toolExecutionRequest"
TOOL_RESULT = "toolExecutionResult"
SYSTEM = "system"
SUMMARY = "summary"
"""A compaction's summary (a system message carrying ``memstore_summary`` metadata)."""


def message_type(message: Message) -> str:
    """The ``message_type`` column value for ``message``."""
    if isinstance(message, AiMessage):
        return TOOL_REQUEST if message.tool_requests else AI
    if isinstance(message, ToolResult):
        return TOOL_RESULT
    if is_summary(message):
        return SUMMARY
    return SYSTEM if message.type == "system" else USER


def encode_payload(message: Message) -> str:
    """The payload column: the message's canonical JSON (arguments kept verbatim inside it)."""
    return encode_message(message).decode()


def encode_message(message: Message) -> bytes:
    """A message's stored JSON (payload columns and cache entries): ``model_dump_json()``
    without the fields that hold their defaults (empty ``metadata``, ``tool_requests`` and
    ``reasoning``, a ``null`` AI text, ``is_error: false``), ``type`` always kept.

    Decoding it gives an equal message; each field left out spares a validator call back
    into Python when it is read (a fifth of a plain message's decode). Payloads written
    with every field, as before, decode the same way.
    """
    names: tuple[str, ...] = () if message.metadata else ("metadata",)
    if isinstance(message, AiMessage):
        if message.text is None:
            names += ("text",)
        if not message.tool_requests:
            names += ("tool_requests",)
        if not message.reasoning:
            names += ("reasoning",)
    elif isinstance(message, ToolResult) and not message.is_error:
        names += ("is_error",)
    serializer = message.__pydantic_serializer__
    if not names:
        return serializer.to_json(message)
    excluded = _EXCLUDED.get(names)
    if excluded is None:
        excluded = _EXCLUDED[names] = set(names)
    return serializer.to_json(message, exclude=excluded)


_EXCLUDED: dict[tuple[str, ...], set[str]] = {}
"""The ``exclude`` sets in use (a handful), built once."""


_VALIDATE_JSON = MESSAGE_ADAPTER.validator.validate_json
"""The schema validator's own ``validate_json`` (the adapter's wrapper costs ~10% of a row)."""


def decode_payload(payload: str, row_id: int) -> Message:
    """Parse a payload column back into a message; a corrupt row is a ``StorageError``."""
    try:
        message: Message = _VALIDATE_JSON(payload, context=STORED)
        return message
    except (ValidationError, ValueError) as error:
        # ``from None``: the validation error quotes the payload, i.e. chat text.
        raise StorageError(
            f"row {row_id} of chat_history_original has a corrupt payload ({type(error).__name__})",
            kind="corrupt row",
        ) from None


def open_payload(cipher: RowCipher, app_id: str, row_id: int, payload: str) -> str:
    """The payload column's plaintext (the message JSON), sealed or not."""
    return cipher.open(payload, ORIGINAL_PAYLOAD, app_id, row_id)


def decode_row(cipher: RowCipher, app_id: str, row_id: int, payload: str) -> Message:
    """The message of one stored original row (opened, then parsed). Without keys the payload
    is parsed as it is (nothing added to the read path); a sealed one then fails to parse and
    raises :class:`~memstore.errors.UnknownKeyError` naming its key id."""
    if not cipher.enabled:
        try:
            return decode_payload(payload, row_id)
        except StorageError:
            if is_sealed(payload):
                cipher.open(payload, ORIGINAL_PAYLOAD, app_id, row_id)  # raises, naming the key
            raise
    return decode_payload(cipher.open(payload, ORIGINAL_PAYLOAD, app_id, row_id), row_id)


_FIRST = itemgetter(0)


class FetchedRows(Sequence[StoredMessage]):
    """The rows of one loader read (chronological), each decoded on first use.

    A window of ``n`` messages is mostly decided by its newest ``n`` rows; the look-ahead rows
    read with them are decoded only when the edge check needs them (see
    :func:`memstore.core.loader.select_lazily`). ``kinds`` are the rows' ``message_type``
    column values (summary rows are told apart without decoding them).
    """

    __slots__ = ("_app_id", "_cipher", "_decoded", "_memo", "ids", "kinds", "payloads")

    def __init__(
        self,
        ids: list[int],
        payloads: list[str],
        kinds: list[str],
        cipher: RowCipher,
        app_id: str,
        memo: RowMemo = NO_MEMO,
    ) -> None:
        self.ids = ids
        self.payloads = payloads
        self.kinds = kinds
        self._cipher = cipher
        self._app_id = app_id
        self._memo = memo
        self._decoded: list[StoredMessage | None] = [None] * len(ids)

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Sequence[Any]],
        cipher: RowCipher,
        app_id: str,
        memo: RowMemo = NO_MEMO,
    ) -> FetchedRows:
        """``(id, payload, message_type)`` rows in any order, sorted by id; rows decoded
        before are taken from ``memo`` (and rows decoded now remembered there)."""
        if not rows:
            return cls([], [], [], cipher, app_id, memo)
        ids, payloads, kinds = zip(*sorted(rows, key=_FIRST), strict=True)
        return cls(list(ids), list(payloads), list(kinds), cipher, app_id, memo)

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> StoredMessage: ...

    @overload
    def __getitem__(self, index: slice) -> FetchedRows: ...

    def __getitem__(self, index: int | slice) -> StoredMessage | FetchedRows:
        if isinstance(index, slice):
            return self.subset(range(len(self.ids))[index])
        row = self._decoded[index]
        if row is None:
            row_id, payload, memo = self.ids[index], self.payloads[index], self._memo
            remember = memo.enabled
            row = memo.get(self._app_id, row_id, payload) if remember else None
            if row is None:
                message = decode_row(self._cipher, self._app_id, row_id, payload)
                row = StoredMessage(row_id, message)
                if remember:
                    memo.put(self._app_id, payload, row)
                    memo.counted(0, 1)
            else:  # only a memo that is on hands rows back
                memo.counted(1, 0)
            self._decoded[index] = row
        return row

    def __iter__(self) -> Iterator[StoredMessage]:
        for index in range(len(self.ids)):
            yield self[index]

    def tail(self, count: int) -> list[StoredMessage]:
        """The newest ``count`` rows, decoded."""
        decoded = self._decoded
        start = max(0, len(decoded) - count)
        if not self._cipher.enabled:
            ids, payloads, memo, app_id = self.ids, self.payloads, self._memo, self._app_id
            remember = memo.enabled
            reused = fresh = 0
            try:
                for index in range(start, len(decoded)):
                    if decoded[index] is None:
                        row_id, payload = ids[index], payloads[index]
                        if remember:
                            row = memo.get(app_id, row_id, payload)
                            if row is not None:
                                decoded[index] = row
                                reused += 1
                                continue
                        message: Message = _VALIDATE_JSON(payload, context=STORED)
                        row = decoded[index] = StoredMessage(row_id, message)
                        if remember:
                            memo.put(app_id, payload, row)
                            fresh += 1
            except (ValidationError, ValueError):
                pass  # the row's own decode below raises the typed error
            if remember:
                memo.counted(reused, fresh)
        rows = [row for row in decoded[start:] if row is not None]
        if len(rows) == len(decoded) - start:
            return rows
        return [self[index] for index in range(start, len(decoded))]

    def subset(self, positions: Sequence[int]) -> FetchedRows:
        """The rows at ``positions`` (ascending), sharing what is already decoded."""
        out = FetchedRows(
            [self.ids[i] for i in positions],
            [self.payloads[i] for i in positions],
            [self.kinds[i] for i in positions],
            self._cipher,
            self._app_id,
            self._memo,
        )
        out._decoded = [self._decoded[i] for i in positions]
        return out

    def bodies(self) -> dict[int, str]:
        """The payload of every decoded row by the identity (``id()``) of its message, when
        the payloads are plain JSON (no keys): a cached window's entry can carry the row's
        payload, which decodes to the message, instead of encoding the message again."""
        if self._cipher.enabled:
            return {}
        return {
            id(row.message): payload
            for row, payload in zip(self._decoded, self.payloads, strict=True)
            if row is not None
        }

    def followed_by(self, newer: FetchedRows) -> FetchedRows:
        """These rows, then ``newer`` (all of whose ids are above these), sharing what is
        already decoded."""
        out = FetchedRows(
            self.ids + newer.ids,
            self.payloads + newer.payloads,
            self.kinds + newer.kinds,
            self._cipher,
            self._app_id,
            self._memo,
        )
        out._decoded = self._decoded + newer._decoded
        return out

    def without_summaries(self) -> tuple[FetchedRows, list[StoredMessage]]:
        """The plain rows (undecoded) and the summary rows (decoded)."""
        if SUMMARY not in self.kinds:
            return self, []
        summaries = [i for i, kind in enumerate(self.kinds) if kind == SUMMARY]
        plain = [i for i, kind in enumerate(self.kinds) if kind != SUMMARY]
        return self.subset(plain), [self[i] for i in summaries]

    def after(self, row_id: int) -> FetchedRows:
        """The rows with an id above ``row_id`` (undecoded)."""
        return self.subset([i for i, value in enumerate(self.ids) if value > row_id])


def open_content(cipher: RowCipher, app_id: str, row_id: int, content: str) -> str:
    """The display row's text, sealed or not."""
    return cipher.open(content, DISPLAY_CONTENT, app_id, row_id)


def seal_original(cipher: RowCipher, row: dict[str, Any]) -> dict[str, Any]:
    """A full original row dict (with ``id``) with its payload sealed (as it is when off)."""
    if cipher.enabled:
        row["payload"] = cipher.seal(row["payload"], ORIGINAL_PAYLOAD, row["app_id"], row["id"])
    return row


def seal_display(cipher: RowCipher, row: dict[str, Any]) -> dict[str, Any]:
    """A full display row dict (with ``id``) with its content sealed (as it is when off)."""
    if cipher.seals(row["content"]):
        row["content"] = cipher.seal(row["content"], DISPLAY_CONTENT, row["app_id"], row["id"])
    return row


def original_row(
    row_id: int, app_id: str, user_id: str | None, message: Message, now: Any
) -> dict[str, Any]:
    """The full column dict of one original-history row."""
    return {
        "id": row_id,
        "app_id": app_id,
        "user_id": user_id,
        "message_type": message_type(message),
        "tool_call_id": message.id if isinstance(message, ToolResult) else None,
        "payload": encode_payload(message),
        "created_at": now,
        "updated_at": now,
        "is_deleted": False,
    }


def display_row(
    row_id: int, app_id: str, user_id: str | None, draft: DisplayDraft, now: Any
) -> dict[str, Any]:
    """The full column dict of one display-history row."""
    return {
        "id": row_id,
        "app_id": app_id,
        "user_id": user_id,
        "role": draft.role,
        "content": draft.content,
        "status": draft.status,
        "created_at": now,
        "updated_at": now,
        "is_deleted": False,
    }
