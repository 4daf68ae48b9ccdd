"""Replicas of one backend's shared admission, each a :class:`SharedAdmission` on its own Redis
connection, for the tests in ``tests/scale`` (the ``replicas`` fixture, through its conftest)."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from gateway.admission import Capacity, SharedAdmission

Make = Callable[..., SharedAdmission]


@pytest.fixture
async def replicas(redis_url: str) -> AsyncIterator[Make]:
    """Factory: ``make(slots=2, kv=inf, long_slots=None, ttl=10, **kwargs)`` -> a started replica of
    this test's backend; all closed, and the backend's keys deleted, at the end."""
    backend = f"test-{uuid.uuid4().hex[:10]}"
    made: list[SharedAdmission] = []

    def make(slots: int = 2, kv: float = math.inf, long_slots: int | None = None, ttl: float = 10.0, **kw):
        capacity = Capacity(slots, kv, long_slots or slots)
        replica = SharedAdmission(
            Redis.from_url(redis_url),
            backend,
            capacity,
            kw.pop("queue_max", 100),
            30.0,
            lease_ttl_s=ttl,
            **kw,
        )
        made.append(replica)
        return replica

    yield make
    for replica in made:
        await replica.aclose()
    client = Redis.from_url(redis_url)
    keys = [key async for key in client.scan_iter(f"dspark:admission:{{{backend}}}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def started(make: Make, **kwargs) -> SharedAdmission:
    replica = make(**kwargs)
    await replica.start()
    return replica
