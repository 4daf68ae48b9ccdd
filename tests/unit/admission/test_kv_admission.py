"""Admission on KV and the long-prompt lane: what may run together, passing, the starvation guard,
and every grant given back exactly once."""

from __future__ import annotations

import asyncio
import random
from collections import deque

import pytest

from gateway.admission import Admission, Lease, Need, Reason, Waiter

LONG = Need(kv_tokens=900, long=True)
SHORT = Need(kv_tokens=50)


def kv_admission(**kwargs: object) -> Admission:
    """Two slots over a pool of 1,000 tokens: one 900-token request fits, two don't."""
    options = {"slots": 2, "queue_max": 64, "queue_timeout_s": 10, "kv_budget_tokens": 1000, **kwargs}
    return Admission(**options)  # type: ignore[arg-type]


def assert_within_capacity(admission: Admission) -> None:
    capacity = admission.capacity
    assert admission.in_use <= capacity.slots
    assert admission.kv_reserved_tokens <= capacity.kv_budget_tokens
    assert admission.long_in_use <= capacity.long_slots


async def test_two_requests_that_do_not_fit_together_never_run_at_once() -> None:
    admission = kv_admission()
    first = await admission.acquire("a", need=Need(kv_tokens=900))
    second = admission.enqueue("b", need=Need(kv_tokens=900))
    assert isinstance(second, Waiter) and second.reason is Reason.KV and admission.in_use == 1
    assert admission.status()["waiting_for"]["kv"] == 1
    granted = asyncio.create_task(admission.wait(second))
    first.release()
    lease = await granted
    assert admission.kv_reserved_tokens == 900 and set(lease.waited_for) == {"kv"}
    assert 0 < lease.waited_for["kv"] <= lease.queue_wait_s
    lease.release()
    assert admission.kv_reserved_tokens == 0 and admission.in_use == 0


async def test_a_short_request_passes_one_waiting_for_kv() -> None:
    admission = kv_admission()
    first = await admission.acquire("a", need=Need(kv_tokens=900))
    big = admission.enqueue("b", need=Need(kv_tokens=900))
    short = await admission.acquire("c", need=SHORT)  # fits beside the first: runs at once
    assert short.queue_wait_s < 1 and isinstance(big, Waiter) and big.passes == 1
    assert admission.kv_reserved_tokens == 950
    for lease in (short, first):
        lease.release()
    assert big.future.done()
    admission.abandon(big)
    assert admission.in_use == 0 and admission.kv_reserved_tokens == 0


async def test_a_need_no_idle_backend_holds_is_refused_at_once() -> None:
    admission = kv_admission()
    with pytest.raises(ValueError, match="KV"):
        admission.enqueue("a", need=Need(kv_tokens=1001))
    assert admission.queue_depth == 0


async def test_the_express_lane_keeps_a_slot_for_short_requests() -> None:
    """While one long prompt runs, a second long one waits for the lane and short requests keep
    the other slot; the second long one runs when the first ends."""
    admission = kv_admission(kv_budget_tokens=10_000, long_slots=1)
    first = await admission.acquire("a", need=LONG)
    second = admission.enqueue("a", need=LONG)
    assert isinstance(second, Waiter) and second.reason is Reason.LANE
    for _ in range(3):  # short requests one after another, each at once
        short = await admission.acquire("b", need=SHORT)
        assert short.queue_wait_s < 1 and admission.in_use == 2
        short.release()
    assert not second.future.done()
    first.release()
    lease = await admission.wait(second)
    assert "lane" in lease.waited_for and admission.long_in_use == 1
    lease.release()


async def test_a_long_request_behind_a_stream_of_short_ones_is_guarded_after_its_bound() -> None:
    """The long request waits for KV that overlapping short ones keep holding; after ``bypass_limit``
    passes no short one is admitted ahead of it any more, and it runs as soon as the running one ends."""
    admission = kv_admission(bypass_limit=3)
    short = Need(kv_tokens=200)
    running = deque([await admission.acquire("s", need=short)])
    long = admission.enqueue("l", need=Need(kv_tokens=900))
    assert isinstance(long, Waiter) and long.reason is Reason.KV
    for passes in range(1, 4):
        running.append(await admission.acquire("s", need=short))  # fits beside the other: passes it
        running.popleft().release()  # one short one still runs: the long one still doesn't fit
        assert long.passes == passes and not long.future.done()
    late = admission.enqueue("s", need=short)
    assert isinstance(late, Waiter) and late.reason is Reason.RESERVED  # would fit, but is held back
    running.popleft().release()
    lease = await admission.wait(long)
    assert lease.waited_for.keys() == {"kv", "slot"} and late.reason is Reason.KV  # 900 + 200 > 1000
    lease.release()
    (await admission.wait(late)).release()
    assert admission.in_use == 0 and admission.kv_reserved_tokens == 0


async def test_cancellation_storm_gives_every_grant_back_exactly_once() -> None:
    """Random mixed needs, random cancellations (queued, in the tick of their grant, running) and
    releases: the capacity holds at every step, and at the end nothing is held or queued."""
    rng = random.Random(7)
    admission = kv_admission(kv_budget_tokens=1000, long_slots=1, bypass_limit=2, queue_max=200)
    needs = [LONG, SHORT, Need(kv_tokens=400), Need(sequences=2, kv_tokens=300)]

    async def one(i: int) -> None:
        lease = await admission.acquire(f"k{i % 5}", need=rng.choice(needs))
        try:
            assert_within_capacity(admission)
            await asyncio.sleep(rng.random() / 200)
        finally:
            lease.release()
            if rng.random() < 0.3:
                lease.release()  # a second release changes nothing

    tasks = [asyncio.create_task(one(i)) for i in range(150)]
    for _ in range(60):
        await asyncio.sleep(rng.random() / 500)
        rng.choice(tasks).cancel()
        assert_within_capacity(admission)
    await asyncio.gather(*tasks, return_exceptions=True)
    assert admission.in_use == 0 and admission.kv_reserved_tokens == 0 and admission.long_in_use == 0
    assert admission.queue_depth == 0 and admission.status()["keys"] == {}


async def test_a_guarded_waiter_cancelled_in_the_tick_a_slot_frees_leaves_no_trace() -> None:
    admission = Admission(2, 10, 30.0, kv_budget_tokens=100, bypass_limit=1)
    holder = admission.enqueue("a", need=Need(1, 60))
    guarded = admission.enqueue("g", need=Need(1, 60))  # waits for KV
    waiting = asyncio.ensure_future(admission.wait(guarded))
    passing = admission.enqueue("s", need=Need(1, 10))  # passes it: now it is guarded
    assert isinstance(holder, Lease) and isinstance(passing, Waiter) and not isinstance(guarded, Lease)
    small = await admission.wait(passing)
    await asyncio.sleep(0)
    waiting.cancel()  # its client leaves ...
    holder.release()  # ... in the tick a response ends
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (admission.in_use, admission.queue_depth) == (1, 0)
    later = admission.enqueue("x", need=Need(1, 10))
    assert isinstance(later, Lease)
    small.release()
    later.release()
    assert (admission.in_use, admission.queue_depth, admission.status()["keys"]) == (0, 0, {})
