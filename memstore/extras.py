"""The optional extras and the error a feature raises when its extra is not installed.

``pip install memstore`` installs the core: the sync store on SQLite, the in-process and Redis
caches, the CLI and the demo. Everything else is an extra (``[project.optional-dependencies]``
in ``pyproject.toml``), loaded only when the feature that needs it is used. A missing one
raises :class:`~memstore.errors.MissingExtraError`, whose message is the exact ``pip install``
line, never the dependency's own ``ImportError``::

    with needs_extra("memstore.adapters.langchain", "langchain"):
        from langchain_core.chat_history import BaseChatMessageHistory
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memstore.errors import MissingExtraError

EXTRAS: dict[str, str] = {
    "postgres": "psycopg 3",
    "mysql": "PyMySQL",
    "async": "aiosqlite, asyncmy and greenlet",
    "asyncpg": "asyncpg and greenlet",
    "fast": "hiredis",
    "langchain": "langchain, langchain-core and langgraph",
    "openai-agents": "openai-agents",
    "pydantic-ai": "pydantic-ai-slim",
    "google-adk": "google-adk",
    "claude-agent-sdk": "claude-agent-sdk",
    "agent-framework": "agent-framework-core",
    "otel": "opentelemetry-api",
    "crypto": "cryptography",
}
"""Extra name -> what it installs (the runtime extras of ``pyproject.toml``; ``docs`` and
``dev`` are for working on memstore itself)."""


def install_line(*extras: str) -> str:
    """The shell command that installs ``extras``: ``pip install 'memstore[async,postgres]'``."""
    unknown = [extra for extra in extras if extra not in EXTRAS]
    if unknown or not extras:
        raise ValueError(f"unknown extra {unknown!r}; expected some of {sorted(EXTRAS)}")
    return f"pip install 'memstore[{','.join(extras)}]'"


def missing_extra(
    feature: str, extras: str | tuple[str, ...], error: ImportError
) -> MissingExtraError:
    """The error raised when ``feature`` (what the user asked for: a module, a class, a URL's
    driver) failed to import what ``extras`` install; raise it ``from error``. Its message::

        AsyncMemoryStore needs the 'async' extra (aiosqlite, asyncmy and greenlet), which is
        not installed (importing 'greenlet' failed): pip install 'memstore[async]'
    """
    names = (extras,) if isinstance(extras, str) else extras
    command = install_line(*names)
    quoted = " and ".join(repr(name) for name in names)
    what = "; ".join(EXTRAS[name] for name in names)
    noun, verb = ("extras", "are") if len(names) > 1 else ("extra", "is")
    failed = f" (importing {error.name!r} failed)" if error.name else ""
    detail = (
        f"{feature} needs the {quoted} {noun} ({what}), which {verb} not installed{failed}: "
        + command
    )
    failure = MissingExtraError(detail, extra=",".join(names), install=command)
    failure.name = error.name
    return failure


@contextmanager
def needs_extra(feature: str, extras: str | tuple[str, ...]) -> Iterator[None]:
    """The imports of what ``extras`` install, for ``feature``: an ``ImportError`` inside the
    block is raised as :func:`missing_extra`'s error, from it."""
    try:
        yield
    except ImportError as error:
        raise missing_extra(feature, extras, error) from error
