"""The backend calls that come before admission or need none: prompt counts (vLLM's ``/tokenize``
before a large request is admitted, ``/v1/messages/count_tokens`` for a client), bounded apart from
the slots.

A count costs the backend a tokenization (seconds for a 1M-token prompt) outside the
``--max-num-seqs`` bound the slots keep, so an unbounded flood of them slows every admitted request.
Per backend, at most ``GATEWAY_COUNT_CONCURRENCY`` counts are in flight, at most
``GATEWAY_COUNT_CONCURRENCY_PER_KEY`` of them one key's, over a connection pool of their own (an
admitted request never waits behind a count for a connection). Per gateway process: with replicas,
each keeps its own bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

from gateway.backends.upstream import Upstream
from gateway.errors import GatewayError

#: Seconds a client is told to wait when its key has its counts in flight already.
RETRY_AFTER_S = 1


class CountBusy(GatewayError):
    """The key has ``GATEWAY_COUNT_CONCURRENCY_PER_KEY`` counts in flight on this backend already."""

    def __init__(self, per_key: int) -> None:
        super().__init__(
            "rate_limit_requests",
            f"This API key has {per_key} token count(s) in flight already; retry when one has ended.",
            headers={"retry-after": str(RETRY_AFTER_S)},
        )


class CountGate:
    """One backend's bound on counts: ``limit`` in flight, ``per_key`` of one key, on ``upstream``
    (a client of its own to the backend)."""

    def __init__(self, upstream: Upstream, limit: int, per_key: int) -> None:
        self.upstream = upstream
        self._room = asyncio.Semaphore(limit)
        self._per_key = per_key
        self._held: Counter[str] = Counter()

    @property
    def in_flight(self) -> int:
        """Counts holding the bound, or waiting for it, now."""
        return self._held.total()

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[Upstream]:
        """Hold one of the backend's counts for ``key`` (waiting in line for one: FIFO), yielding the
        client to count with. Raises :class:`CountBusy` at once when ``key`` has its share in flight."""
        if self._held[key] >= self._per_key:
            raise CountBusy(self._per_key)
        self._held[key] += 1
        try:
            async with self._room:
                yield self.upstream
        finally:
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]
