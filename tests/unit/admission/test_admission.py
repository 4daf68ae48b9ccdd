"""Admission: slot bound, FIFO hand-off, queue bound, timeout, and no leak on cancellation."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission import Admission, Lease, Need, QueueFullError, QueueTimeoutError, Reason, Waiter


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


async def test_a_slot_freed_in_the_tick_a_waiter_is_cancelled_goes_to_the_next() -> None:
    """Cancelling a waiting task cancels its future at once, but the waiter leaves its queue only when
    the task next runs: a slot freed in between must skip it (not grant a cancelled future, which
    raised into the releaser and leaked the slot)."""
    admission = Admission(slots=1, queue_max=4, queue_timeout_s=5)
    held = await admission.acquire("a")
    gone = asyncio.create_task(admission.acquire("b"))
    nxt = asyncio.create_task(admission.acquire("c"))
    await asyncio.sleep(0)
    gone.cancel()
    held.release()  # same tick: the cancelled waiter is still queued
    with pytest.raises(asyncio.CancelledError):
        await gone
    lease = await asyncio.wait_for(nxt, 1)
    assert admission.in_use == 1 and admission.queue_depth == 0
    lease.release()
    assert admission.in_use == 0 and (await admission.acquire("d")).key == "d"


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


async def test_a_granted_waiter_resumes_in_the_next_loop_step() -> None:
    """The hand-off costs one event-loop step: a releaser that yields once (as the proxy does after
    its early release) finds the next request already running, so it can be sent upstream before the
    releaser finishes its own answer. (Waiting through ``asyncio.shield`` took two steps.)"""
    admission = Admission(slots=1, queue_max=4, queue_timeout_s=5)
    held = await admission.acquire()
    resumed: list[bool] = []

    async def waiter() -> None:
        (await admission.acquire()).release()
        resumed.append(True)

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    assert admission.queue_depth == 1
    held.release()
    await asyncio.sleep(0)
    assert resumed == [True]
    await task
    assert admission.in_use == 0


async def test_release_says_whether_it_handed_the_slot_to_a_waiter() -> None:
    """``Lease.release()`` is True only when the slot went straight to a waiting request: the proxy
    then yields so that request reaches the backend first, and otherwise does not wait at all."""
    admission = Admission(slots=1, queue_max=4, queue_timeout_s=5)
    alone = await admission.acquire()
    assert alone.release() is False  # nobody waiting: back to the pool
    held = await admission.acquire()
    waiter = asyncio.create_task(admission.acquire())
    await asyncio.sleep(0)
    assert held.release() is True
    assert held.release() is False  # already released
    (await waiter).release()
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


async def test_a_flood_delays_another_key_by_at_most_one_slot_turn() -> None:
    admission = Admission(slots=2, queue_max=200, queue_timeout_s=10)
    order: list[str] = []

    async def run(name: str, key: str) -> None:
        lease = await admission.acquire(key)
        order.append(name)
        await asyncio.sleep(0.001)
        lease.release()

    flood = [asyncio.create_task(run(f"a{i}", "A")) for i in range(100)]
    await asyncio.sleep(0)  # the flood is queued first ...
    single = asyncio.create_task(run("b0", "B"))  # ... then one request of another key
    await asyncio.gather(*flood, single)
    # two floods hold the slots; the next free slot after B arrived goes to B
    assert order.index("b0") <= 3
    assert admission.queue_depth == 0 and admission.in_use == 0


async def test_a_freed_slot_goes_to_the_key_holding_nothing_before_the_keys_served_already() -> None:
    """A and B hold both slots (admitted at once) and queue more; C's one request, queued last, gets
    the next freed slot: the third key waits one slot turn, not two."""
    admission = Admission(slots=2, queue_max=10, queue_timeout_s=10)
    a, b = admission.enqueue("A"), admission.enqueue("B")
    assert isinstance(a, Lease) and isinstance(b, Lease)
    waiters = {name: admission.enqueue(name[0]) for name in ("A2", "B2", "C1")}
    assert [admission.position(waiters[name]) for name in ("C1", "A2", "B2")] == [1, 2, 3]
    a.release()
    assert waiters["C1"].future.done() and not waiters["A2"].future.done()
    b.release()
    assert waiters["A2"].future.done() and not waiters["B2"].future.done()
    for waiter in waiters.values():
        admission.abandon(waiter)
    assert admission.in_use == 0 and admission.queue_depth == 0


async def test_priority_weights_the_turns() -> None:
    admission = Admission(slots=1, queue_max=100, queue_timeout_s=10)
    holder = await admission.acquire("X")
    order: list[str] = []

    async def run(name: str, key: str, priority: int) -> None:
        lease = await admission.acquire(key, priority=priority)
        order.append(key)
        lease.release()

    tasks = [asyncio.create_task(run(f"h{i}", "H", 3)) for i in range(6)]
    tasks += [asyncio.create_task(run(f"l{i}", "L", 1)) for i in range(6)]
    await asyncio.sleep(0)
    holder.release()
    await asyncio.gather(*tasks)
    assert "".join(order[:8]) == "HHHLHHHL"  # 3 grants for priority 3, then 1 for priority 1
    assert sorted(order) == ["H"] * 6 + ["L"] * 6  # no starvation


async def test_max_concurrency_per_key_and_per_key_queue_bound() -> None:
    admission = Admission(slots=2, queue_max=10, queue_timeout_s=10, queue_max_per_key=1)
    first = await admission.acquire("A", max_concurrency=1)
    second = asyncio.create_task(admission.acquire("A", max_concurrency=1))
    await asyncio.sleep(0)
    assert admission.in_use == 1 and admission.queue_depth == 1  # a free slot, but A is at its max
    with pytest.raises(QueueFullError) as info:
        await admission.acquire("A", max_concurrency=1)  # A's own queue holds 1 at most
    assert "this key" in info.value.message
    other = await admission.acquire("B")  # another key takes the free slot at once
    assert admission.status()["keys"] == {
        "A": {"in_flight": 1, "waiting": 1},
        "B": {"in_flight": 1, "waiting": 0},
    }
    first.release()
    (await second).release()
    other.release()
    assert admission.in_use == 0 and admission.status()["keys"] == {}


async def test_two_keys_at_their_bounds_leave_room_for_the_others() -> None:
    """queue_max 8, 4 a key: two keys filling their bounds would fill the queue; the reserve (a
    quarter) keeps places for keys with nothing waiting, one each."""
    admission = Admission(slots=1, queue_max=8, queue_timeout_s=5, queue_max_per_key=4)
    held = admission.enqueue("holder")
    assert not isinstance(held, Waiter)
    waiting = [admission.enqueue(key) for key in ("a", "b", "a", "b", "a", "b")]  # 6 = 8 - reserve
    assert admission.reserve == 2 and admission.queue_depth == 6
    for key in ("a", "b"):
        with pytest.raises(QueueFullError) as refused:
            admission.enqueue(key)
        assert "this key's queue" in refused.value.message
    others = [admission.enqueue(key) for key in ("c", "d")]  # each key's first place comes from the reserve
    assert admission.queue_depth == 8
    with pytest.raises(QueueFullError):
        admission.enqueue("e")  # now the queue itself is full
    with pytest.raises(QueueFullError):
        admission.enqueue("c")
    for waiter in [*waiting, *others]:
        assert isinstance(waiter, Waiter)
        admission.abandon(waiter)
    assert admission.queue_depth == 0


async def test_a_request_of_n_sequences_holds_n_slots() -> None:
    """n answers are n sequences: a request of 2 waits for both slots; a single one behind it that fits
    runs meanwhile (no head-of-line blocking), and the request of 2 gets the slots once they are free."""
    admission = Admission(slots=2, queue_max=4, queue_timeout_s=5)
    one = await admission.acquire("a")
    two = admission.enqueue("b", need=Need(sequences=2))
    assert isinstance(two, Waiter) and two.reason is Reason.SLOT
    three = await admission.acquire("c")  # the free slot, past the request of two
    assert admission.in_use == 2 and two.passes == 1
    granted = asyncio.create_task(admission.wait(two))
    one.release()
    assert admission.in_use == 1 and not two.future.done()  # one slot free: not enough yet
    three.release()
    lease = await granted
    assert lease.sequences == 2 and admission.in_use == 2
    lease.release()
    with pytest.raises(ValueError):
        admission.enqueue("d", need=Need(sequences=3))


async def test_the_expected_wait_counts_the_grants_before_a_request_at_the_mean_hold_time() -> None:
    admission = Admission(slots=1, queue_max=10, queue_timeout_s=10)
    assert admission.expected_wait_s("A") == 0.0  # it would run at once
    held = admission.enqueue("A")
    assert isinstance(held, Lease)
    assert admission.expected_wait_s("B") == 10.0  # the slot's turn, at the prior mean of 10 s
    waiters = [admission.enqueue("A"), admission.enqueue("A")]
    assert admission.expected_wait_s("B") == 20.0  # round robin: one of A's before it, not both
    assert admission.expected_wait_s("A") == 30.0  # A's own two first
    for waiter in waiters:
        assert isinstance(waiter, Waiter)
        admission.abandon(waiter)
    held.release()


async def test_interactive_requests_go_before_batch_ones_and_keys_take_turns_within_each_class() -> None:
    admission = Admission(slots=1, queue_max=20, queue_timeout_s=10)
    holder = admission.enqueue("X")
    assert isinstance(holder, Lease)
    batch, interactive = Need(batch=True), Need()
    order = [
        ("A", batch),
        ("A", batch),
        ("B", batch),
        ("C", interactive),
        ("D", interactive),
        ("C", interactive),
    ]
    waiters = [(f"{key}{i}", admission.enqueue(key, need=need)) for i, (key, need) in enumerate(order)]
    served: list[str] = []
    lease = holder
    while True:
        lease.release()
        granted = [
            (n, w) for n, w in waiters if n not in served and isinstance(w, Waiter) and w.future.done()
        ]
        if not granted:
            break
        [(name, waiter)] = granted
        served.append(name)
        lease = await admission.wait(waiter)
    assert served == ["C3", "D4", "C5", "A0", "B2", "A1"]  # interactive first, turns within each class
    assert admission.in_use == 0 and admission.queue_depth == 0


async def test_a_free_slot_its_waiters_cannot_take_means_no_wait() -> None:
    admission = Admission(slots=2, queue_max=10, queue_timeout_s=10)
    held = admission.enqueue("A", max_concurrency=1)
    waiting = admission.enqueue("A", max_concurrency=1)  # blocked by its key's bound
    assert isinstance(held, Lease) and isinstance(waiting, Waiter)
    assert admission.expected_wait_s("B") == 0.0
    other = admission.enqueue("B")  # queued behind A's waiter, and granted in the same call
    assert isinstance(other, Waiter) and other.future.done()
    admission.abandon(waiting)
