"""Admission: slot bound, FIFO hand-off, queue bound, timeout, and no leak on cancellation."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission import Admission, QueueFullError, QueueTimeoutError


async def test_never_more_than_slots_and_fifo_order() -> None:
    admission = Admission(slots=2, queue_max=10, queue_timeout_s=5)
    order: list[int] = []
    peak = 0

    async def worker(i: int) -> None:
        nonlocal peak
        lease = await admission.acquire()
        order.append(i)
        peak = max(peak, admission.in_use)
        await asyncio.sleep(0.01)
        lease.release()

    tasks = []
    for i in range(8):
        tasks.append(asyncio.create_task(worker(i)))
        await asyncio.sleep(0)  # enqueue in index order
    await asyncio.gather(*tasks)
    assert peak == 2
    assert order == list(range(8))
    assert admission.in_use == 0 and admission.queue_depth == 0


async def test_queue_full_is_429_with_retry_after() -> None:
    admission = Admission(slots=1, queue_max=1, queue_timeout_s=5)
    held = await admission.acquire()
    waiting = asyncio.create_task(admission.acquire())
    await asyncio.sleep(0)
    with pytest.raises(QueueFullError) as info:
        await admission.acquire()
    assert info.value.status == 429
    assert int(info.value.headers["Retry-After"]) >= 1
    held.release()
    (await waiting).release()
    assert admission.in_use == 0


async def test_queue_timeout_leaves_no_waiter() -> None:
    admission = Admission(slots=1, queue_max=4, queue_timeout_s=0.05)
    held = await admission.acquire()
    with pytest.raises(QueueTimeoutError) as info:
        await admission.acquire()
    assert info.value.code == "queue_timeout" and "Retry-After" in info.value.headers
    assert admission.queue_depth == 0
    held.release()
    assert admission.in_use == 0


async def test_cancelled_waiter_leaves_queue_and_slot_goes_to_next() -> None:
    admission = Admission(slots=1, queue_max=4, queue_timeout_s=5)
    held = await admission.acquire()
    gone = asyncio.create_task(admission.acquire())
    nxt = asyncio.create_task(admission.acquire())
    await asyncio.sleep(0)
    assert admission.queue_depth == 2
    gone.cancel()
    await asyncio.sleep(0)
    assert admission.queue_depth == 1
    held.release()
    lease = await nxt
    assert admission.in_use == 1
    lease.release()
    assert admission.in_use == 0


async def test_cancelled_in_the_tick_it_was_granted_hands_the_slot_on() -> None:
    admission = Admission(slots=1, queue_max=4, queue_timeout_s=5)
    held = await admission.acquire()
    granted_then_cancelled = asyncio.create_task(admission.acquire())
    nxt = asyncio.create_task(admission.acquire())
    await asyncio.sleep(0)
    held.release()  # grants the first waiter's future ...
    granted_then_cancelled.cancel()  # ... but its task is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await granted_then_cancelled
    lease = await asyncio.wait_for(nxt, 1)
    assert admission.in_use == 1
    lease.release()
    assert admission.in_use == 0


async def test_release_is_idempotent() -> None:
    admission = Admission(slots=2, queue_max=0, queue_timeout_s=1)
    lease = await admission.acquire()
    lease.release()
    lease.release()
    assert admission.in_use == 0


async def test_overlap_is_flagged_on_both_leases() -> None:
    admission = Admission(slots=2, queue_max=0, queue_timeout_s=1)
    alone = await admission.acquire()
    alone.release()
    first = await admission.acquire()
    second = await admission.acquire()
    assert not alone.overlapped and first.overlapped and second.overlapped
    first.release()
    second.release()
