"""Keys made straight in a gateway's database, outside any test's fixture scope (a module's stack)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.auth import KeyStore


def create_key(database_url: str, name: str, **kwargs: Any) -> str:
    """``KeyStore.create(name, **kwargs)`` in the database at ``database_url``; the plaintext key."""

    async def create() -> str:
        store = await KeyStore.open(database_url)
        try:
            return (await store.create(name, **kwargs))[1]
        finally:
            await store.close()

    return asyncio.run(create())
