"""The gateway's database: one async SQLAlchemy engine shared by the key store and the usage ledger.

SQLite (aiosqlite) by default; any SQLAlchemy async URL works (Postgres via asyncpg). Tables are
created on open. Times are stored timezone-aware (UTC).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import DeclarativeBase

from gateway import json_codec


class Base(DeclarativeBase):
    """Declarative base of every gateway table."""


def utc(value: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes: read them back as the UTC they were written in."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _ensure_sqlite_folder(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


async def open_engine(url: str) -> AsyncEngine:
    """Connect to ``url`` (creating a SQLite file's folder) and create missing tables."""
    # importing the table modules registers them on Base.metadata
    from gateway.auth import audit, store  # noqa: F401
    from gateway.telemetry import ledger  # noqa: F401

    await asyncio.to_thread(_ensure_sqlite_folder, url)
    # JSON columns in orjson's compact form (the usage ledger writes two per row); a lone UTF-16
    # surrogate raises UnicodeEncodeError, so the admin API refuses such key metadata up front
    engine = create_async_engine(url, json_serializer=json_codec.dumps_text)
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    return engine
