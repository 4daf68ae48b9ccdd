"""The gateway's generated secrets (gateway/storage/secrets.py), on a SQLite file: made once, the same
for every reader of the database (a replica, a restart), whoever asks first."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
