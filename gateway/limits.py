"""Per-key rate limits: requests per minute and tokens per minute, shared across replicas via Redis.

Built on the ``limits`` library (the engine slowapi runs on) used directly: slowapi's decorator
model fixes limits per route at import time and writes its own header names, while these limits are
per key, change at runtime (PATCH /admin/keys) and answer with OpenAI's headers
(``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; OpenAI API docs, "Rate limits").

Tokens per minute are borrowed up front with an estimate of the prompt and settled after the response
against real usage (TensorZero's ticket pattern): the window then holds what was really used, and a
key over its budget is refused at the next admission. Windows are fixed minutes, as slowapi's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import storage_from_string

from gateway.auth.principal import Principal
from gateway.errors import GatewayError


def storage_for(uri: str) -> Storage:
    """``memory://`` or ``redis://host:port/db`` -> an async ``limits`` storage (redis-py client)."""
    async_uri = uri if uri.startswith("async+") else "async+" + uri
    options = {"implementation": "redispy"} if "redis" in async_uri.split("://", 1)[0] else {}
    storage = storage_from_string(async_uri, **options)
    assert isinstance(storage, Storage)
    return storage


def _reset(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``42s``, ``1m0s``."""
    whole = max(1, math.ceil(seconds))
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


@dataclass(slots=True)
class Ticket:
    """One admitted request's borrowing: ``estimate`` tokens charged up front, headers to send."""

    principal: Principal
    estimate: int
    headers: dict[str, str] = field(default_factory=dict)


class RateLimiter:
    """Checks and charges one key's requests/min and tokens/min."""

    def __init__(self, storage: Storage, window_s: int = 60) -> None:
        self._storage = storage
        self._limiter = FixedWindowRateLimiter(storage)
        self._window_s = window_s

    def _item(self, amount: int) -> RateLimitItem:
        return RateLimitItemPerSecond(amount, self._window_s)

    async def _refuse(self, what: str, item: RateLimitItem, key: str) -> GatewayError:
        stats = await self._limiter.get_window_stats(item, what, key)
        retry = max(1, math.ceil(stats.reset_time - time.time()))
        return GatewayError(
            f"rate_limit_{what}",
            f"Rate limit reached for {what} ({item.amount} per {self._window_s} s); retry in {retry} s.",
            headers={"Retry-After": str(retry)},
        )

    async def _headers(self, what: str, item: RateLimitItem, key: str, out: dict[str, str]) -> None:
        stats = await self._limiter.get_window_stats(item, what, key)
        out[f"x-ratelimit-limit-{what}"] = str(item.amount)
        out[f"x-ratelimit-remaining-{what}"] = str(max(0, stats.remaining))
        out[f"x-ratelimit-reset-{what}"] = _reset(stats.reset_time - time.time())

    async def admit(self, principal: Principal, estimate: int) -> Ticket:
        """Count one request and borrow ``estimate`` tokens; 429 (``Retry-After``) if either is spent.

        An estimate larger than the whole budget is capped at it, so one big request per window passes.
        """
        ticket = Ticket(principal, 0)
        key = principal.key_id
        if principal.rpm:
            item = self._item(principal.rpm)
            if not await self._limiter.hit(item, "requests", key):
                raise await self._refuse("requests", item, key)
            await self._headers("requests", item, key, ticket.headers)
        if principal.tpm:
            item = self._item(principal.tpm)
            ticket.estimate = min(max(1, estimate), principal.tpm)
            if not await self._limiter.test(item, "tokens", key, cost=ticket.estimate):
                raise await self._refuse("tokens", item, key)
            await self._limiter.hit(item, "tokens", key, cost=ticket.estimate)
            await self._headers("tokens", item, key, ticket.headers)
        return ticket

    async def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """Charge what the request used beyond its estimate (fixed windows can't refund)."""
        tpm = ticket.principal.tpm
        if tpm and used_tokens > ticket.estimate:
            await self._limiter.hit(
                self._item(tpm),
                "tokens",
                ticket.principal.key_id,
                cost=used_tokens - ticket.estimate,
            )
