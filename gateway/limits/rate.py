"""Per-key rate limits: requests per minute and tokens per minute, shared across replicas via Redis.

Built on the ``limits`` library (the engine slowapi runs on) used directly: slowapi's decorator
model fixes limits per route at import time and writes its own header names, while these limits are
per key, change at runtime (PATCH /admin/keys) and answer with OpenAI's headers
(``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; OpenAI API docs, "Rate limits"), on the
answer and on a 429 alike (the ticket's :attr:`Ticket.headers` go on every answer after it was taken).

Tokens per minute are reserved at admission — the prompt's estimate plus the whole output budget, in
one atomic increment, so a parallel burst cannot admit more than the window holds — and settled
after the response against real usage (TensorZero's ticket pattern): what was reserved and not used
is given back (while the window it was taken from lasts), what was used beyond it is charged.
Windows are fixed minutes, as slowapi's.
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


def reset_after(seconds: float) -> str:
    """A time until a window resets as OpenAI's ``x-ratelimit-reset-*`` headers write it (API docs,
    "Rate limits": ``1s``, ``6m0s``; ``12ms`` below a second): Go's ``time.Duration`` text, to the
    millisecond (rounded up) — ``120ms``, ``1s``, ``59.5s``, ``6m0s``, ``1h0m0s``; ``0s`` when reset."""
    ms = max(0, math.ceil(round(seconds * 1000, 6)))  # round first: 0.12 s is 120 ms, not 121
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def retry_after_s(reset_time: float) -> int:
    """``Retry-After`` for a window that resets at ``reset_time`` (epoch s): whole seconds, at least 1."""
    return max(1, math.ceil(reset_time - time.time()))


#: Unused tokens are given back only while their window has at least this long left, s: a refund
#: that landed in the next window would let it hold more than its budget.
_REFUND_MARGIN_S = 0.05


@dataclass(slots=True)
class Ticket:
    """One admitted request's borrowing: ``reserved`` tokens charged up front in the window that resets
    at ``window_reset`` (epoch s), headers to send."""

    principal: Principal
    reserved: int
    headers: dict[str, str] = field(default_factory=dict)
    window_reset: float = 0.0


class RateLimiter:
    """Checks and charges one key's requests/min and tokens/min."""

    def __init__(self, storage: Storage, window_s: int = 60) -> None:
        self._storage = storage
        self._limiter = FixedWindowRateLimiter(storage)
        self._window_s = window_s

    def _item(self, amount: int) -> RateLimitItem:
        return RateLimitItemPerSecond(amount, self._window_s)

    async def _refuse(self, what: str, item: RateLimitItem, key: str, ticket: Ticket) -> GatewayError:
        """The 429 of a spent window: ``Retry-After`` (whole seconds) and the ``x-ratelimit-*`` headers
        of the ticket's windows so far and of this one, as a success would carry them."""
        headers = dict(ticket.headers)
        retry = retry_after_s(await self._headers(what, item, key, headers))
        headers["Retry-After"] = str(retry)
        return GatewayError(
            f"rate_limit_{what}",
            f"Rate limit reached for {what} ({item.amount} per {self._window_s} s); retry in {retry} s.",
            headers=headers,
        )

    async def _headers(self, what: str, item: RateLimitItem, key: str, out: dict[str, str]) -> float:
        """Write the window's ``x-ratelimit-*`` headers into ``out``; return its reset time (epoch s)."""
        stats = await self._limiter.get_window_stats(item, what, key)
        out[f"x-ratelimit-limit-{what}"] = str(item.amount)
        out[f"x-ratelimit-remaining-{what}"] = str(max(0, stats.remaining))
        out[f"x-ratelimit-reset-{what}"] = reset_after(stats.reset_time - time.time())
        return float(stats.reset_time)

    async def count(self, principal: Principal) -> Ticket:
        """Count one request against the key's requests per minute (429 with ``Retry-After`` when
        spent): taken as soon as the caller is known, before its body is read."""
        ticket = Ticket(principal, 0)
        key = principal.key_id
        if principal.rpm:
            item = self._item(principal.rpm)
            if not await self._limiter.hit(item, "requests", key):
                raise await self._refuse("requests", item, key, ticket)
            await self._headers("requests", item, key, ticket.headers)
        return ticket

    async def reserve(self, ticket: Ticket, tokens: int) -> None:
        """Reserve ``tokens`` (prompt estimate + output budget) of the key's tokens per minute (429
        with ``Retry-After`` when they do not fit).

        A reservation larger than the whole budget is capped at it, so one big request per window
        passes. The reservation is one increment, given back at once when it does not fit, so two
        requests at the same moment cannot both take the window's last tokens.
        """
        principal = ticket.principal
        key = principal.key_id
        if principal.tpm:
            item = self._item(principal.tpm)
            reserve = min(max(1, tokens), principal.tpm)
            if not await self._limiter.hit(item, "tokens", key, cost=reserve):
                await self._limiter.hit(item, "tokens", key, cost=-reserve)
                raise await self._refuse("tokens", item, key, ticket)
            ticket.reserved = reserve
            ticket.window_reset = await self._headers("tokens", item, key, ticket.headers)

    async def describe(self, ticket: Ticket) -> None:
        """Write the key's tokens-per-minute headers into ``ticket`` without charging anything: a
        request answered before its reservation (refused for the queue) shows them too."""
        principal = ticket.principal
        if principal.tpm and "x-ratelimit-limit-tokens" not in ticket.headers:
            await self._headers("tokens", self._item(principal.tpm), principal.key_id, ticket.headers)

    async def standing(self, principal: Principal) -> dict[str, str]:
        """The key's ``x-ratelimit-*`` headers now, nothing charged (``GET /v1/key``)."""
        headers: dict[str, str] = {}
        for what, limit in (("requests", principal.rpm), ("tokens", principal.tpm)):
            if limit:
                await self._headers(what, self._item(limit), principal.key_id, headers)
        return headers

    async def settle(self, ticket: Ticket, used_tokens: int) -> None:
        """Settle the reservation against ``used_tokens``: charge what was used beyond it; give back
        what was not used if the window it was taken from still runs (a later one owes it nothing)."""
        tpm = ticket.principal.tpm
        if not tpm or not ticket.reserved or used_tokens == ticket.reserved:
            return
        if used_tokens < ticket.reserved and time.time() > ticket.window_reset - _REFUND_MARGIN_S:
            return
        await self._limiter.hit(
            self._item(tpm), "tokens", ticket.principal.key_id, cost=used_tokens - ticket.reserved
        )
