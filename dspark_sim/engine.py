"""The simulated engine: chunked prefill, a speculative-decoding step model, and the scheduler's
preemption (``dspark_sim.scheduler``) seen from a sequence's task.

Invariants:
- a sequence leaves the scheduler exactly once, in ``finally``, whether it finished, was cancelled
  while waiting (first time or preempted), or was aborted mid-prefill or mid-decode (client disconnect);
- a prefill of n tokens (prompt, + tokens generated so far when recomputing) runs in chunks of
  ``prefill_chunk_tokens``; a chunk of c tokens takes c / (prefill_tps / sequences prefilling when it
  starts) s, as vLLM's chunked prefill shares one token budget per step between them;
- step 0 emits 1 token ``ttft_base_s`` after the prefill and drafts nothing; every later step drafts
  ``k`` tokens and emits ``1 + accepted`` tokens (``accepted``: draft positions accepted in order, each
  with probability ``acceptance``, stopping at the first rejection), cut to what the output has left;
- a step of n tokens is emitted n / decode_tps seconds after the previous one (per sequence);
- preemption loses no output and duplicates none: the step being computed is kept and emitted after
  the recompute, so the steps (and the text) are those of a run without preemption.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator
from typing import Protocol

from dspark_common.kv_events import KVCacheEvent

from .config import SimConfig
from .hybrid_cache import HybridPrefixCache
from .prefix_cache import PrefixCache, in_steps
from .scheduler import Preempted, Scheduler
from .sequence import Sequence, Step


class EngineObserver(Protocol):
    """What the engine reports (implemented by ``SimMetrics``); no metric logic lives here."""

    def on_prefill(self, seq: Sequence) -> None: ...
    def on_step(self, seq: Sequence, step: Step) -> None: ...
    def on_preempt(self, seq: Sequence) -> None: ...
    def on_finish(self, seq: Sequence, reason: str) -> None: ...


def draw_accepted(rng: random.Random, k: int, acceptance: float) -> int:
    """Draft positions accepted in one step: 0..k, stopping at the first rejection."""
    accepted = 0
    while accepted < k and rng.random() < acceptance:
        accepted += 1
    return accepted


def plan_steps(rng: random.Random, total: int, k: int, acceptance: float) -> list[Step]:
    """All steps for ``total`` output tokens, without timing (what ``SimEngine.run`` yields)."""
    steps: list[Step] = []
    position = 0
    while position < total:
        steps.append(_next_step(rng, position, total, k, acceptance))
        position = steps[-1].end
    return steps


def _next_step(rng: random.Random, position: int, total: int, k: int, acceptance: float) -> Step:
    if position == 0:
        return Step(0, 1, drafted=0, accepted=0)
    emitted = min(1 + draw_accepted(rng, k, acceptance), total - position)
    return Step(position, position + emitted, drafted=k, accepted=emitted - 1)


class EventSink(Protocol):
    """Where the prefix cache's KV events go (``KVEventPublisher``)."""

    def publish(self, events: list[KVCacheEvent]) -> None: ...


