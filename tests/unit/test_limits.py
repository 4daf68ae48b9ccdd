"""Per-key limits (gateway/limits.py) on the ``limits`` memory storage: tokens per minute reserve
prompt + output at admission, so a parallel burst cannot take more than the window; settlement gives
back what was not used while its window lasts, and charges what was used beyond."""

from __future__ import annotations

import asyncio

import pytest

from gateway.auth.principal import Principal
from gateway.errors import GatewayError
from gateway.limits import RateLimiter, Ticket, storage_for

KEY = Principal(key_id="key_1", name="team", tpm=100)


async def admit(limiter: RateLimiter, tokens: int) -> Ticket:
    """A request of ``KEY`` counted and ``tokens`` reserved, as the exchange does."""
    ticket = await limiter.count(KEY)
    await limiter.reserve(ticket, tokens)
    return ticket


async def admitted(limiter: RateLimiter, tokens: int, requests: int) -> list[Ticket]:
    results = await asyncio.gather(*(admit(limiter, tokens) for _ in range(requests)), return_exceptions=True)
    return [r for r in results if not isinstance(r, BaseException)]


async def test_a_parallel_burst_cannot_take_more_than_the_window() -> None:
    """12 requests of 30 tokens (prompt estimate + max_tokens) at once against 100 a minute: 3 run."""
    limiter = RateLimiter(storage_for("memory://"))
    tickets = await admitted(limiter, 30, 12)
    assert len(tickets) == 3
    with pytest.raises(GatewayError) as refused:
        await admit(limiter, 30)
    assert refused.value.code == "rate_limit_tokens" and int(refused.value.headers["Retry-After"]) >= 1


async def test_what_a_request_did_not_use_is_given_back() -> None:
    limiter = RateLimiter(storage_for("memory://"))
    tickets = await admitted(limiter, 30, 3)
    for ticket in tickets:
        await limiter.settle(ticket, 10)  # used 10 of the 30 reserved
    assert len(await admitted(limiter, 30, 12)) == 2  # 30 used, 70 left: two more of 30


async def test_what_a_request_used_beyond_its_reservation_is_charged() -> None:
    limiter = RateLimiter(storage_for("memory://"))
    [ticket] = await admitted(limiter, 10, 1)
    await limiter.settle(ticket, 95)
    with pytest.raises(GatewayError):
        await admit(limiter, 10)


async def test_nothing_is_given_back_to_a_window_the_reservation_was_not_taken_from() -> None:
    limiter = RateLimiter(storage_for("memory://"), window_s=1)
    [ticket] = await admitted(limiter, 90, 1)
    await asyncio.sleep(1.1)  # the window the 90 were taken from has ended
    await limiter.settle(ticket, 0)
    assert len(await admitted(limiter, 50, 3)) == 2  # a fresh 100, not 190
