"""``check_messages`` names the field that breaks a limit (position, type, field; the call id
for arguments) and never quotes the text; ASCII and non-ASCII texts are measured in UTF-8
bytes."""

from __future__ import annotations

import pytest

from memstore.core.inputs import check_messages
from memstore.errors import InvalidMessageError, MessageTooLargeError
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage

OK = UserMessage(text="ok")


@pytest.mark.parametrize(
    ("message", "error", "text"),
    [
        (UserMessage(text="a\x00b"), InvalidMessageError, "message 1 (user) text contains a NUL"),
        (UserMessage(text="\ud800"), InvalidMessageError, "message 1 (user) text is not valid"),
        (UserMessage(text="x" * 21), MessageTooLargeError, "message 1 (user) text is 21 bytes"),
        (UserMessage(text="é" * 11), MessageTooLargeError, "message 1 (user) text is 22 bytes"),
        (
            AiMessage(tool_requests=[ToolRequest(id="c9", name="n", arguments="y" * 30)]),
            MessageTooLargeError,
            "message 1 (ai) arguments of 'c9' is 30 bytes; the limit is 20 bytes",
        ),
        (
            AiMessage(tool_requests=[ToolRequest(id="c\x07", name="n", arguments="{}")]),
            InvalidMessageError,
            "message 1 (ai) tool call id contains a control character",
        ),
        (
            ToolResult(id="c1", tool_name="t" * 25, text=""),
            MessageTooLargeError,
            "message 1 (tool_result) tool_name is 25 bytes",
        ),
    ],
)
def test_the_error_names_the_field(message: Message, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as raised:
        check_messages([OK, message], 20)
    assert str(raised.value).startswith(text)
    assert "yyyy" not in str(raised.value) and "xxxx" not in str(raised.value)


def test_texts_at_the_limit_pass() -> None:
    check_messages([UserMessage(text="x" * 20), UserMessage(text="é" * 10)], 20)
