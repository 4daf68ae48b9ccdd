"""Agent session holds (gateway/admission/scheduler.py): when a session's turn ends its prefix is held
for its next turn — a request that would evict it waits, the session's next turn goes first, the
wait is bounded by the hold, and a key collects no more than its share of holds.

The clock is real, so the times are set far apart (tenths of :data:`HOLD_S`) and every bound asserted
is exact or an order of events: a lower bound is what the scheduler guarantees to the nanosecond
(a hold-back lasts ``session_hold_s`` from the waiter's own ``enqueued_at``), an upper bound is "before
that hold ended", taken from the times the test recorded, never a fixed number of milliseconds. A
waiter's ``reason_since`` after its grant is the moment it was granted (``Waiter.note``)."""

from __future__ import annotations

import asyncio
import time

from gateway.admission import Admission, Lease, Need, Reason, Waiter
from gateway.admission.scheduler import HOLDS_PER_KEY

#: A hold, s: the steps of a test are spaced by fractions of it, so a stalled event loop (a loaded
#: machine) would have to stall for hundreds of ms to reorder them.
HOLD_S = 1.0


def admission(**kwargs: object) -> Admission:
    """Two slots over a pool of 1,000 tokens, holds of :data:`HOLD_S`."""
    options = {"slots": 2, "queue_max": 64, "queue_timeout_s": 10, "kv_budget_tokens": 1000,
               "session_hold_s": HOLD_S, **kwargs}  # fmt: skip
    return Admission(**options)  # type: ignore[arg-type]


def turn(session: str, kv: int = 600) -> Need:
    """A turn of ``session`` of ``kv`` tokens, all of them prompt (what a hold keeps)."""
    return Need(kv_tokens=kv, session=session, footprint=kv)


def cold_prompt(kv: int = 500) -> Need:
    """A cold long prompt of ``kv`` tokens (uncached past the long-prompt threshold): held back by holds."""
    return Need(kv_tokens=kv, long=True)


async def test_a_cold_request_waits_behind_the_held_sessions_next_turn() -> None:
    gate = admission()
    (await gate.acquire("agent", need=turn("s1"))).release()  # its 600 tokens held
    assert [h["session"] for h in gate.holds()] == ["s1"]
    cold = gate.enqueue("other", need=cold_prompt())  # 500 + 600 > 1,000: would evict it
    assert isinstance(cold, Waiter) and cold.reason is Reason.HELD
    assert gate.status()["waiting_for"]["held"] == 1
    small = await gate.acquire("other", need=Need(kv_tokens=300))  # fits beside the hold
    small.release()
    short = await gate.acquire("other", need=Need(kv_tokens=450))  # not long: never held back
    assert gate.holds()[0]["tokens"] == 550  # it evicts the hold's last 50 tokens, as vLLM would
    short.release()
    nxt = gate.enqueue("agent", need=turn("s1", kv=700))
    assert nxt.future.done() if isinstance(nxt, Waiter) else True  # its own hold is no obstacle
    nxt = nxt if isinstance(nxt, Lease) else await gate.wait(nxt)
    assert gate.holds() == [] and not cold.future.done() and cold.reason is Reason.KV
    granted = asyncio.create_task(gate.wait(cold))
    nxt.release()  # held again: 700; the cold one waits on
    await asyncio.sleep(0)
    assert not granted.done() and gate.holds()[0]["tokens"] == 700
    lease = await asyncio.wait_for(granted, 10)  # ... until it has waited HOLD_S, not until the hold ends
    assert lease.queue_wait_s >= HOLD_S and "held" in lease.waited_for
    lease.release()


async def test_the_most_recently_used_sessions_turn_is_resumed_first() -> None:
    gate = admission(slots=1)
    for session in ("s1", "s2"):  # s2's turn ends last: the most recently used
        (await gate.acquire(session, need=turn(session, kv=300))).release()
    holder = await gate.acquire("x", need=Need(kv_tokens=10))
    cold = gate.enqueue("c", need=cold_prompt())  # 500 beside 2 x 300 held: it would evict
    again_1 = gate.enqueue("s1", need=turn("s1", kv=300))
    again_2 = gate.enqueue("s2", need=turn("s2", kv=300))
    waiters = (cold, again_1, again_2)
    assert all(isinstance(w, Waiter) for w in waiters)
    holder.release()
    assert [w.future.done() for w in waiters] == [False, False, True]  # type: ignore[union-attr]
    order = [await gate.wait(again_2)]  # type: ignore[arg-type]
    order[0].release()
    assert [w.future.done() for w in waiters] == [False, True, True]  # type: ignore[union-attr]
    (await gate.wait(again_1)).release()  # type: ignore[arg-type]
    (await gate.wait(cold)).release()  # type: ignore[arg-type]


