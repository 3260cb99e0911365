"""Install hints for the optional framework adapters.

Each adapter module imports its framework inside ``try``; on ``ImportError`` it raises
:func:`missing_extra`, a :class:`~memstore.errors.MissingExtraError` whose message is the exact
``pip install`` line::

    try:
        from langchain_core.chat_history import BaseChatMessageHistory
    except ImportError as error:
        raise missing_extra("langchain", error) from error
"""

from __future__ import annotations

from memstore.errors import MissingExtraError

EXTRAS: dict[str, str] = {
    "langchain": "langchain (with langchain-core and langgraph)",
    "openai-agents": "openai-agents",
    "pydantic-ai": "pydantic-ai-slim",
    "google-adk": "google-adk",
}
"""Extra name -> the distribution it installs (see ``[project.optional-dependencies]``)."""

ADAPTER_MODULES: dict[str, str] = {
    "langchain": "memstore.adapters.langchain",
    "openai-agents": "memstore.adapters.openai_agents",
    "pydantic-ai": "memstore.adapters.pydantic_ai",
    "google-adk": "memstore.adapters.google_adk",
}


def install_line(extra: str) -> str:
    """The shell command that installs ``extra``: ``pip install 'memstore[<extra>]'``."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; expected one of {sorted(EXTRAS)}")
    return f"pip install 'memstore[{extra}]'"


def missing_extra(extra: str, error: ImportError) -> MissingExtraError:
    """The error an adapter raises when importing its framework failed with ``error``."""
    command = install_line(extra)
    missing = error.name or EXTRAS[extra]
    detail = (
        f"{ADAPTER_MODULES[extra]} needs {EXTRAS[extra]}, which is not installed "
        f"(importing {missing!r} failed); install it with: {command}"
    )
    failure = MissingExtraError(detail, extra=extra, install=command)
    failure.name = error.name
    return failure
