"""Batch requests give their slots back to interactive ones (gateway/admission/scheduler.py
``Admission._preempt``, ``GATEWAY_BATCH_PREEMPTION``): the youngest batch lease is marked
``preempted``, only as many as the interactive request needs, and its release admits it."""

from __future__ import annotations

from gateway.admission import Admission, Lease, Need, Waiter

BATCH = Need(batch=True)


def batch_leases(admission: Admission, n: int) -> list[Lease]:
    leases = [admission.enqueue("batch", need=BATCH) for _ in range(n)]
    assert all(isinstance(lease, Lease) for lease in leases)
    return leases  # type: ignore[return-value]


async def test_an_interactive_request_takes_the_youngest_batch_slot_and_no_more() -> None:
    admission = Admission(slots=2, queue_max=10, queue_timeout_s=10, preempt_batch=True)
    old, young = batch_leases(admission, 2)
    chat = admission.enqueue("chat")
    assert isinstance(chat, Waiter) and not chat.future.done()
    assert young.preempted.is_set() and not old.preempted.is_set()
    line = admission.enqueue("batch", need=BATCH)  # the preempted line, sent again: it waits
    assert isinstance(line, Waiter) and not old.preempted.is_set()  # one chat takes one slot
    other = admission.enqueue("other")
    assert isinstance(other, Waiter) and old.preempted.is_set()  # a second chat takes the other
    young.release()
    assert chat.future.done() and not line.future.done()
    old.release()
    assert other.future.done() and not line.future.done()
    for waiter in (chat, other):
        assert waiter.grant is not None
        Lease(admission, waiter.key, waiter.grant, waiter.need).release()
    assert line.future.done()  # the batch line runs once the interactive ones have left


async def test_kv_is_taken_back_too_and_nothing_without_the_setting() -> None:
    for preempt in (True, False):
        admission = Admission(
            slots=4, queue_max=10, queue_timeout_s=10, kv_budget_tokens=1_000, preempt_batch=preempt
        )
        small, big = (admission.enqueue("batch", need=Need(batch=True, kv_tokens=t)) for t in (300, 600))
        assert isinstance(small, Lease) and isinstance(big, Lease)
        chat = admission.enqueue("chat", need=Need(kv_tokens=500))  # waits for KV, not a slot
        assert isinstance(chat, Waiter)
        assert not small.preempted.is_set()
        assert big.preempted.is_set() is preempt  # the youngest; alone it frees enough
        big.release()
        assert chat.future.done()
        small.release()


async def test_an_interactive_request_that_batch_slots_cannot_make_fit_preempts_nothing() -> None:
    admission = Admission(
        slots=2, queue_max=10, queue_timeout_s=10, kv_budget_tokens=1_000, preempt_batch=True
    )
    [line] = batch_leases(admission, 1)
    held = admission.enqueue("chat", need=Need(kv_tokens=900))  # interactive: not taken back
    assert isinstance(held, Lease)
    waiting = admission.enqueue("chat", need=Need(kv_tokens=500))  # only the chat's KV could free it
    assert isinstance(waiting, Waiter) and not line.preempted.is_set()
    admission.abandon(waiting)
    held.release()
    line.release()
