"""The throwaway servers of tests/support/services.py — what a fresh clone with no PostgreSQL or Redis
running gets — started here whatever runs locally, each holding the gateway's own state, and gone
once its block ends."""

from __future__ import annotations

import asyncio

import pytest

from gateway.auth import Authenticator, KeyStore, Principal
from gateway.errors import GatewayError
from gateway.limits.rate import RateLimiter, storage_for
from tests.support import services


def test_own_postgres_holds_the_key_store() -> None:
    with services.own_postgres() as url:
        assert url != services.LOCAL_POSTGRES_URL
        asyncio.run(_create_then_authenticate(url))
    assert not services.postgres_answers(url)


async def _create_then_authenticate(url: str) -> None:
    """A key written by one store is found by another (the tables made by ``KeyStore.open``)."""
    writer = await KeyStore.open(url)
    try:
        assert await writer.list() == []  # a new database
        record, secret = await writer.create("own-postgres", rpm=7)
    finally:
        await writer.close()
    reader = await KeyStore.open(url)
    auth = Authenticator(reader, ttl_s=0)
    try:
        assert secret is not None
        principal = await auth.authenticate(secret)
        assert (principal.key_id, principal.rpm) == (record.id, 7)
    finally:
        await auth.aclose()
        await reader.close()


def test_own_redis_holds_the_rate_limits() -> None:
    with services.own_redis() as url:
        assert url != services.LOCAL_REDIS_URL
        asyncio.run(_spend_then_refuse(url))
    assert not services.redis_answers(url)


async def _spend_then_refuse(url: str) -> None:
    """Two requests per minute spent through one limiter are refused by another on the same Redis, as
    two gateway replicas share them."""
    principal = Principal("key_own_redis", "own-redis", rpm=2)
    first = RateLimiter(storage_for(url), window_s=60)
    for _ in range(2):
        await first.count(principal)
    second = RateLimiter(storage_for(url), window_s=60)
    with pytest.raises(GatewayError) as refused:
        await second.count(principal)
    assert refused.value.code == "rate_limit_requests"