async def test_a_request_that_fits_beside_the_holds_keeps_its_turn() -> None:
    gate = admission(slots=1)
    (await gate.acquire("s1", need=turn("s1", kv=300))).release()
    holder = await gate.acquire("x", need=Need(kv_tokens=10))
    small = gate.enqueue("c", need=Need(kv_tokens=100))
    again = gate.enqueue("s1", need=turn("s1", kv=300))
    holder.release()  # nobody is held back: the round robin, not the session, goes first
    assert isinstance(small, Waiter) and small.future.done() and not again.future.done()  # type: ignore[union-attr]
    (await gate.wait(small)).release()
    (await gate.wait(again)).release()  # type: ignore[arg-type]


async def test_a_key_holds_no_more_than_its_share_and_holds_expire() -> None:
    gate = admission()
    for n in range(HOLDS_PER_KEY + 3):  # a new session per request
        (await gate.acquire("collector", need=turn(f"s{n}", kv=100))).release()
    assert len(gate.holds()) == HOLDS_PER_KEY
    await asyncio.sleep(HOLD_S + 0.01)  # every hold was made before now: all have ended by then
    assert gate.holds() == [] and gate.kv_reserved_tokens == 0


async def test_without_a_hold_setting_nothing_is_held() -> None:
    gate = admission(session_hold_s=0.0)
    (await gate.acquire("agent", need=turn("s1"))).release()
    assert gate.holds() == [] and isinstance(gate.enqueue("other", need=cold_prompt(900)), Lease)


async def test_requests_of_one_session_queued_together_do_not_pass_other_keys() -> None:
    gate = admission(slots=1)
    holder = await gate.acquire("x", need=Need(kv_tokens=10))
    waiting = [gate.enqueue("f", need=turn("s", kv=100)) for _ in range(3)]
    waiting.append(gate.enqueue("o", need=Need(kv_tokens=100)))
    order: list[str] = []
    lease = holder
    while waiting:  # each turn's end holds "s", but the flood's requests were queued before it
        lease.release()
        [granted] = [w for w in waiting if w.future.done()]  # type: ignore[union-attr]
        waiting.remove(granted)
        order.append(granted.key)
        lease = await gate.wait(granted)  # type: ignore[arg-type]
    lease.release()
    assert order.index("o") <= 1  # within one turn of the flood, as without sessions


async def test_a_key_chaining_more_sessions_than_slots_does_not_starve_another() -> None:
    """Key A runs three sessions on two slots, each next turn sent as its last one ends (within the
    hold); key C sends a cold prompt every turn, each held back by A's holds, so a resumed turn of A
    takes each slot that frees, ahead of V's short request. Once V has waited a hold's length no
    resumed turn passes it: it takes the next slot that frees. The turns are paced by the clock, but
    what is asserted is which release V was granted at, against the times the releases happened."""
    gate = admission()
    running: list[tuple[Lease, str]] = []
    queued: dict[str, Waiter] = {}
    colds: list[Lease | Waiter] = []

    def send(session: str) -> None:
        entry = gate.enqueue("A", need=turn(session, kv=400))
        if isinstance(entry, Lease):
            running.append((entry, session))
        else:
            queued[session] = entry

    three = await gate.acquire("A", need=turn("s3", kv=400))
    send("s1")
    three.release()  # s3 held: its next turn, sent now, is resumed when a slot frees
    send("s2")
    send("s3")
    victim = gate.enqueue("V", need=Need(kv_tokens=10))
    assert isinstance(victim, Waiter) and len(running) == 2 and list(queued) == ["s3"]
    releases: list[float] = []  # when each slot was given back, monotonic s
    while not victim.future.done():
        assert time.monotonic() < victim.enqueued_at + 5 * HOLD_S, "V was never admitted"
        colds.append(gate.enqueue("C", need=cold_prompt()))  # held back by A's holds: turns are resumed
        await asyncio.sleep(HOLD_S / 5)  # a turn
        lease, session = running.pop(0)
        releases.append(time.monotonic())
        lease.release()  # its session held; a resumed turn or V takes the slot
        for name, waiter in list(queued.items()):
            if waiter.future.done():
                running.append((await gate.wait(waiter), name))
                del queued[name]
        send(session)  # its next turn, within the hold
    *passed, _ = releases
    assert passed, "no turn went ahead of V"
    assert all(at - victim.enqueued_at < HOLD_S for at in passed)  # none passed it after a hold's length
    lease = await gate.wait(victim)
    assert lease.queue_wait_s >= HOLD_S
    lease.release()
    for lease, _ in running:
        lease.release()
    for entry in [*queued.values(), *colds]:
        if isinstance(entry, Waiter):
            gate.abandon(entry)
        else:
            entry.release()


