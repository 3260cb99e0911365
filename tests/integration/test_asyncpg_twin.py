"""An AsyncMemoryStore on asyncpg with asyncpg-only URL options: the adapters' sync twin (a
psycopg engine on the same database) takes the URL too."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import sqlalchemy as sa

from memstore import Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from tests.conftest import POSTGRES_URL


def test_adk_and_the_twin_work_with_asyncpg_options() -> None:
    if not POSTGRES_URL:
        pytest.skip("MEMSTORE_TEST_POSTGRES_URL is not set")
    pytest.importorskip("asyncpg")
    pytest.importorskip("google.adk")
    from memstore.adapters.google_adk import MemstoreSessionService

    base = sa.make_url(POSTGRES_URL).set(drivername="postgresql+asyncpg")
    url = base.update_query_dict({"prepared_statement_cache_size": "0", "ssl": "disable"})

    async def scenario() -> None:
        store = AsyncMemoryStore(Settings(database_url=url.render_as_string(hide_password=False)))
        try:
            await store.migrate()
            service = MemstoreSessionService(store)
            session = await service.create_session(app_name="asyncpg", user_id="u", state={"a": 1})
            assert session.state["a"] == 1
            app = f"twin-{uuid.uuid4().hex[:8]}"
            await store.append(app, [UserMessage(text="hello")])
            assert await store.load_window(app) == [UserMessage(text="hello")]
            await service.close()
        finally:
            await store.close()

    asyncio.run(scenario())
