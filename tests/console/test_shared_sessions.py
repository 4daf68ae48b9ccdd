"""Console sessions in the Redis replicas share: what one replica opens another finds, and a Redis
that cannot be reached is a :class:`StoreUnavailable` (a page), not a 500."""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis

from gateway.auth.principal import Principal
from gateway.console.sessions import RedisSessions, StoreUnavailable
from tests.support.servers import free_port

ADMIN = Principal(key_id="oidc:alice", name="alice@example.test", kind="oidc", scopes=("admin",))


async def test_two_replicas_share_sessions(redis_url: str) -> None:
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    one = RedisSessions(Redis.from_url(redis_url), namespace, ttl_s=60)
    two = RedisSessions(Redis.from_url(redis_url), namespace, ttl_s=60)
    try:
        token = await one.open(ADMIN, "", until=None)
        found = await two.get(token)
        assert found is not None and found.principal == ADMIN and found.credential == ""
        await two.close(token)
        assert await one.get(token) is None
        ended = await one.open(ADMIN, "dsk-x", until=0.0)  # its credential expired already
        assert await two.get(ended) is None
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_redis_that_cannot_be_reached_is_store_unavailable() -> None:
    down = RedisSessions(Redis(port=free_port(), socket_connect_timeout=1), "x", ttl_s=60)
    with pytest.raises(StoreUnavailable):
        await down.get("token")
    with pytest.raises(StoreUnavailable):
        await down.open(ADMIN, "")
    await down.aclose()
