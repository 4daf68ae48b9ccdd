"""A short interactive request takes the slot of a much longer one still in its prefill
(gateway/admission/scheduler.py ``Admission._preempt``, ``GATEWAY_PREFILL_PREEMPTION``): only a
streamed request whose holder says it prefills, due after the waiter, expected to take
``PREFILL_PREEMPT_RATIO`` times as long; the preempted one queues again with its tag, its place kept."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.admission import Admission, Lease, Need, Waiter
from gateway.admission.scheduler import PREFILL_PREEMPT_MIN_S, PREFILL_PREEMPT_RATIO

COLD = Need(service_s=60.0)  # a cold long prompt: a minute of prefill
CHAT = Need(service_s=0.1)


def admission(preempt: bool = True) -> Admission:
    return Admission(slots=2, queue_max=10, queue_timeout_s=10, preempt_prefill=preempt)


def running(gate: Admission, key: str, need: Need, prefilling: bool = True) -> Lease:
    lease = gate.enqueue(key, need=need)
    assert isinstance(lease, Lease)
    lease.prefilling = prefilling
    return lease


def granted(gate: Admission, waiter: Waiter) -> Lease:
    assert waiter.future.done() and waiter.grant is not None
    return Lease(gate, waiter.key, waiter.grant, waiter.need, tag=waiter.tag)


async def test_a_chat_takes_the_slot_of_a_cold_prefill_which_queues_again_first_in_line() -> None:
    gate = admission()
    turn = running(gate, "agent", Need(service_s=0.5), prefilling=False)  # decoding: never taken
    cold = running(gate, "docs", COLD)
    chat = gate.enqueue("chat", need=CHAT)
    assert isinstance(chat, Waiter) and cold.preempted.is_set() and not turn.preempted.is_set()
    cold.release()  # its holder aborted it (still prefilling)
    assert chat.future.done()
    again = gate.enqueue("docs", need=replace(COLD, rejoin_tag=cold.tag))
    assert isinstance(again, Waiter) and again.tag == cold.tag  # its place kept
    later = gate.enqueue("late", need=Need(service_s=100.0))  # due after the prompt: behind it
    assert isinstance(later, Waiter) and later.tag > again.tag
    granted(gate, chat).release()
    assert again.future.done() and not later.future.done()
    turn.release()
    granted(gate, again).release()
    assert later.future.done()


@pytest.mark.parametrize(
    "case",
    ["decoding", "due_first", "not_much_longer", "under_a_second", "setting_off"],
)
async def test_a_prefill_keeps_its_slot(case: str) -> None:
    gate = admission(preempt=case != "setting_off")
    # due_first: the chat's key has a long request running already, so its next is due after the prompt
    other = ("chat", Need(service_s=1_000.0)) if case == "due_first" else ("agent", Need(service_s=0.5))
    running(gate, *other, prefilling=False)
    need = {
        "not_much_longer": Need(service_s=PREFILL_PREEMPT_RATIO * CHAT.service_s * 0.9),
        "under_a_second": Need(service_s=PREFILL_PREEMPT_MIN_S * 0.9),  # 9 times the chat's, yet short
    }.get(case, COLD)
    cold = running(gate, "docs", need, prefilling=case != "decoding")
    chat = gate.enqueue("chat", need=CHAT)
    assert isinstance(chat, Waiter) and not cold.preempted.is_set()


@pytest.mark.parametrize("cut", [True, False])
async def test_a_prefill_cut_raises_no_virtual_time_one_whose_output_began_does(cut: bool) -> None:
    """A prefill cut has not done its work: a key arriving after it is not put behind its tag. One
    whose output began before its holder saw the mark ran on, and ended as any other."""
    gate = admission()
    running(gate, "agent", Need(service_s=0.5), prefilling=False)
    cold = running(gate, "docs", COLD)
    chat = gate.enqueue("chat", need=CHAT)
    assert isinstance(chat, Waiter) and cold.preempted.is_set()
    cold.prefilling = cut
    cold.release()
    fresh = gate.enqueue("fresh", need=CHAT)  # waits (both slots held): tagged from the virtual time
    assert isinstance(fresh, Waiter) and (fresh.tag < cold.tag) is cut


async def test_a_preempted_prefill_queues_again_even_when_the_queue_is_full() -> None:
    """It had its place: a queue filled meanwhile does not refuse it (429 mid-stream)."""
    gate = Admission(slots=1, queue_max=1, queue_timeout_s=10, preempt_prefill=True)
    cold = running(gate, "docs", COLD)
    chat = gate.enqueue("chat", need=CHAT)
    assert isinstance(chat, Waiter) and cold.preempted.is_set()
    cold.release()
    other = gate.enqueue("other", need=CHAT)  # the queue's one place
    assert isinstance(other, Waiter)
    again = gate.enqueue("docs", need=replace(COLD, rejoin_tag=cold.tag))
    assert isinstance(again, Waiter) and again.tag == cold.tag
