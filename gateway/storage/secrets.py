"""Secrets the gateway makes for itself: generated once, kept in the database (``gateway_secrets``),
so every replica on that database reads the same one and a restart keeps it.

The first replica to ask for a name it does not find generates 32 random bytes and inserts them; a
replica that loses that race (the primary key refuses its row) reads the winner's. Kept as hex.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.storage.tables import GatewaySecretRow

#: Random bytes of a generated secret.
SECRET_BYTES = 32


async def shared_secret(engine: AsyncEngine, name: str) -> bytes:
    """The secret ``name`` on ``engine``'s database, generated and stored if it has none yet."""
    query = select(GatewaySecretRow.value).where(GatewaySecretRow.name == name)
    async with engine.connect() as conn:
        found = await conn.scalar(query)
    if found is None:
        made = secrets.token_hex(SECRET_BYTES)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    insert(GatewaySecretRow).values(name=name, value=made, created_at=datetime.now(UTC))
                )
            found = made
        except IntegrityError:  # another replica stored one first: that one is everybody's
            async with engine.connect() as conn:
                found = await conn.scalar(query)
    assert found is not None
    return bytes.fromhex(found)
