"""A queued request (:class:`Waiter`) and an admitted one (:class:`Lease`), as every admission
(in-process, :mod:`~gateway.admission.scheduler`; shared in Redis, :mod:`~gateway.admission.shared`)
hands them to the request pipeline. Pure: no I/O."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Protocol

from gateway.admission.capacity import Need, Reason
from gateway.admission.errors import QueueTimeoutError


class LeaseOwner(Protocol):
    """The admission a :class:`Lease` belongs to: ``grants`` counts grants to waiters so far; ``hold``
    and ``unhold`` are told when a lease starts and ends (after ``held_s`` seconds)."""

    grants: int

    def hold(self, lease: Lease) -> None: ...

    def unhold(self, lease: Lease, held_s: float) -> None: ...


@dataclass(eq=False, slots=True)
class Waiter:
    """One queued request of ``key``; ``future`` resolves when it is admitted. ``settled`` turns True
    once the waiter became a :class:`Lease` or was given up (:meth:`Admission.abandon`).

    ``reason``: what it waits for now (since ``reason_since``, monotonic s); ``waited_for``: seconds
    it waited for each reason before; ``passes``: grants that went past it while it waited (it did
    not fit, or one of a lower tag that came later went first)."""

    key: str
    priority: int
    max_concurrency: int | None
    future: asyncio.Future[None]
    need: Need
    timeout_s: float
    enqueued_at: float = field(default_factory=time.monotonic)
    settled: bool = False
    grant: int | None = None
    passes: int = 0
    reason: Reason | None = None
    reason_since: float = 0.0
    waited_for: dict[str, float] = field(default_factory=dict)
    ticket: str = ""
    """Its id in a shared queue (:mod:`~gateway.admission.shared`); "" in-process."""
    place: int = 0
    """Grants before it (1 = next) when a shared queue last said (0: not known)."""
    tag: float = 0.0
    """Its finish tag in the fair queue (:mod:`~gateway.admission.scheduler`): virtual seconds of
    expected service; the lowest that fits goes first."""
    order: int = 0
    """Its place in arrival order: ties of ``tag`` go to the earlier."""

    def note(self, reason: Reason | None, now: float) -> None:
        """It waits for ``reason`` from ``now`` on (None: no longer waits)."""
        if reason is self.reason:
            return
        if self.reason is not None:
            name = self.reason.value
            self.waited_for[name] = self.waited_for.get(name, 0.0) + now - self.reason_since
        self.reason, self.reason_since = reason, now


class Lease:
    """One admitted request. :meth:`release` is idempotent; ``queue_wait_s`` is the time spent queued
    (s), ``waited_for`` that time split by :class:`Reason` (``{"kv": 12.5, "slot": 0.3}``).

    ``overlapped`` turns True if another lease was held at any moment while this one was: counters the
    backend keeps for all requests (vLLM's spec-decode totals) are then not this request's alone.
    ``ticket``: its id in a shared queue ("" in-process); with ``grant``, its fence, it names the lease.
    ``preempted`` is set when admission wants the slot back for an interactive request: a batch
    request's, or the slot of one whose prefill runs (``prefilling``, set by its holder while a
    streamed request waits for its first output, and still set when it is released cut in its
    prefill) for a much shorter one due before it; its holder aborts the request and releases the
    lease (:class:`~gateway.admission.Admission`). ``tag``: its finish tag in the fair queue
    (in-process admission), which a preempted request queues again with.
    """

    __slots__ = (
        "_admission", "_released", "grant", "granted_at", "key", "need", "overlapped", "preempted",
        "prefilling", "queue_wait_s", "tag", "ticket", "waited_for",
    )  # fmt: skip

    def __init__(
        self,
        admission: LeaseOwner,
        key: str,
        grant: int,
        need: Need,
        queue_wait_s: float = 0.0,
        waited_for: dict[str, float] | None = None,
        ticket: str = "",
        tag: float = 0.0,
    ) -> None:
        self._admission = admission
        self.ticket = ticket
        self.tag = tag
        self.prefilling = False
        self._released = False
        self.key = key
        self.grant = grant
        self.need = need
        self.queue_wait_s = queue_wait_s
        self.waited_for = waited_for or {}
        self.granted_at = time.monotonic()
        self.overlapped = False
        self.preempted = asyncio.Event()
        admission.hold(self)

    @property
    def sequences(self) -> int:
        return self.need.sequences

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> bool:
        """Give the grant back (to the waiters). Safe to call more than once.

        Returns True if this call admitted a waiting request (whose task resumes in the next
        event-loop step), False if nothing was waiting that fits, or it was already released.
        """
        if self._released:
            return False
        self._released = True
        admission = self._admission
        grants = admission.grants
        admission.unhold(self, time.monotonic() - self.granted_at)
        return admission.grants > grants


class Queue(LeaseOwner, Protocol):
    """An admission a waiter waits in: it gives places up and says when to retry."""

    def abandon(self, waiter: Waiter) -> None: ...

    def retry_after_s(self) -> int: ...


async def lease_when_granted(queue: Queue, waiter: Waiter) -> Lease:
    """Wait for ``waiter``'s grant (its ``future``), within its queue timeout, and return the lease.
    Raises :class:`QueueTimeoutError` (the place given up); a cancellation gives it up too, and a
    grant that came in the same tick goes on (``queue.abandon``)."""
    try:
        async with asyncio.timeout(waiter.timeout_s - (time.monotonic() - waiter.enqueued_at)):
            # not through asyncio.shield: that resumes the task a loop step after the grant, and a
            # cancel that cancels the future itself is just what the handler below expects
            await waiter.future
    except BaseException as exc:
        reason = waiter.reason
        queue.abandon(waiter)
        if isinstance(exc, TimeoutError):
            waited = time.monotonic() - waiter.enqueued_at
            raise QueueTimeoutError(waited, queue.retry_after_s(), reason or Reason.SLOT) from None
        raise
    waiter.settled = True
    assert waiter.grant is not None
    waited = time.monotonic() - waiter.enqueued_at
    return Lease(
        queue, waiter.key, waiter.grant, waiter.need, waited, waiter.waited_for, waiter.ticket, waiter.tag
    )
