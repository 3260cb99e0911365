"""Thin SQL over ``tool_executions``: one primary-key read, a listing, an insert and
compare-and-set transitions. Which transition to make is the guard's decision, not theirs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from memstore.core.crypto import RowCipher
from memstore.core.export import open_result, seal_result
from memstore.guard.executions import Execution
from memstore.sql.engine import translated_errors
from memstore.sql.queries import model_from_row
from memstore.sql.schema import tool_executions


def _execution(row: Any, cipher: RowCipher) -> Execution:
    result = open_result(cipher, row.app_id, row.idempotency_key, row.result)
    return model_from_row(Execution, row, result=result)


def _key_clause(app_id: Any, key: Any) -> sa.ColumnElement[bool]:
    return sa.and_(tool_executions.c.app_id == app_id, tool_executions.c.idempotency_key == key)


class _ExecutionTable:
    """Statements over ``tool_executions``; transitions are compare-and-set UPDATEs. The
    ``result`` column is sealed and opened by ``cipher``."""

    def __init__(self, engine: Engine, cipher: RowCipher) -> None:
        self.engine = engine
        self.cipher = cipher
        self._by_key = sa.select(tool_executions).where(
            _key_clause(sa.bindparam("app_id"), sa.bindparam("key"))
        )

    def get(self, app_id: str, key: str) -> Execution | None:
        """One primary-key read."""
        with translated_errors("reading a tool execution"), self.engine.connect() as conn:
            row = conn.execute(self._by_key, {"app_id": app_id, "key": key}).first()
        return None if row is None else _execution(row, self.cipher)

    def select(self, app_id: str, states: Sequence[str] | None, limit: int) -> list[Execution]:
        query = sa.select(tool_executions).where(tool_executions.c.app_id == app_id)
        if states is not None:
            query = query.where(tool_executions.c.state.in_(list(states)))
        query = query.order_by(tool_executions.c.updated_at.desc()).limit(limit)
        with translated_errors("reading tool executions"), self.engine.connect() as conn:
            return [_execution(row, self.cipher) for row in conn.execute(query)]

    def insert(self, values: dict[str, Any]) -> bool:
        """Insert a new record; False when the key already has one (a concurrent insert)."""
        values = self._sealed(values["app_id"], values["idempotency_key"], values)
        with translated_errors("recording a tool execution"):
            try:
                with self.engine.begin() as conn:
                    conn.execute(tool_executions.insert(), values)
            except IntegrityError:
                return False
        return True

    def transition(
        self, app_id: str, key: str, from_states: Sequence[str], values: dict[str, Any]
    ) -> bool:
        """Set ``values`` when the record's state is one of ``from_states``; True if it was."""
        values = self._sealed(app_id, key, values)
        statement = (
            tool_executions.update()
            .where(_key_clause(app_id, key), tool_executions.c.state.in_(list(from_states)))
            .values(**values)
        )
        with translated_errors("updating a tool execution"), self.engine.begin() as conn:
            return conn.execute(statement).rowcount == 1

    def _sealed(self, app_id: str, key: str, values: dict[str, Any]) -> dict[str, Any]:
        if values.get("result") is None or not self.cipher.seals(values["result"]):
            return values
        return {**values, "result": seal_result(self.cipher, app_id, key, values["result"])}
