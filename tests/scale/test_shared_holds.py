"""Agent session holds under the shared admission (gateway/admission/shared_scripts.py): two
:class:`SharedAdmission` on their own Redis connections stand for two replicas, and one agent's turns
arrive at both. A hold made when a turn ends on one replica holds back a cold long prompt queued on
the other, the session's next turn is resumed first whichever replica it reaches, and a key collects
no more holds than in one process (tests/unit/admission/test_session_holds.py, its in-process twin).

As there, the clock is real and every bound asserted is an order of events or a lower bound the
scripts guarantee; a release is sent in the background, so a test waits for its effect (the hold
appearing in a replica's answer) with a deadline, never a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from gateway.admission import Lease, Need, Reason, SharedAdmission, Waiter
from gateway.admission.scheduler import HOLDS_PER_KEY
from tests.support.shared_replicas import Make, started

pytestmark = pytest.mark.uvloop_too

#: A hold, s: longer than the in-process tests' (1 s), as every step here is a call to Redis that a loaded
#: machine may stall.
HOLD_S = 3.0


async def pair(make: Make, slots: int = 2) -> tuple[SharedAdmission, SharedAdmission]:
    """Two replicas of two slots (``slots``) over a pool of 1,000 tokens, holds of :data:`HOLD_S`."""
    return (
        await started(make, slots=slots, kv=1000, session_hold_s=HOLD_S),
        await started(make, slots=slots, kv=1000, session_hold_s=HOLD_S),
    )


def turn(session: str, kv: int = 600) -> Need:
    """A turn of ``session`` of ``kv`` tokens, all of them prompt (what a hold keeps)."""
    return Need(kv_tokens=kv, session=session, footprint=kv)


def cold_prompt(kv: int = 500) -> Need:
    return Need(kv_tokens=kv, long=True)


async def lease(replica: SharedAdmission, key: str, need: Need) -> Lease:
    entry = await replica.admit(key, 1, None, need)
    return entry if isinstance(entry, Lease) else await asyncio.wait_for(replica.wait(entry), 10)


async def until(replica: SharedAdmission, seen: Callable[[SharedAdmission], bool], what: str) -> None:
    """Renew ``replica`` (a call to Redis: its figures, holds included, are the answer's) until
    ``seen`` is true of it; ``AssertionError`` after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        await replica.renew()
        if seen(replica):
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def held_sessions(replica: SharedAdmission) -> list[object]:
    return [hold["session"] for hold in replica.holds()]


async def test_a_turn_ended_on_one_replica_holds_back_a_cold_prompt_on_the_other(replicas: Make):
    one, two = await pair(replicas)
    (await lease(one, "agent", turn("s1"))).release()  # its 600 tokens held, by every replica
    await until(two, lambda r: held_sessions(r) == ["s1"], "the hold on the other replica")
    assert two.status()["session_holds"][0]["tokens"] == 600  # type: ignore[index]
    cold = await two.admit("other", 1, None, cold_prompt())  # 500 + 600 > 1,000: would evict it
    assert isinstance(cold, Waiter) and cold.reason is Reason.HELD
    short = await lease(one, "other", Need(kv_tokens=450))  # not long: never held back
    await until(one, lambda r: [h["tokens"] for h in r.holds()] == [550], "the hold cut by the short request")
    short.release()
    nxt = await lease(two, "agent", turn("s1", kv=700))  # the next turn, at the other replica: its
    assert not cold.future.done()  # own hold is no obstacle, and the cold prompt waits for KV
    nxt.release()  # held again (700), on the other replica: the cold prompt waits on ...
    granted = await asyncio.wait_for(two.wait(cold), 10)  # ... until it has waited HOLD_S
    assert granted.queue_wait_s >= HOLD_S and "held" in granted.waited_for
    granted.release()


async def test_the_most_recently_used_sessions_turn_is_resumed_first_whichever_replica_it_reaches(
    replicas: Make,
):
    one, two = await pair(replicas, slots=1)
    (await lease(one, "s1", turn("s1", kv=300))).release()
    await until(two, lambda r: held_sessions(r) == ["s1"], "s1's hold")
    (await lease(two, "s2", turn("s2", kv=300))).release()  # s2's turn ends last: the most recently used
    await until(one, lambda r: held_sessions(r) == ["s2", "s1"], "s2's hold")
    holder = await lease(one, "x", Need(kv_tokens=10))
    cold = await two.admit("c", 1, None, cold_prompt())  # 500 beside 2 x 300 held: it would evict
    again_1 = await two.admit("s1", 1, None, turn("s1", kv=300))  # each session's next turn reaches
    again_2 = await one.admit("s2", 1, None, turn("s2", kv=300))  # the replica its last one did not
    assert all(isinstance(w, Waiter) for w in (cold, again_1, again_2))
    holder.release()
    second = await asyncio.wait_for(one.wait(again_2), 10)  # type: ignore[arg-type]
    assert not cold.future.done() and not again_1.future.done()  # type: ignore[union-attr]
    second.release()
    first = await asyncio.wait_for(two.wait(again_1), 10)  # type: ignore[arg-type]
    assert not cold.future.done()  # type: ignore[union-attr]
    first.release()
    (await asyncio.wait_for(two.wait(cold), 10)).release()  # type: ignore[arg-type]


async def test_a_key_holds_no_more_than_its_share_across_replicas_and_holds_expire(replicas: Make):
    one, two = await pair(replicas)
    for n in range(HOLDS_PER_KEY + 3):  # a new session per request, on either replica
        (await lease(one if n % 2 else two, "collector", turn(f"s{n}", kv=100))).release()
        await until(one, lambda r, n=n: f"s{n}" in held_sessions(r), f"s{n}'s hold")
    assert len(one.holds()) == HOLDS_PER_KEY
    await until(two, lambda r: r.holds() == [] and r.kv_reserved_tokens == 0, "the holds' end")


async def test_a_grant_given_back_unused_holds_nothing(replicas: Make):
    one, two = await pair(replicas, slots=1)
    holder = await lease(one, "x", Need(kv_tokens=10))
    waiter = await two.admit("agent", 1, None, turn("s1"))
    assert isinstance(waiter, Waiter)
    holder.release()
    await until(two, lambda r: r.in_use == 1, "the grant")
    two.abandon(waiter)  # given up as it was granted: it never ran
    await until(one, lambda r: r.in_use == 0, "the grant given back")
    assert one.holds() == [] and isinstance(await one.admit("other", 1, None, cold_prompt(900)), Lease)


async def test_a_hold_taken_away_frees_the_cold_prompt_and_one_adopted_holds_it_back(replicas: Make):
    """What a turn moved to another backend does (gateway/proxy/placement.py, ``_take_hold``): the
    session's hold taken from its old backend (every replica's view of it), adopted on the new one."""
    one, two = await pair(replicas)
    (await lease(one, "agent", turn("s1"))).release()
    await until(two, lambda r: held_sessions(r) == ["s1"], "the hold")
    cold = await two.admit("other", 1, None, cold_prompt())
    assert isinstance(cold, Waiter) and cold.reason is Reason.HELD
    assert await one.take_hold("s1") == 600 and await one.take_hold("s1") == 0
    (await asyncio.wait_for(two.wait(cold), 10)).release()  # nothing held it back any more
    await until(two, lambda r: r.in_use == 0, "its release")  # else the adopted hold is cut to fit it
    await two.adopt_hold("agent", "s1", 550)
    await until(one, lambda r: [h["tokens"] for h in r.holds()] == [550], "the hold adopted")
    again = await one.admit("other", 1, None, cold_prompt())
    assert isinstance(again, Waiter) and again.reason is Reason.HELD
    one.abandon(again)
