"""The simulated engine: a FIFO slot scheduler and a speculative-decoding step model.

Invariants:
- at most ``slots`` sequences are *running* (admitted, prefilling or decoding); the rest are *waiting*
  in arrival order, like vLLM's waiting queue;
- a sequence leaves the scheduler exactly once, in ``finally``, whether it finished, was cancelled
  while waiting, or was aborted mid-decode (client disconnect);
- step 0 (the prefill) emits 1 token and drafts nothing; every later step drafts ``k`` tokens and
  emits ``1 + accepted`` tokens (``accepted``: draft positions accepted in order, each with probability
  ``acceptance``, stopping at the first rejection), cut to what the output has left;
- a step of n tokens is emitted n / decode_tps seconds after the previous one (per sequence).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from .config import SimConfig


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step of one sequence: output tokens ``[start, end)``."""

    start: int
    end: int
    drafted: int
    """Draft tokens proposed in this step (0 for the prefill step, else k)."""
    accepted: int
    """Draft tokens accepted and emitted in this step."""

    @property
    def tokens(self) -> int:
        """Tokens emitted in this step (1..k+1)."""
        return self.end - self.start


@dataclass(slots=True)
class Sequence:
    """One request inside the engine, with the timings its per-request metrics need (monotonic s)."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    """Tokens this sequence will emit if not aborted."""
    finish_reason: str
    """Reason reported when all ``output_tokens`` are emitted ("stop" or "length")."""
    rng: random.Random
    decode_tps: float | None = None
    """This sequence's decode speed, tokens/s (None: the server's ``SimConfig.decode_tps``)."""
    arrival: float = field(default_factory=time.monotonic)
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    generated: int = 0
    steps: list[Step] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    """Monotonic time each step in ``steps`` was emitted, s."""

    @property
    def kv_tokens(self) -> int:
        """Tokens this sequence holds in the KV cache while running."""
        return self.prompt_tokens + self.generated


class EngineObserver(Protocol):
    """What the engine reports (implemented by ``SimMetrics``); no metric logic lives here."""

    def on_prefill(self, seq: Sequence) -> None: ...
    def on_step(self, seq: Sequence, step: Step) -> None: ...
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


class Scheduler:
    """At most ``slots`` running sequences; the others wait in FIFO order."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._running: dict[str, Sequence] = {}
        self._waiting: deque[tuple[Sequence, asyncio.Future[None]]] = deque()

    @property
    def num_running(self) -> int:
        """Sequences holding a slot."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Sequences queued for a slot."""
        return len(self._waiting)

    @property
    def kv_tokens(self) -> int:
        """KV cache tokens held by running sequences (prompt + generated)."""
        return sum(seq.kv_tokens for seq in self._running.values())

    @asynccontextmanager
    async def slot(self, seq: Sequence) -> AsyncIterator[None]:
        """Hold a slot for ``seq``; waits FIFO; always gives it back (or leaves the queue) on exit."""
        await self._acquire(seq)
        try:
            yield
        finally:
            self._release(seq)

    async def _acquire(self, seq: Sequence) -> None:
        if not self._waiting and len(self._running) < self.slots:
            self._running[seq.request_id] = seq
            return
        entry = (seq, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[1]
        except BaseException:
            if entry[1].done() and not entry[1].cancelled():
                self._release(seq)  # granted just as we were cancelled: hand the slot on
            elif entry in self._waiting:
                self._waiting.remove(entry)
            raise

    def _release(self, seq: Sequence) -> None:
        self._running.pop(seq.request_id, None)
        while self._waiting and len(self._running) < self.slots:
            waiter, granted = self._waiting.popleft()
            if granted.cancelled():
                continue
            self._running[waiter.request_id] = waiter
            granted.set_result(None)


class SimEngine:
    """Runs sequences through the scheduler and the step model, reporting to an observer."""

    def __init__(self, config: SimConfig, scheduler: Scheduler, observer: EngineObserver) -> None:
        self.config = config
        self.scheduler = scheduler
        self._observer = observer

    async def run(self, seq: Sequence) -> AsyncGenerator[Step, None]:
        """Queue, prefill and decode ``seq``, yielding each step when it is due.

        Consumers must close the iterator (``contextlib.aclosing``) so an abort frees the slot at once;
        a sequence that stops early is reported as finished with reason "abort".
        """
        config = self.config
        decode_tps = seq.decode_tps or config.decode_tps
        try:
            async with self.scheduler.slot(seq):
                seq.scheduled = time.monotonic()
                due = seq.scheduled + config.ttft_base_s + seq.prompt_tokens / config.prefill_tps
                while seq.generated < seq.output_tokens:
                    step = _next_step(seq.rng, seq.generated, seq.output_tokens, config.k, config.acceptance)
                    if step.start > 0:
                        due += step.tokens / decode_tps
                    await _sleep_until(due)
                    now = time.monotonic()
                    if step.start == 0:
                        seq.first_token = now
                        self._observer.on_prefill(seq)
                    seq.last_token = now
                    seq.generated = step.end
                    seq.steps.append(step)
                    seq.step_times.append(now)
                    self._observer.on_step(seq, step)
                    yield step
        finally:
            complete = seq.generated >= seq.output_tokens
            self._observer.on_finish(seq, seq.finish_reason if complete else "abort")


async def _sleep_until(deadline: float) -> None:
    """Sleep until the monotonic clock reaches ``deadline`` (s); absolute, so steps don't drift."""
    delay = deadline - time.monotonic()
    await asyncio.sleep(delay if delay > 0 else 0)
