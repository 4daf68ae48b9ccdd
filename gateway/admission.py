"""Admission: at most ``slots`` requests upstream, the rest in a bounded FIFO queue.

The backend runs ``--max-num-seqs`` sequences (2 on the DGX Spark pair) over one shared KV pool; a
request sent beyond that only waits inside vLLM, out of the gateway's sight and fairness. So the gateway
holds the queue itself.

Invariants (tested):
- ``in_use <= slots`` at every instant; a freed slot is handed straight to the oldest waiter (no barging).
- Every :class:`Lease` is released exactly once, whatever path the request leaves by: a waiter that is
  cancelled (client gone) or times out leaves the queue, and one cancelled in the same tick it was granted
  a slot gives the slot back.

Pure asyncio: no FastAPI or httpx here.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque

from gateway.errors import GatewayError

#: Weight of the newest hold time in the moving average behind ``Retry-After``.
_EWMA_ALPHA = 0.2


class QueueFullError(GatewayError):
    """The wait queue is at capacity: 429 with ``Retry-After``."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            429,
            "The server is at capacity and its queue is full; retry later.",
            code="queue_full",
            headers={"Retry-After": str(retry_after_s)},
        )


class QueueTimeoutError(GatewayError):
    """The request waited ``queue_timeout_s`` without getting a slot: 429 with ``Retry-After``."""

    def __init__(self, waited_s: float, retry_after_s: int) -> None:
        super().__init__(
            429,
            f"No slot became free within {waited_s:.0f} s; retry later.",
            code="queue_timeout",
            headers={"Retry-After": str(retry_after_s)},
        )


class Lease:
    """One held slot. :meth:`release` is idempotent; ``queue_wait_s`` is the time spent queued (s).

    ``overlapped`` turns True if another lease was held at any moment while this one was: counters the
    backend keeps for all requests (vLLM's spec-decode totals) are then not this request's alone.
    """

    __slots__ = ("_admission", "_released", "granted_at", "overlapped", "queue_wait_s")

    def __init__(self, admission: Admission, queue_wait_s: float) -> None:
        self._admission = admission
        self._released = False
        self.queue_wait_s = queue_wait_s
        self.granted_at = time.monotonic()
        self.overlapped = False
        admission._hold(self)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Give the slot back (to the oldest waiter, if any). Safe to call more than once."""
        if not self._released:
            self._released = True
            self._admission._active.discard(self)
            self._admission._release(time.monotonic() - self.granted_at)


class Admission:
    """Slot pool with a bounded FIFO wait queue.

    Args:
        slots: requests allowed upstream at once (vLLM ``--max-num-seqs``).
        queue_max: requests allowed to wait; one more gets :class:`QueueFullError`.
        queue_timeout_s: longest wait in seconds before :class:`QueueTimeoutError`.
    """

    def __init__(self, slots: int, queue_max: int, queue_timeout_s: float) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.queue_max = queue_max
        self.queue_timeout_s = queue_timeout_s
        self.in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._active: set[Lease] = set()
        self._mean_hold_s = 10.0

    def _hold(self, lease: Lease) -> None:
        self._active.add(lease)
        if len(self._active) > 1:
            for held in self._active:
                held.overlapped = True

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a slot now."""
        return len(self._waiters)

    def retry_after_s(self) -> int:
        """Seconds a client should wait before retrying: the queue ahead drained at the mean hold time."""
        ahead = len(self._waiters) + 1
        return max(1, math.ceil(self._mean_hold_s * ahead / self.slots))

    async def acquire(self) -> Lease:
        """Wait for a slot and return its lease.

        Raises :class:`QueueFullError` at once if the queue is full, :class:`QueueTimeoutError` after
        ``queue_timeout_s``; cancellation (client gone) removes the waiter and leaks nothing.
        """
        start = time.monotonic()
        if self.in_use < self.slots and not self._waiters:
            self.in_use += 1
            return Lease(self, 0.0)
        if len(self._waiters) >= self.queue_max:
            raise QueueFullError(self.retry_after_s())
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._release(None)  # granted in the same tick we were cancelled: hand it on
            else:
                waiter.cancel()
                self._discard(waiter)
            if isinstance(exc, TimeoutError):
                raise QueueTimeoutError(time.monotonic() - start, self.retry_after_s()) from None
            raise
        return Lease(self, time.monotonic() - start)

    def _discard(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    def _release(self, held_s: float | None) -> None:
        if held_s is not None:
            self._mean_hold_s += _EWMA_ALPHA * (held_s - self._mean_hold_s)
        self.in_use -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_use += 1
                waiter.set_result(None)
                return
