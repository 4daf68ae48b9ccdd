"""The gateway's database: one async SQLAlchemy engine shared by the key store, the audit trail and
the usage ledger.

SQLite (aiosqlite) by default; any SQLAlchemy async URL works (Postgres via asyncpg). The schema is
Alembic's (:mod:`gateway.storage.migrations`): an empty database gets it on open; one at another revision is
refused until ``dspark-gateway db upgrade`` has moved it on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from dspark_common import json_codec
from gateway.storage.migrations import schema


def _ensure_sqlite_folder(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


async def connect(url: str) -> AsyncEngine:
    """An engine on ``url`` (creating a SQLite file's folder), whatever its schema."""
    await asyncio.to_thread(_ensure_sqlite_folder, url)
    # JSON columns in orjson's compact form (the usage ledger writes two per row); a lone UTF-16
    # surrogate raises UnicodeEncodeError, so the admin API refuses such key metadata up front
    return create_async_engine(url, json_serializer=json_codec.dumps_text)


T = TypeVar("T")


async def on_connection(url: str, work: Callable[[Connection], T]) -> T:
    """``work(connection)`` on ``url`` whatever its schema, in one transaction committed if it returns
    (for schema commands: Alembic works on a synchronous connection)."""
    engine = await connect(url)
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


async def open_engine(url: str) -> AsyncEngine:
    """An engine on ``url`` with the schema this gateway runs on: created on an empty database.

    Raises :class:`~gateway.storage.migrations.schema.SchemaError` (one line naming the command to run) for a
    database at an older schema (0.1.0's tables without ``alembic_version`` too) or a newer one.
    """
    engine = await connect(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(schema.ensure)
    except BaseException:
        await engine.dispose()
        raise
    return engine
