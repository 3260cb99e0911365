"""Check what one install of memstore provides: ``python tests/install/check_install.py INSTALL``.

INSTALL is ``core`` (``pip install memstore``, no extras) or the name of one extra
(``pip install 'memstore[async]'``). The script imports every memstore module (a module that
needs an extra that is not installed must raise ``MissingExtraError`` naming it), exercises what
the install documents, and runs the example under ``examples/`` that needs only that extra, in
an empty folder with no ``MEMSTORE_*`` variable (a fresh SQLite file, no servers). With
``MEMSTORE_TEST_POSTGRES_URL`` / ``MEMSTORE_TEST_MYSQL_URL`` set, the database extras also run a
round trip there. It exits non-zero at the first thing that does not hold.

It needs nothing but the install itself and a checkout (for ``examples/``): ``.ci/run`` runs it
in a fresh virtual environment per install, and ``tests/install/test_installs.py`` in the
development environment with everything outside the install hidden (``simulate.py``).
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import memstore
from memstore import MemoryStore, MissingExtraError, Settings
from memstore.messages import AiMessage, Message, ToolRequest, ToolResult, UserMessage

CHECKOUT = Path(__file__).resolve().parents[2]

MODULE_EXTRAS = {
    "memstore.aio": "async",
    "memstore.sql.aio": "async",
    "memstore.adapters.langchain": "langchain",
    "memstore.adapters._lc_middleware": "langchain",
    "memstore.adapters._lc_convert": "langchain",
    "memstore.adapters._lc_ledger": "langchain",
    "memstore.adapters._lc_pending": "langchain",
    "memstore.adapters.langgraph": "langchain",
    "memstore.adapters.openai_agents": "openai-agents",
    "memstore.adapters.pydantic_ai": "pydantic-ai",
    "memstore.adapters._pai_convert": "pydantic-ai",
    "memstore.adapters._pai_records": "pydantic-ai",
    "memstore.adapters.google_adk": "google-adk",
    "memstore.adapters._adk_convert": "google-adk",
    "memstore.adapters._adk_state": "google-adk",
    "memstore.adapters.claude_agent_sdk": "claude-agent-sdk",
    "memstore.adapters.agent_framework": "agent-framework",
}
"""The memstore modules that need an extra to import; every other module needs the core only
(another extra may bring what one needs along: ``asyncpg`` installs greenlet too)."""

EXAMPLES = {
    "langchain": ("langchain_agent.py", ["1 + 2 = 3", "Doubled: 6"]),
    "openai-agents": ("openai_agents_session.py", ["1 + 2 = 3", "Doubled: 6"]),
    "pydantic-ai": ("pydantic_ai_conversation.py", ["The sum is 3.", "Doubled: 6."]),
    "google-adk": ("google_adk_session.py", ["The sum is 3.", "Doubled: 6."]),
    "claude-agent-sdk": ("claude_agent_sdk_session.py", ["Resumed 4 entries", "doubled: 6"]),
    "agent-framework": ("agent_framework_history.py", ["The sum is 3.", "Doubled: 6."]),
}
"""Extra -> the example that needs only it, and lines its output must contain."""

TURN: list[Message] = [
    UserMessage(text="Create a.txt"),
    AiMessage(tool_requests=[ToolRequest(id="call_1", name="write_file", arguments='{"p": 1}')]),
    ToolResult(id="call_1", tool_name="write_file", text="ok"),
    AiMessage(text="Created a.txt."),
]


def say(line: str) -> None:
    print(f"check_install: {line}", flush=True)


def clean_environment() -> dict[str, str]:
    """This process's environment without any ``MEMSTORE_*`` setting (the embedded default)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("MEMSTORE_")}


