"""Graceful drain: after SIGTERM new requests get 503 while the ones in flight finish.

The drain follows Envoy's listener drain (``--drain-time-s``): the process keeps its listening socket
open while draining, so a client (or a load balancer) that still sends a request gets a clear
``503 draining`` with ``Retry-After`` and ``Connection: close`` instead of a refused connection, and
``/ready`` turns 503 so health-checking balancers take the replica out. Requests already in flight
— queued for a slot or streaming — run to their end; when none is left, or when the grace period
(``GATEWAY_SHUTDOWN_GRACE_S``) is over, :mod:`gateway.cli.serve` lets uvicorn shut down, which cancels
what still runs (slots are released and usage rows recorded by the cancelled requests' own exits)
and flushes the usage ledger.

``/health`` and ``/metrics`` stay open during the drain: the process is alive and scrapes continue.
The edge middleware (:mod:`gateway.http.edge`) refuses and counts requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from gateway.errors import GatewayError

#: Paths served normally while draining (liveness and scrapes, never counted as in flight).
EXEMPT_PATHS = frozenset({"/health", "/metrics"})
RETRY_AFTER_S = 5


def draining_error() -> GatewayError:
    """The 503 a request gets while the gateway drains."""
    return GatewayError(
        "draining",
        "The gateway is shutting down; retry the request (another replica, or this one after its restart).",
        headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
    )


class Drain:
    """Drain state shared by the server (which starts the drain on a signal) and the edge middleware.

    ``in_flight`` counts HTTP requests between their first ASGI call and the end of their response
    body (a stream counts until its last byte), exempt paths excluded.
    """

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def begin(self) -> None:
        """Start draining: from now on new requests are refused with 503."""
        self.draining = True

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is in flight, at most ``timeout_s`` seconds; True if it got there."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        return self._idle.is_set()

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Count one request in flight for the duration of the ``with`` block."""
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
