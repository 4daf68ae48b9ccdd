"""The gateway's generated secrets (gateway/storage/secrets.py), on a SQLite file: made once, the same
for every reader of the database (a replica, a restart), whoever asks first; the prefix cache's is the
configured one when there is one (gateway/app/factory.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.app.factory import cache_secret
from gateway.auth.cache_salt import SECRET_NAME
from gateway.config import Settings
from gateway.storage.db import open_engine
from gateway.storage.secrets import SECRET_BYTES, shared_secret


async def test_a_secret_is_generated_once_and_read_by_everyone(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'secrets.db'}"
    engine, other = await open_engine(url), await open_engine(url)
    try:
        first, second = await asyncio.gather(shared_secret(engine, "salt"), shared_secret(other, "salt"))
        assert first == second and len(first) == SECRET_BYTES
        assert await shared_secret(other, "salt") == first
        assert await shared_secret(engine, "another") != first
    finally:
        await engine.dispose()
        await other.dispose()


async def test_the_cache_salt_secret_is_the_settings_else_the_databases(tmp_path: Path) -> None:
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}")
    try:
        configured = Settings(upstream="http://127.0.0.1:9", cache_salt_secret="k" * 32)
        assert await cache_secret(configured, engine) == b"k" * 32
        generated = await cache_secret(Settings(upstream="http://127.0.0.1:9"), engine)
        assert generated == await shared_secret(engine, SECRET_NAME) != b"k" * 32
    finally:
        await engine.dispose()
