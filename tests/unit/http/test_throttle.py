"""The per-address throttles (gateway/http/throttle.py) on a ``limits`` store that fails: they let the
request through rather than fail it (a readiness check must not go down with Redis)."""

from __future__ import annotations

from gateway.errors import GatewayError
from gateway.http.throttle import AddressThrottle
from gateway.limits.rate import storage_for
from tests.support.servers import free_port


async def test_a_store_that_fails_lets_every_request_through() -> None:
    down = storage_for(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    throttle = AddressThrottle(down, failures_per_minute=1, public_per_minute=1)
    for _ in range(3):
        await throttle.public("10.0.0.1")  # no 429, no 500
        await throttle.failed("10.0.0.1")
        await throttle.check_failures("10.0.0.1")


async def test_a_store_that_answers_still_throttles() -> None:
    throttle = AddressThrottle(storage_for("memory://"), failures_per_minute=1, public_per_minute=1)
    await throttle.public("10.0.0.2")
    try:
        await throttle.public("10.0.0.2")
    except GatewayError as refused:
        assert refused.code == "rate_limit_address" and int(refused.headers["Retry-After"]) >= 1
    else:
        raise AssertionError("the second public request of the minute was let through")