async def test_a_held_back_waiter_is_admitted_when_its_own_wait_ends_though_the_hold_goes_on() -> None:
    """The hold ends at 1.0 s, the waiter's hold-back at 1.1 s, the renewed hold at 1.6 s: the one
    look-again timer runs at each in turn, and the waiter goes when its own hold-back ends, before the
    renewed hold does."""
    gate = admission()
    (await gate.acquire("agent", need=turn("s1"))).release()
    await asyncio.sleep(HOLD_S / 10)
    cold = gate.enqueue("other", need=cold_prompt())
    extra = [gate.enqueue(f"burst{n}", need=cold_prompt()) for n in range(50)]
    assert isinstance(cold, Waiter) and cold.reason is Reason.HELD
    await asyncio.sleep(HOLD_S / 2)
    assert not cold.future.done()  # the first hold (and the hold-back) still on
    (await gate.acquire("agent", need=turn("s1"))).release()  # the session's next turn: held again
    renewed_until = time.monotonic() + HOLD_S
    lease = await asyncio.wait_for(gate.wait(cold), 10)
    assert (
        cold.enqueued_at + HOLD_S <= cold.reason_since < renewed_until
    )  # granted at its own hold-back's end
    assert lease.queue_wait_s >= HOLD_S and "held" in lease.waited_for
    lease.release()
    for waiter in extra:
        assert isinstance(waiter, Waiter)
        gate.abandon(waiter)


async def test_a_request_admitted_past_a_hold_cuts_it_to_what_the_pool_has_left() -> None:
    gate = admission()
    (await gate.acquire("agent", need=turn("s1"))).release()
    await asyncio.sleep(HOLD_S / 10)
    cold = gate.enqueue("other", need=cold_prompt())
    await asyncio.sleep(HOLD_S / 2)
    assert isinstance(cold, Waiter) and not cold.future.done()
    (await gate.acquire("agent", need=turn("s1"))).release()  # held HOLD_S from now
    lease = await asyncio.wait_for(
        gate.wait(cold), 10
    )  # at its hold-back's end: 500 running, 100 of the 600 evicted
    assert [h["tokens"] for h in gate.holds()] == [500]
    small = gate.enqueue("third", need=Need(kv_tokens=100))
    assert isinstance(small, Lease) and [h["tokens"] for h in gate.holds()] == [400]
    small.release()
    lease.release()


async def test_holds_past_the_pool_are_cut_least_recently_used_first() -> None:
    gate = admission()
    cold = await gate.acquire("other", need=Need(kv_tokens=500))
    (await gate.acquire("a", need=turn("s1", kv=400))).release()
    (await gate.acquire("b", need=turn("s2", kv=300))).release()  # 500 + 400 + 300 > 1,000: s1 is cut
    assert [(h["session"], h["tokens"]) for h in gate.holds()] == [("s2", 300), ("s1", 200)]
    small = gate.enqueue("c", need=Need(kv_tokens=250))
    assert isinstance(small, Lease) and [h["session"] for h in gate.holds()] == ["s2"]  # s1 gone, s2 cut
    assert gate.holds()[0]["tokens"] == 250
    small.release()
    cold.release()


async def test_a_waiter_queued_before_any_hold_goes_when_its_own_hold_back_ends() -> None:
    """Queued at 0 for KV; at 0.5 s a session's turn ends (held until 1.5 s) as the KV frees: the
    waiter is held back until 1.0 s, a hold's length after it joined, not until the hold ends."""
    gate = admission()
    running = await gate.acquire("x", need=Need(kv_tokens=600))
    big = gate.enqueue("other", need=cold_prompt(800))
    await asyncio.sleep(HOLD_S / 2)
    (await gate.acquire("agent", need=turn("s1", kv=300))).release()  # fits beside the 600: held now
    held_until = time.monotonic() + HOLD_S
    running.release()
    assert isinstance(big, Waiter) and big.reason is Reason.HELD
    lease = await asyncio.wait_for(gate.wait(big), 10)
    assert big.enqueued_at + HOLD_S <= big.reason_since < held_until  # granted before the hold ended
    assert lease.queue_wait_s >= HOLD_S
    lease.release()


async def test_a_hold_taken_away_frees_a_cold_request_and_one_adopted_holds_it_back() -> None:
    """A turn moved to another backend (gateway/proxy/placement.py, ``_take_hold``) takes its session's
    hold from its old backend's admission to the new one's."""
    old, new = admission(), admission()
    (await old.acquire("agent", need=turn("s1"))).release()
    cold = old.enqueue("other", need=cold_prompt())
    assert isinstance(cold, Waiter) and cold.reason is Reason.HELD
    assert await old.take_hold("s1") == 600 and await old.take_hold("s1") == 0
    assert cold.future.done() and old.holds() == []  # nothing holds it back any more
    (await old.wait(cold)).release()
    await new.adopt_hold("agent", "s1", 550)
    assert [(h["session"], h["tokens"]) for h in new.holds()] == [("s1", 550)]
    held_back = new.enqueue("other", need=cold_prompt())
    assert isinstance(held_back, Waiter) and held_back.reason is Reason.HELD
    new.abandon(held_back)
