"""Pure tests of the step model and the scheduler (slots, KV pool, preemption)."""

from __future__ import annotations

import asyncio
import random
from contextlib import aclosing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dspark_sim.config import SimConfig
from dspark_sim.engine import SimEngine, draw_accepted, plan_steps
from dspark_sim.prefix_cache import PrefixCache
from dspark_sim.scheduler import Preempted, Scheduler
from dspark_sim.sequence import Sequence, Step


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


async def hold(scheduler: Scheduler, sequence: Sequence, until: asyncio.Event, order: list[str]) -> None:
    """What the engine does: acquire, run, and release in ``finally`` (whatever acquire raised)."""
    try:
        await scheduler.acquire(sequence)
        order.append(sequence.request_id)
        await until.wait()
    finally:
        scheduler.release(sequence)


async def test_scheduler_fifo_and_release():
    scheduler = Scheduler(slots=1)
    order: list[str] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(hold(scheduler, seq(name), release, order)) for name in "abc"]
    await asyncio.sleep(0.01)
    assert (scheduler.num_running, scheduler.num_waiting, order) == (1, 2, ["a"])
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"]
    assert (scheduler.num_running, scheduler.num_waiting) == (0, 0)


async def test_cancelled_waiter_leaves_queue_and_running_slot_is_freed():
    scheduler = Scheduler(slots=1)
    never = asyncio.Event()
    first = asyncio.create_task(hold(scheduler, seq("a"), never, []))
    second = asyncio.create_task(hold(scheduler, seq("b"), never, []))
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
    a, b, c = seq("a"), seq("b"), seq("c")
    await scheduler.acquire(a)
    waiter_b = asyncio.create_task(hold(scheduler, b, asyncio.Event(), []))
    done_c = asyncio.Event()
    waiter_c = asyncio.create_task(hold(scheduler, c, done_c, []))
    await asyncio.sleep(0.01)
    scheduler.release(a)  # b is granted ...
    waiter_b.cancel()  # ... and cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter_b
    await asyncio.sleep(0.01)
    assert scheduler.num_running == 1 and scheduler.num_waiting == 0  # c runs
    done_c.set()
    await asyncio.wait_for(waiter_c, 1)
    assert scheduler.num_running == 0


def sized(name: str, prompt: int) -> Sequence:
    return Sequence(
        request_id=name, prompt_tokens=prompt, output_tokens=5, finish_reason="stop", rng=random.Random(0)
    )


async def test_a_waiting_sequence_needs_room_for_its_first_chunk():
    scheduler = Scheduler(slots=2, kv_cache_tokens=1000, first_chunk_tokens=400)
    a, b = sized("a", 900), sized("b", 900)
    await scheduler.acquire(a)
    scheduler.grow(a, 700)
    waiting = asyncio.create_task(scheduler.acquire(b))
    await asyncio.sleep(0.01)
    assert (scheduler.num_running, scheduler.num_waiting) == (1, 1)  # 700 + 400 > 1000
    scheduler.release(a)
    await asyncio.wait_for(waiting, 1)
    assert scheduler.num_running == 1 and scheduler.kv_tokens == 0
    scheduler.release(b)


async def test_growth_past_the_pool_preempts_the_newest_to_the_front_of_the_queue():
    preempted: list[str] = []
    scheduler = Scheduler(
        slots=2,
        kv_cache_tokens=1000,
        first_chunk_tokens=100,
        on_preempt=lambda s: preempted.append(s.request_id),
    )
    a, b, c = sized("a", 600), sized("b", 600), sized("c", 10)
    await scheduler.acquire(a)
    await scheduler.acquire(b)
    scheduler.grow(a, 500)
    scheduler.grow(b, 400)
    waiting_c = asyncio.create_task(scheduler.acquire(c))
    await asyncio.sleep(0.01)
    scheduler.grow(a, 100)  # 1,000: still fits
    scheduler.grow(a, 1)  # 1,001: b (the newest) goes
    assert preempted == ["b"] and b.preempted and b.kv_held == 0 and scheduler.kv_tokens == 601
    with pytest.raises(Preempted):
        scheduler.grow(b, 1)  # b's task learns it at its next growth
    assert scheduler.num_waiting == 2 and scheduler.num_running == 1
    rescheduled = asyncio.create_task(scheduler.acquire(b))
    scheduler.release(a)
    await asyncio.wait_for(rescheduled, 1)  # b first (the front), then c
    await asyncio.wait_for(waiting_c, 1)
    assert b.preemptions == 1 and scheduler.num_running == 2
    for s in (b, c):
        scheduler.release(s)
    assert (scheduler.num_running, scheduler.num_waiting, scheduler.kv_tokens) == (0, 0, 0)


async def test_a_sequence_alone_is_never_preempted_for_its_own_growth():
    scheduler = Scheduler(slots=2, kv_cache_tokens=100)
    a = sized("a", 500)
    await scheduler.acquire(a)
    scheduler.grow(a, 500)
    assert scheduler.kv_tokens == 500 and not a.preempted
    scheduler.release(a)


