"""Which key created which stored response (gateway/storage/response_owners.py), on a SQLite file: a
claim is readable at once (before its row is written), the first claim of an id stands, a forgotten
one is nobody's."""

from __future__ import annotations

from pathlib import Path

from gateway.storage.db import open_engine
from gateway.storage.response_owners import Owner, ResponseOwners


async def test_claims_read_back_the_first_stands_and_forget_drops_it(tmp_path: Path) -> None:
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'owners.db'}")
    try:
        owners = ResponseOwners(engine)
        owners.claim("resp_1", Owner("key_a", "b0"))
        assert await owners.owner("resp_1") == Owner("key_a", "b0")  # pending: not written yet
        await owners.aclose()
        owners.claim("resp_1", Owner("key_b", "b1"))  # the backend's ids are unique: a second claim loses
        await owners.aclose()
        again = ResponseOwners(engine)  # another process reads what was written
        assert await again.owner("resp_1") == Owner("key_a", "b0")
        assert await again.owner("resp_2") is None
        await again.forget("resp_1")
        assert await owners.owner("resp_1") is None
    finally:
        await engine.dispose()
