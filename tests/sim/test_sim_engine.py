"""Pure tests of the step model and the FIFO slot scheduler."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.sim.engine import Scheduler, Sequence, draw_accepted, plan_steps


def seq(name: str) -> Sequence:
    return Sequence(
        request_id=name, prompt_tokens=10, output_tokens=5, finish_reason="stop", rng=random.Random(0)
    )


@given(st.integers(1, 500), st.integers(0, 8), st.floats(0, 1), st.integers(0, 2**32))
def test_steps_cover_output_within_bounds(total, k, acceptance, seed):
    steps = plan_steps(random.Random(seed), total, k, acceptance)
    assert steps[0].tokens == 1 and steps[0].drafted == 0
    assert sum(step.tokens for step in steps) == total
    assert all(a.end == b.start for a, b in zip(steps, steps[1:], strict=False))
    for step in steps[1:]:
        assert 1 <= step.tokens <= k + 1
        assert step.drafted == k and step.accepted == step.tokens - 1


def test_acceptance_extremes():
    rng = random.Random(0)
    assert {draw_accepted(rng, 5, 1.0) for _ in range(20)} == {5}
    assert {draw_accepted(rng, 5, 0.0) for _ in range(20)} == {0}


def test_acceptance_rate_matches_geometric_mean():
    rng = random.Random(1)
    draws = [draw_accepted(rng, 5, 0.7) for _ in range(20_000)]
    expected = sum(0.7**i for i in range(1, 6))  # E[accepted] for a truncated geometric
    assert abs(sum(draws) / len(draws) - expected) < 0.05


async def test_scheduler_fifo_and_release():
    scheduler = Scheduler(slots=1)
    order: list[str] = []
    release = asyncio.Event()

    async def run(name: str) -> None:
        async with scheduler.slot(seq(name)):
            order.append(name)
            await release.wait()

    tasks = [asyncio.create_task(run(name)) for name in "abc"]
    await asyncio.sleep(0.01)
    assert (scheduler.num_running, scheduler.num_waiting, order) == (1, 2, ["a"])
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"]
    assert (scheduler.num_running, scheduler.num_waiting) == (0, 0)


async def test_cancelled_waiter_leaves_queue_and_running_slot_is_freed():
    scheduler = Scheduler(slots=1)
    hold = asyncio.Event()

    async def run(name: str) -> None:
        async with scheduler.slot(seq(name)):
            await hold.wait()

    first = asyncio.create_task(run("a"))
    second = asyncio.create_task(run("b"))
    await asyncio.sleep(0.01)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert (scheduler.num_running, scheduler.num_waiting) == (1, 0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (scheduler.num_running, scheduler.num_waiting) == (0, 0)


async def test_granted_then_cancelled_hands_slot_on():
    scheduler = Scheduler(slots=1)
    slot_b, slot_c = scheduler.slot(seq("b")), scheduler.slot(seq("c"))  # kept alive on purpose
    async with scheduler.slot(seq("a")):
        waiter_b = asyncio.create_task(slot_b.__aenter__())
        waiter_c = asyncio.create_task(slot_c.__aenter__())
        await asyncio.sleep(0.01)
    # a released: b was granted, but cancel b before it runs
    waiter_b.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter_b
    await asyncio.wait_for(waiter_c, 1)
    assert scheduler.num_running == 1 and scheduler.num_waiting == 0
    await slot_c.__aexit__(None, None, None)
    assert scheduler.num_running == 0
