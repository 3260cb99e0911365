"""The sync and async runners of statement steps: one source for the SQL backends' twins.

A sequence of statements whose sync and async forms would differ only by ``await`` is written
once, as a generator (:mod:`memstore.core.steps`) that yields each statement with its
parameters (a :data:`SqlStep`) and gets its ``Result`` back (buffered on both engines, so
``.one()``, ``.all()``, ``.scalar()`` and ``.rowcount`` read alike). :func:`run_steps` runs it on
a ``Connection``, :func:`arun_steps` on an ``AsyncConnection``.

An operation of several short transactions yields :data:`Unit` generators instead, each run in
a transaction of its own (:func:`run_in_transactions`, :func:`arun_in_transactions`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import Connection, Engine

from memstore.core.steps import adrive, drive

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

R = TypeVar("R")

SqlStep = tuple[Any, Any]
"""A statement and its parameters (``None``, a dict, or a list of dicts: one row each)."""

Steps = Generator[SqlStep, Any, R]
"""Statements in, each one's ``Result`` back, a value out."""

Unit = Generator[Any, Any, Any]
"""The statement steps of one transaction (a :data:`Steps` generator)."""


def run_steps(conn: Connection, steps: Steps[R]) -> R:
    """Run ``steps`` on ``conn``."""
    return drive(steps, lambda step: conn.execute(*step))


async def arun_steps(conn: AsyncConnection, steps: Steps[R]) -> R:
    """Run ``steps`` on an async ``conn``."""
    return await adrive(steps, lambda step: conn.execute(*step))


def run_connected(engine: Engine, steps: Steps[R], *, begin: bool = False) -> R:
    """Run ``steps`` on a connection of ``engine``: with ``begin`` in a transaction committed
    at the end, else none of their own (reads)."""
    with engine.begin() if begin else engine.connect() as conn:
        return run_steps(conn, steps)


async def arun_connected(engine: AsyncEngine, steps: Steps[R], *, begin: bool = False) -> R:
    """:func:`run_connected` on an async engine."""
    async with engine.begin() if begin else engine.connect() as conn:
        return await arun_steps(conn, steps)


def run_in_transactions(engine: Engine, units: Generator[Unit, Any, R]) -> R:
    """Run each unit ``units`` yields in a transaction of its own, handing back its value."""
    return drive(units, lambda unit: run_connected(engine, unit, begin=True))


async def arun_in_transactions(engine: AsyncEngine, units: Generator[Unit, Any, R]) -> R:
    """:func:`run_in_transactions` on an async engine."""
    return await adrive(units, lambda unit: arun_connected(engine, unit, begin=True))