class SimEngine:
    """Runs sequences through the scheduler and the step model, reporting to an observer; with a
    prefix ``cache``, a prefill computes only what it does not hold, and the cache's changes go to
    ``events``."""

    def __init__(
        self,
        config: SimConfig,
        scheduler: Scheduler,
        observer: EngineObserver,
        cache: PrefixCache | HybridPrefixCache | None = None,
        events: EventSink | None = None,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self._observer = observer
        self.cache = cache
        self._events = events

    async def run(self, seq: Sequence) -> AsyncGenerator[Step, None]:
        """Queue, prefill and decode ``seq``, yielding each step when it is due; a preempted sequence
        waits again, then recomputes (prefills prompt + generated tokens) and decodes on.

        Consumers must close the iterator (``contextlib.aclosing``) so an abort frees the slot at once;
        a sequence that stops early is reported as finished with reason "abort".
        """
        config, scheduler = self.config, self.scheduler
        decode_tps = seq.decode_tps or config.decode_tps
        step: Step | None = None  # drawn, not yet emitted: kept across a preemption
        try:
            while seq.generated < seq.output_tokens:
                await scheduler.acquire(seq)
                if seq.scheduled is None:
                    seq.scheduled = time.monotonic()
                try:
                    await self._prefill(seq)
                    due = time.monotonic() + (config.ttft_base_s if seq.generated == 0 else 0.0)
                    while seq.generated < seq.output_tokens:
                        if step is None:
                            step = _next_step(
                                seq.rng, seq.generated, seq.output_tokens, config.k, config.acceptance
                            )
                        if step.start > 0:
                            due += step.tokens / decode_tps
                        scheduler.grow(seq, step.tokens)
                        if self.cache is not None:
                            self._publish(self.cache.trim(scheduler.kv_tokens))
                        await _nap(seq, due)
                        self._emit(seq, step)
                        emitted, step = step, None
                        yield emitted
                except Preempted:
                    seq.preempted = False  # waiting again (or already rescheduled): recompute
                    if self.cache is not None:
                        self.cache.release(id(seq))
        finally:
            scheduler.release(seq)
            if self.cache is not None:
                self.cache.release(id(seq))
            complete = seq.generated >= seq.output_tokens
            self._observer.on_finish(seq, seq.finish_reason if complete else "abort")

    async def _prefill(self, seq: Sequence) -> None:
        """Prefill prompt + generated tokens in chunks of ``prefill_chunk_tokens``, but for the prompt's
        prefix the cache holds; a chunk of c tokens takes c / (prefill_tps / sequences prefilling now)
        s (the compute is shared). Its prompt's blocks are then resident; those of the chunks computed
        if it stops part-way (aborted, preempted)."""
        config, scheduler, cache = self.config, self.scheduler, self.cache
        left = seq.prompt_tokens + seq.generated
        if cache is not None and seq.prompt_ids is not None:
            cached = cache.lookup(seq.prompt_ids, id(seq), seq.cache_salt)
            if seq.generated == 0:
                seq.cached_tokens = cached
            scheduler.grow(seq, cached)
            left -= cached
        seq.prefilling = True
        done = False
        try:
            while left > 0:
                chunk = min(config.prefill_chunk_tokens, left)
                scheduler.grow(seq, chunk)
                left -= chunk
                await _nap(seq, time.monotonic() + chunk * scheduler.num_prefilling / config.prefill_tps)
            done = True
        finally:
            seq.prefilling = False
            if not done and seq.generated == 0 and cache is not None and seq.prompt_ids is not None:
                # aborted or preempted part-way: vLLM caches a block once it is allocated
                # (``KVCacheManager.allocate_slots``), an abort or a preemption takes effect between
                # two steps (the chunk under way is computed), and the blocks stay resident when
                # freed: the prompt sent again resumes from there
                computed = seq.prompt_ids[: seq.prompt_tokens - left]
                self._publish(cache.store(computed, scheduler.kv_tokens, id(seq), seq.cache_salt))
        if cache is not None and seq.prompt_ids is not None:
            self._publish(cache.store(seq.prompt_ids, scheduler.kv_tokens, id(seq), seq.cache_salt))

    def _publish(self, events: list[KVCacheEvent]) -> None:
        if events and self._events is not None:
            for batch in in_steps(events, self.config.prefill_chunk_tokens):
                self._events.publish(batch)

    def _emit(self, seq: Sequence, step: Step) -> None:
        now = time.monotonic()
        if step.start == 0:
            seq.first_token = now
            self._observer.on_prefill(seq)
        seq.last_token = now
        seq.generated = step.end
        seq.steps.append(step)
        seq.step_times.append(now)
        self._observer.on_step(seq, step)


async def _nap(seq: Sequence, deadline: float) -> None:
    """Wait until the monotonic clock reaches ``deadline`` (s; absolute, so steps don't drift);
    raise :class:`Preempted` if ``seq`` is preempted before or while it waits."""
    delay = deadline - time.monotonic()
    if delay <= 0:
        await asyncio.sleep(0)
    else:
        loop = asyncio.get_running_loop()
        seq.nap = nap = loop.create_future()
        wake = loop.call_later(delay, _wake, nap)
        try:
            await nap
        finally:
            wake.cancel()
            seq.nap = None
    if seq.preempted:
        raise Preempted


def _wake(nap: asyncio.Future[None]) -> None:
    if not nap.done():
        nap.set_result(None)
