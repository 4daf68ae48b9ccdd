"""Per-address throttles for traffic that carries no key: failed authentications, and the public routes.

A client address that fails authentication ``GATEWAY_AUTH_FAILURES_PER_MINUTE`` times in a window gets
429 ``too_many_failed_authentications`` (with ``Retry-After``) on every request that needs a key until
the window ends — before its credentials are looked at, so key guessing costs a window per few
guesses. The public routes (``/ready``, ``/metrics``; the liveness probe ``/health`` is not counted:
:data:`gateway.app.routes.LIVENESS`) answer an address at most ``GATEWAY_PUBLIC_REQUESTS_PER_MINUTE``
times a window (a probe every second is well within it).

Fixed windows on the ``limits`` storage the per-key limits use (memory, or Redis shared by
replicas), asynchronous like them. The address is the peer's, or the one a trusted proxy forwarded
(``GATEWAY_TRUSTED_PROXIES``). When that store fails, both throttles let the request through (a
warning logged): a readiness check must not fail with the store (a load balancer would take every
replica out at once), and a key is not guessed in the minutes a store is down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from limits import RateLimitItem, RateLimitItemPerMinute
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.errors import StorageError

from gateway.errors import GatewayError
from gateway.limits.rate import retry_after_s

log = logging.getLogger("gateway.errors")


class AddressThrottle:
    """The two per-address limits; ``None`` for a limit turns it off."""

    def __init__(
        self, storage: Storage, failures_per_minute: int | None, public_per_minute: int | None
    ) -> None:
        self._limiter = FixedWindowRateLimiter(storage)
        self._failures = RateLimitItemPerMinute(failures_per_minute) if failures_per_minute else None
        self._public = RateLimitItemPerMinute(public_per_minute) if public_per_minute else None

    async def check_failures(self, address: str) -> None:
        """429 if ``address`` has used up its failed authentications in this window."""
        item = self._failures
        if item is not None and not await self._within(self._limiter.test(item, "auth-failures", address)):
            message = "Too many failed authentications from this address; retry later."
            raise await self._refusal(
                "too_many_failed_authentications", message, item, "auth-failures", address
            )

    async def failed(self, address: str) -> None:
        """Count one failed authentication of ``address``."""
        if self._failures is not None:
            await self._within(self._limiter.hit(self._failures, "auth-failures", address))

    async def public(self, address: str) -> None:
        """Count one public request of ``address``; 429 ``rate_limit_address`` past the limit."""
        item = self._public
        if item is not None and not await self._within(self._limiter.hit(item, "public", address)):
            message = f"Rate limit reached for this address ({item.amount} per minute); retry later."
            raise await self._refusal("rate_limit_address", message, item, "public", address)

    @staticmethod
    async def _within(check: Awaitable[bool]) -> bool:
        """``check``'s answer: whether the address is within its limit; True when the store fails."""
        try:
            return await check
        except StorageError:
            log.warning("the per-address throttle's store failed: the request is let through")
            return True

    async def _refusal(
        self, code: str, message: str, item: RateLimitItem, what: str, address: str
    ) -> GatewayError:
        stats = await self._limiter.get_window_stats(item, what, address)
        return GatewayError(code, message, headers={"Retry-After": str(retry_after_s(stats.reset_time))})