def available(module: str) -> bool:
    """Whether ``module`` can be imported here."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def expect_missing(extra: str, action: Callable[[], object]) -> None:
    """``action`` raises ``MissingExtraError`` for ``extra``, with its install line."""
    try:
        action()
    except MissingExtraError as error:
        assert extra in error.extra.split(","), (extra, error.extra)
        assert f"pip install 'memstore[{error.extra}]'" == error.install, error.install
        assert error.install in str(error), str(error)
        return
    raise AssertionError(f"expected MissingExtraError for the {extra!r} extra")


def check_modules(installed: set[str]) -> None:
    """Every memstore module imports, or raises ``MissingExtraError`` for its missing extra."""
    seen = 0
    for info in pkgutil.walk_packages(memstore.__path__, "memstore."):
        if info.name == "memstore.__main__":
            continue  # importing it runs the CLI
        seen += 1
        extra = MODULE_EXTRAS.get(info.name)
        try:
            importlib.import_module(info.name)
        except MissingExtraError as error:
            assert extra is not None, f"{info.name} needs the {error.extra!r} extra"
            assert error.extra == extra and extra not in installed, (info.name, error.extra)
            assert error.install in str(error), str(error)
        else:
            # with no extra at all, nothing can bring a framework along
            assert installed or extra is None, f"{info.name} imports without the {extra!r} extra"
    say(f"{seen} memstore modules import (or name their extra)")


def round_trip(store: MemoryStore) -> None:
    """A tool-calling turn written, the cache dropped, and the window rebuilt from SQL."""
    app = f"install-check-{uuid.uuid4().hex[:12]}"
    try:
        store.memory(app).add_all(TURN)
        store.memory(app).invalidate()
        window = store.memory(app).messages()
        assert [m.type for m in window] == ["user", "ai", "tool_result", "ai"], window
        assert window == TURN, window
    finally:
        store.purge(app)


async def async_round_trip(settings: Settings) -> None:
    from memstore.aio import AsyncMemoryStore

    app = f"install-check-{uuid.uuid4().hex[:12]}"
    async with AsyncMemoryStore(settings) as store:
        await store.migrate()
        try:
            await store.memory(app).add_all(TURN)
            await store.memory(app).invalidate()
            assert await store.memory(app).messages() == TURN
        finally:
            await store.purge(app)


def sqlite_settings(folder: str, **options: object) -> Settings:
    return Settings(database_url=f"sqlite:///{Path(folder) / 'check.db'}", **options)


def run(command: list[str], folder: str) -> str:
    """``command`` in ``folder`` with no ``MEMSTORE_*`` variable; its output (it must exit 0)."""
    done = subprocess.run(
        command, cwd=folder, env=clean_environment(), capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise AssertionError(f"{command} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def memstore_command() -> list[str]:
    script = Path(sys.executable).with_name("memstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memstore"]


def check_core(installed: set[str]) -> None:
    from memstore.metrics import otel_listener

    with tempfile.TemporaryDirectory() as folder:
        out = run([*memstore_command(), "demo"], folder)
        assert "identical to the window before the restart: True" in out, out
        assert "tool calls present: 2" in out, out
        assert os.listdir(folder) == [], os.listdir(folder)  # the demo's file is temporary
        say("memstore demo: the tool calls survive the restart")
        url = f"sqlite:///{Path(folder) / 'cli.db'}"
        assert "upgraded to" in run([*memstore_command(), "migrate", "--database-url", url], folder)
        run([*memstore_command(), "stats", "--database-url", url], folder)
        say("the CLI migrates and reads a store")
        with MemoryStore(sqlite_settings(folder)) as store:
            store.migrate()
            round_trip(store)
        say("the sync store round trip on SQLite")
    key = "k1:" + base64.b64encode(bytes(32)).decode()
    sealing = Settings(database_url="sqlite://", encryption_keys=key)
    features: list[tuple[str, str, Callable[[], object]]] = [
        ("async", "greenlet", lambda: memstore.AsyncMemoryStore),
        ("postgres", "psycopg", lambda: MemoryStore(Settings(database_url="postgresql://h/d"))),
        ("mysql", "pymysql", lambda: MemoryStore(Settings(database_url="mysql://h/d"))),
        ("otel", "opentelemetry", otel_listener),
        ("crypto", "cryptography", lambda: MemoryStore(sealing)),
    ]
    tried = 0
    for extra, module, action in features:
        if not available(module):  # another extra may bring it along (openai-agents: otel)
            expect_missing(extra, action)
            tried += 1
    assert installed or tried == len(features), "the core install has an optional dependency"
    say("features of missing extras raise MissingExtraError with the install line")


def check_database_extra(scheme: str, variable: str) -> None:
    from memstore.sql.engine import make_engine

    engine = make_engine(f"{scheme}://user@127.0.0.1:1/none")  # loads the driver; no connection
    engine.dispose()
    say(f"{scheme}:// URLs get the driver the extra installs ({engine.dialect.driver})")
    url = os.environ.get(variable)
    if url:
        with MemoryStore(Settings(database_url=url)) as store:
            store.migrate()
            round_trip(store)
        say(f"the sync store round trip on {variable}")


def check_postgres(installed: set[str]) -> None:
    check_database_extra("postgresql", "MEMSTORE_TEST_POSTGRES_URL")


def check_mysql(installed: set[str]) -> None:
    check_database_extra("mysql", "MEMSTORE_TEST_MYSQL_URL")


def check_async(installed: set[str]) -> None:
    from memstore.sql.aio import make_async_engine

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(async_round_trip(sqlite_settings(folder)))
    say("AsyncMemoryStore round trip on SQLite (aiosqlite)")
    asyncio.run(make_async_engine("mysql://user@127.0.0.1:1/none").dispose())
    say("mysql:// URLs of AsyncMemoryStore get asyncmy")
    url = os.environ.get("MEMSTORE_TEST_MYSQL_URL")
    if url:
        asyncio.run(async_round_trip(Settings(database_url=url)))
        say("AsyncMemoryStore round trip on MEMSTORE_TEST_MYSQL_URL (asyncmy)")
    expect_missing("postgres", lambda: make_async_engine("postgresql://user@127.0.0.1:1/none"))


def check_asyncpg(installed: set[str]) -> None:
    from memstore.sql.aio import make_async_engine

    asyncio.run(make_async_engine("postgresql+asyncpg://user@127.0.0.1:1/none").dispose())
    say("postgresql+asyncpg:// URLs of AsyncMemoryStore load asyncpg")
    url = os.environ.get("MEMSTORE_TEST_POSTGRES_URL")
    if url:
        target = url.replace("+psycopg", "").replace("postgresql://", "postgresql+asyncpg://", 1)
        asyncio.run(async_round_trip(Settings(database_url=target)))
        say("AsyncMemoryStore round trip on MEMSTORE_TEST_POSTGRES_URL (asyncpg)")
    expect_missing("async", lambda: make_async_engine("sqlite:///never.db"))


def check_fast(installed: set[str]) -> None:
    from redis.utils import HIREDIS_AVAILABLE

    assert HIREDIS_AVAILABLE, "redis-py does not see hiredis"
    say("redis-py parses replies with hiredis")


def check_otel(installed: set[str]) -> None:
    from memstore.metrics import otel_listener

    otel_listener()("cache_hits", 1)
    say("OpenTelemetry export")


def check_crypto(installed: set[str]) -> None:
    import sqlalchemy as sa

    key = "k1:" + base64.b64encode(os.urandom(32)).decode()
    with tempfile.TemporaryDirectory() as folder:
        settings = sqlite_settings(folder, encryption_keys=key)
        with MemoryStore(settings) as store:
            store.migrate()
            store.memory("sealed").add(UserMessage(text="a secret"))
            with store.engine.connect() as conn:
                stored = conn.execute(sa.text("SELECT payload FROM chat_history_original"))
                assert all("a secret" not in str(row[0]) for row in stored)
            assert store.memory("sealed").messages()[0].text == "a secret"
    say("encryption at rest on SQLite")


def check_example(extra: str) -> None:
    name, expected = EXAMPLES[extra]
    with tempfile.TemporaryDirectory() as folder:
        out = run([sys.executable, str(CHECKOUT / "examples" / name)], folder)
    missing = [line for line in expected if line not in out]
    assert not missing, f"examples/{name} printed no {missing}:\n{out}"
    say(f"examples/{name} runs to the end")


CHECKS: dict[str, Callable[[set[str]], None]] = {
    "postgres": check_postgres,
    "mysql": check_mysql,
    "async": check_async,
    "asyncpg": check_asyncpg,
    "fast": check_fast,
    "otel": check_otel,
    "crypto": check_crypto,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    install = argv[0]
    from memstore.extras import EXTRAS

    if install != "core" and install not in EXTRAS:
        print(f"unknown install {install!r}: core or one of {sorted(EXTRAS)}", file=sys.stderr)
        return 2
    installed = set() if install == "core" else {install}
    check_modules(installed)
    check_core(installed)
    if install in CHECKS:
        CHECKS[install](installed)
    if install in EXAMPLES:
        check_example(install)
    say(f"{install}: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
