"""Admission: at most ``slots`` sequences upstream; the rest wait in per-key queues served fairly.

The backend runs ``--max-num-seqs`` sequences (2 on the DGX Spark pair) over one shared KV pool; a
request sent beyond that only waits inside vLLM, out of the gateway's sight and fairness. So the
gateway holds the queue itself. A request asking for ``n`` answers is ``n`` sequences and takes ``n``
slots.

Fairness: each key has its own FIFO queue; keys with waiters take turns (round robin), a key with
``priority`` p getting up to p grants per turn (weighted round robin). A key flooding 100 requests
therefore delays another key's single request by at most one slot turn, and no key starves. A key at
its ``max_concurrency`` is skipped until one of its requests ends. The queue keeps room for keys
with nothing waiting: a key that already waits may not take the last :attr:`Admission.reserve`
places, so a few keys filling their own bounds cannot lock every other key out.

Invariants (tested):
- ``in_use <= slots`` at every instant; a freed slot is handed straight to the next waiter (no barging).
- Every :class:`Lease` is released exactly once, whatever path the request leaves by: a waiter that is
  cancelled (client gone) or times out leaves its queue, and one cancelled in the same tick it was
  granted a slot gives the slot back.

Pure asyncio: no FastAPI or httpx here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from gateway.errors import GatewayError

#: Weight of the newest hold time in the moving average behind ``Retry-After``.
_EWMA_ALPHA = 0.2


class QueueFullError(GatewayError):
    """The wait queue (total or this key's) is at capacity: 429 with ``Retry-After``."""

    def __init__(self, retry_after_s: int, per_key: bool = False) -> None:
        what = "this key's queue" if per_key else "its queue"
        super().__init__(
            "queue_full",
            f"The server is at capacity and {what} is full; retry later.",
            headers={"Retry-After": str(retry_after_s)},
        )


class QueueTimeoutError(GatewayError):
    """The request waited ``queue_timeout_s`` without getting a slot: 429 with ``Retry-After``."""

    def __init__(self, waited_s: float, retry_after_s: int) -> None:
        super().__init__(
            "queue_timeout",
            f"No slot became free within {waited_s:.0f} s; retry later.",
            headers={"Retry-After": str(retry_after_s)},
        )


@dataclass(eq=False, slots=True)
class Waiter:
    """One queued request of ``key``; ``future`` resolves when it is granted a slot. ``settled`` turns
    True once the waiter became a :class:`Lease` or was given up (:meth:`Admission.abandon`)."""

    key: str
    priority: int
    max_concurrency: int | None
    future: asyncio.Future[None]
    sequences: int = 1
    enqueued_at: float = field(default_factory=time.monotonic)
    settled: bool = False


class Lease:
    """One held slot. :meth:`release` is idempotent; ``queue_wait_s`` is the time spent queued (s).

    ``overlapped`` turns True if another lease was held at any moment while this one was: counters the
    backend keeps for all requests (vLLM's spec-decode totals) are then not this request's alone.
    """

    __slots__ = ("_admission", "_released", "granted_at", "key", "overlapped", "queue_wait_s", "sequences")

    def __init__(self, admission: Admission, key: str, queue_wait_s: float, sequences: int = 1) -> None:
        self._admission = admission
        self._released = False
        self.key = key
        self.queue_wait_s = queue_wait_s
        self.sequences = sequences
        self.granted_at = time.monotonic()
        self.overlapped = False
        admission._hold(self)

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> bool:
        """Give the slot back (to the next waiter, if any). Safe to call more than once.

        Returns True if this call handed the slot straight to a waiting request (whose task resumes
        in the next event-loop step), False if the slot went back to the pool or was already released.
        """
        if self._released:
            return False
        self._released = True
        admission = self._admission
        grants = admission.grants
        admission._unhold(self, time.monotonic() - self.granted_at)
        return admission.grants > grants


class Admission:
    """Slot pool with bounded, fair per-key wait queues.

    Args:
        slots: requests allowed upstream at once (vLLM ``--max-num-seqs``).
        queue_max: requests allowed to wait in total; one more gets :class:`QueueFullError`.
        queue_timeout_s: longest wait in seconds before :class:`QueueTimeoutError`.
        queue_max_per_key: requests one key may have waiting (None: only the total bound).

    ``in_use`` counts sequences holding slots; ``grants`` counts every grant to a waiter so far;
    ``reserve`` is the queue room kept for keys with nothing waiting (a quarter of ``queue_max``).
    """

    def __init__(
        self, slots: int, queue_max: int, queue_timeout_s: float, queue_max_per_key: int | None = None
    ) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.queue_max = queue_max
        self.queue_timeout_s = queue_timeout_s
        self.queue_max_per_key = queue_max_per_key
        self.in_use = 0
        self.grants = 0
        self.reserve = max(1, queue_max // 4)
        self._queues: dict[str, deque[Waiter]] = {}
        self._turns: deque[str] = deque()  # keys with waiters, in serving order
        self._credit: dict[str, int] = {}  # grants left in the current turn of the key at the front
        self._active: set[Lease] = set()
        self._active_per_key: Counter[str] = Counter()
        self._waiting = 0
        self._mean_hold_s = 10.0

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a slot now."""
        return self._waiting

    def retry_after_s(self) -> int:
        """Seconds a client should wait before retrying: the queue ahead drained at the mean hold time."""
        return max(1, math.ceil(self._mean_hold_s * (self._waiting + 1) / self.slots))

    def status(self) -> dict[str, object]:
        """Live view for ``/admin/status``: slots, and per key its requests in flight and waiting."""
        keys = set(self._queues) | set(self._active_per_key)
        return {
            "slots_total": self.slots,
            "slots_in_use": self.in_use,
            "queue_depth": self._waiting,
            "keys": {
                key: {"in_flight": self._active_per_key[key], "waiting": len(self._queues.get(key, ()))}
                for key in sorted(keys)
            },
        }

    def position(self, waiter: Waiter) -> int:
        """Estimated grants before ``waiter`` (1 = next), from its place in its key's queue and its key's
        place in the rotation (priorities ignored)."""
        queue = self._queues.get(waiter.key)
        if not queue or waiter not in queue:
            return 0
        index = next(i for i, w in enumerate(queue) if w is waiter)
        return index * max(1, len(self._turns)) + self._turns.index(waiter.key) + 1

    def _eligible(self, key: str, max_concurrency: int | None) -> bool:
        return max_concurrency is None or self._active_per_key[key] < max_concurrency

    def enqueue(
        self, key: str = "", priority: int = 1, max_concurrency: int | None = None, sequences: int = 1
    ) -> Lease | Waiter:
        """Take ``sequences`` slots now if fairness allows, else join ``key``'s queue. Raises
        :class:`QueueFullError` (the queue, the key's bound, or the reserve a key that waits already may
        not take), ``ValueError`` for more sequences than there are slots."""
        if not 1 <= sequences <= self.slots:
            raise ValueError(f"a request of {sequences} sequences can never hold {self.slots} slots")
        if self.in_use + sequences <= self.slots and not self._turns and self._eligible(key, max_concurrency):
            self._grant_slot(key, sequences)
            return Lease(self, key, 0.0, sequences)
        waits = len(self._queues.get(key, ()))
        if self._waiting >= self.queue_max - (self.reserve if waits else 0):
            raise QueueFullError(self.retry_after_s(), per_key=waits > 0)
        if self.queue_max_per_key is not None and waits >= self.queue_max_per_key:
            raise QueueFullError(self.retry_after_s(), per_key=True)
        queue = self._queues.setdefault(key, deque())
        waiter = Waiter(
            key, max(1, priority), max_concurrency, asyncio.get_running_loop().create_future(), sequences
        )
        queue.append(waiter)
        self._waiting += 1
        if key not in self._credit:
            self._turns.append(key)
            self._credit[key] = waiter.priority
        self._dispatch()
        return waiter

    async def wait(self, waiter: Waiter) -> Lease:
        """Wait for ``waiter``'s slot. Raises :class:`QueueTimeoutError`; cancellation leaks nothing."""
        try:
            async with asyncio.timeout(self.queue_timeout_s - (time.monotonic() - waiter.enqueued_at)):
                # not through asyncio.shield: that resumes the task a loop step after the grant, and a
                # cancel that cancels the future itself is just what the handler below expects
                await waiter.future
        except BaseException as exc:
            self.abandon(waiter)
            if isinstance(exc, TimeoutError):
                waited = time.monotonic() - waiter.enqueued_at
                raise QueueTimeoutError(waited, self.retry_after_s()) from None
            raise
        waiter.settled = True
        return Lease(self, waiter.key, time.monotonic() - waiter.enqueued_at, waiter.sequences)

    def abandon(self, waiter: Waiter) -> None:
        """Give up ``waiter``'s place: out of its queue, or, if it was granted a slot that no
        :class:`Lease` holds, the slot to the next. Idempotent; nothing for a waiter that became a lease."""
        if waiter.settled:
            return
        waiter.settled = True
        if waiter.future.done() and not waiter.future.cancelled():
            self._unhold_slot(waiter.key, waiter.sequences)  # granted in the tick it was given up: hand it on
        else:
            waiter.future.cancel()
            self._discard(waiter)

    async def acquire(self, key: str = "", priority: int = 1, max_concurrency: int | None = None) -> Lease:
        """Wait for a slot and return its lease (:meth:`enqueue` then :meth:`wait`)."""
        entry = self.enqueue(key, priority, max_concurrency)
        return entry if isinstance(entry, Lease) else await self.wait(entry)

    def _discard(self, waiter: Waiter) -> None:
        queue = self._queues.get(waiter.key)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        self._waiting -= 1
        if not queue:
            self._drop_key(waiter.key)

    def _drop_key(self, key: str) -> None:
        del self._queues[key]
        self._credit.pop(key, None)
        if key in self._turns:
            self._turns.remove(key)

    def _dispatch(self) -> None:
        """Grant free slots to waiters, in weighted round-robin order over eligible keys."""
        skipped = 0
        while self.in_use < self.slots and self._turns and skipped < len(self._turns):
            key = self._turns[0]
            queue = self._queues[key]
            head = queue[0]
            if head.future.done():  # cancelled (client gone, queue timeout), its task not yet run: skip it
                self._discard(head)
                continue
            if self.in_use + head.sequences > self.slots:
                return  # it waits for enough slots; the ones behind it keep their turn order
            if not self._eligible(key, head.max_concurrency):
                self._turns.rotate(-1)
                skipped += 1
                continue
            skipped = 0
            queue.popleft()
            self._waiting -= 1
            self._grant_slot(key, head.sequences)
            self.grants += 1
            head.future.set_result(None)
            self._credit[key] -= 1
            if not queue:
                self._drop_key(key)
            elif self._credit[key] <= 0:
                self._credit[key] = queue[0].priority
                self._turns.rotate(-1)

    def _grant_slot(self, key: str, sequences: int) -> None:
        # counted at grant, so max_concurrency holds before the waiter's Lease exists
        self.in_use += sequences
        self._active_per_key[key] += 1

    def _hold(self, lease: Lease) -> None:
        self._active.add(lease)
        if len(self._active) > 1:
            for held in self._active:
                held.overlapped = True

    def _unhold(self, lease: Lease, held_s: float) -> None:
        self._active.discard(lease)
        self._mean_hold_s += _EWMA_ALPHA * (held_s - self._mean_hold_s)
        self._unhold_slot(lease.key, lease.sequences)

    def _unhold_slot(self, key: str, sequences: int) -> None:
        self.in_use -= sequences
        self._active_per_key[key] -= 1
        if self._active_per_key[key] <= 0:
            del self._active_per_key[key]
        self._dispatch()