class Seen:
    """An engine observer that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_prefill(self, seq: Sequence) -> None:
        self.events.append(("prefill", seq.request_id))

    def on_step(self, seq: Sequence, step) -> None:
        pass

    def on_preempt(self, seq: Sequence) -> None:
        self.events.append(("preempt", seq.request_id))

    def on_finish(self, seq: Sequence, reason: str) -> None:
        self.events.append((reason, seq.request_id))


def engine_for(**overrides) -> tuple[SimEngine, Seen]:
    config = SimConfig(ttft_base_s=0.0, decode_tps=20_000.0, **overrides)
    seen = Seen()
    scheduler = Scheduler(config.slots, config.kv_cache_tokens, config.prefill_chunk_tokens, seen.on_preempt)
    return SimEngine(config, scheduler, seen), seen


def long_seq(name: str, prompt: int, output: int, seed: int) -> Sequence:
    return Sequence(
        request_id=name,
        prompt_tokens=prompt,
        output_tokens=output,
        finish_reason="stop",
        rng=random.Random(seed),
    )


async def drain(engine: SimEngine, sequence: Sequence) -> list[Step]:
    async with aclosing(engine.run(sequence)) as steps:
        return [step async for step in steps]


async def test_a_preempted_sequence_recomputes_and_emits_the_steps_of_an_undisturbed_run():
    # 2 x (1,000 prompt + 300 output) > 2,200: the two outgrow the pool while they decode
    engine, seen = engine_for(kv_cache_tokens=2200, prefill_chunk_tokens=250, prefill_tps=1_000_000.0)
    a, b = long_seq("a", 1000, 300, seed=1), long_seq("b", 1000, 300, seed=2)
    steps_a, steps_b = await asyncio.gather(drain(engine, a), drain(engine, b))
    assert ("preempt", "b") in seen.events and b.preemptions >= 1 and a.preemptions == 0
    assert steps_b == plan_steps(random.Random(2), 300, engine.config.k, engine.config.acceptance)
    assert steps_a == plan_steps(random.Random(1), 300, engine.config.k, engine.config.acceptance)
    assert seen.events[-2:] == [("stop", "a"), ("stop", "b")]  # b ran again only once a had left
    assert b.scheduled is not None and b.first_token is not None and b.first_token < a.last_token
    assert engine.scheduler.kv_tokens == 0 and engine.scheduler.num_running == 0


async def test_prefills_running_at_once_share_the_prefill_rate():
    # alone, 2,000 tokens at 20,000 tokens/s take 0.1 s; two at once share the rate: both prompts
    # take >= 0.2 s together, and each more than 0.1 s (a's first chunk ran before b's started)
    engine, _ = engine_for(prefill_tps=20_000.0, prefill_chunk_tokens=500)
    a, b = long_seq("a", 2000, 1, seed=1), long_seq("b", 2000, 1, seed=2)
    await asyncio.gather(drain(engine, a), drain(engine, b))
    assert max(a.first_token, b.first_token) - min(a.scheduled, b.scheduled) >= 0.19
    for sequence in (a, b):
        assert sequence.first_token - sequence.scheduled >= 0.15
    assert max(a.scheduled, b.scheduled) < min(a.first_token, b.first_token)  # they overlapped


async def test_an_aborted_sequence_frees_its_kv_mid_prefill():
    engine, seen = engine_for(prefill_tps=10_000.0, prefill_chunk_tokens=100)
    sequence = long_seq("a", 10_000, 5, seed=1)
    steps = engine.run(sequence)
    task = asyncio.create_task(anext(steps))
    await asyncio.sleep(0.05)
    assert engine.scheduler.kv_tokens > 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await steps.aclose()
    assert engine.scheduler.kv_tokens == 0 and seen.events == [("abort", "a")]


async def test_a_prompt_sent_again_after_an_abort_mid_prefill_resumes_from_the_chunks_computed():
    # vLLM caches a block once allocated, and an aborted request's blocks stay resident when freed:
    # the same prompt sent again computes only what the first one had not
    engine, _ = engine_for(prefill_tps=10_000.0, prefill_chunk_tokens=1_000)
    engine.cache = PrefixCache(block_size=8, pool_blocks=10_000)
    ids = list(range(10_000))
    first = long_seq("first", 10_000, 5, seed=1)
    first.prompt_ids = ids
    steps = engine.run(first)
    task = asyncio.create_task(anext(steps))
    # the fourth chunk under way (polled: the scheduler tells nothing of a chunk): computed, as vLLM
    # takes an abort between two steps
    while engine.scheduler.kv_tokens < 4_000:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await steps.aclose()
    again = long_seq("again", 10_000, 5, seed=1)
    again.prompt_ids = ids
    await drain(engine, again)
    assert 4_000 <= again.cached_tokens < 10_000 and again.cached_tokens % 8 == 0
