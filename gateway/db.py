"""The gateway's database: one async SQLAlchemy engine shared by the key store, the audit trail and
the usage ledger.

SQLite (aiosqlite) by default; any SQLAlchemy async URL works (Postgres via asyncpg). The tables
(:mod:`gateway.tables`) are created on open.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway import json_codec
from gateway.tables import Base


def _ensure_sqlite_folder(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


async def open_engine(url: str) -> AsyncEngine:
    """Connect to ``url`` (creating a SQLite file's folder) and create missing tables."""
    await asyncio.to_thread(_ensure_sqlite_folder, url)
    # JSON columns in orjson's compact form (the usage ledger writes two per row); a lone UTF-16
    # surrogate raises UnicodeEncodeError, so the admin API refuses such key metadata up front
    engine = create_async_engine(url, json_serializer=json_codec.dumps_text)
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    return engine
