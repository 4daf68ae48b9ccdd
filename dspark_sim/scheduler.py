"""The simulated engine's scheduler: slots, one KV pool, and vLLM-like preemption.

Modelled on vLLM V1's scheduler with the FCFS policy and recompute preemption:

- a waiting sequence is scheduled when a slot is free and the pool has room for its first prefill
  chunk; only the head of the waiting queue is considered (FCFS: vLLM, too, blocks behind its head);
- a running sequence holds ``kv_held`` tokens: what it prefilled so far plus what it generated; before
  it grows (a prefill chunk, a decode step) it asks :meth:`Scheduler.grow`, and while the pool can't
  take the growth the most recently scheduled running sequence is preempted: it loses all its KV,
  goes back to the *front* of the waiting queue and, rescheduled when a running sequence leaves,
  prefills its prompt and the tokens it had generated again before it decodes on (vLLM's
  ``RECOMPUTE`` mode);
- a sequence alone in the engine is never preempted for its own growth (it would never finish): the
  pool is then simply overfull, as a context longer than the pool would make it.

Invariants: at most ``slots`` sequences run; a sequence is in exactly one of running, waiting or
neither; :meth:`release` (in the engine's ``finally``) takes it out of whichever it is in, once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from .sequence import Sequence


class Preempted(Exception):
    """Raised in a sequence's task when the scheduler preempted it: it is waiting again."""


class Scheduler:
    """At most ``slots`` running sequences over a pool of ``kv_cache_tokens``; the others wait in FIFO
    order (preempted ones first). ``on_preempt(seq)`` is told of each preemption."""

    def __init__(
        self,
        slots: int,
        kv_cache_tokens: int | None = None,
        first_chunk_tokens: int = 4096,
        on_preempt: Callable[[Sequence], None] | None = None,
        by_priority: bool = False,
    ) -> None:
        self.slots = slots
        self.by_priority = by_priority  # vLLM's --scheduling-policy priority: waiting by (priority, arrival)
        self.kv_cache_tokens = kv_cache_tokens
        self.first_chunk_tokens = first_chunk_tokens
        self.on_preempt = on_preempt
        self._running: dict[str, Sequence] = {}  # in scheduling order
        self._waiting: deque[tuple[Sequence, asyncio.Future[None]]] = deque()
        self._kv = 0

    @property
    def num_running(self) -> int:
        """Sequences holding a slot."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Sequences queued for a slot (preempted ones included)."""
        return len(self._waiting)

    @property
    def kv_tokens(self) -> int:
        """KV cache tokens held by running sequences."""
        return self._kv

    @property
    def num_prefilling(self) -> int:
        """Running sequences in their prefill (they share the prefill compute)."""
        return sum(1 for seq in self._running.values() if seq.prefilling)

    async def acquire(self, seq: Sequence) -> None:
        """Wait until ``seq`` runs (FIFO; its place at the front if it was preempted)."""
        if seq.request_id in self._running:
            return  # preempted, then rescheduled before its task got here
        entry = next((e for e in self._waiting if e[0] is seq), None)
        if entry is None:
            if not self._waiting and self._room(seq):
                self._start(seq)
                return
            entry = (seq, asyncio.get_running_loop().create_future())
            later = (i for i, (w, _) in enumerate(self._waiting) if w.priority > seq.priority)
            self._waiting.insert(
                next(later, len(self._waiting)) if self.by_priority else len(self._waiting), entry
            )
        try:
            await entry[1]
        except BaseException:
            if entry in self._waiting:
                self._waiting.remove(entry)
            raise

    def grow(self, seq: Sequence, tokens: int) -> None:
        """``seq`` takes ``tokens`` more KV; preempt the newest running sequences while they don't fit
        (:class:`Preempted` if that is ``seq`` itself)."""
        if seq.preempted:
            raise Preempted
        while self.kv_cache_tokens is not None and self._kv + tokens > self.kv_cache_tokens:
            if len(self._running) <= 1:
                break
            victim = next(reversed(self._running.values()))
            self._preempt(victim)
            if victim is seq:
                raise Preempted
        seq.kv_held += tokens
        self._kv += tokens

    def release(self, seq: Sequence) -> None:
        """``seq`` leaves the engine: its slot and KV back, or its place in the queue given up."""
        if self._running.pop(seq.request_id, None) is not None:
            self._kv -= seq.kv_held
            seq.kv_held = 0
        else:
            for entry in self._waiting:
                if entry[0] is seq:
                    self._waiting.remove(entry)
                    entry[1].cancel()
                    break
        self._schedule()

    def _room(self, seq: Sequence) -> bool:
        if len(self._running) >= self.slots:
            return False
        if self.kv_cache_tokens is None or not self._running:
            return True
        first = min(self.first_chunk_tokens, seq.prompt_tokens + seq.generated)
        return self._kv + first <= self.kv_cache_tokens

    def _start(self, seq: Sequence) -> None:
        self._running[seq.request_id] = seq

    def _preempt(self, victim: Sequence) -> None:
        del self._running[victim.request_id]
        self._kv -= victim.kv_held
        victim.kv_held = 0
        victim.preempted = True  # its task clears it when it starts over (it may be rescheduled first)
        victim.preemptions += 1
        self._waiting.appendleft((victim, asyncio.get_running_loop().create_future()))
        victim.interrupt()
        if self.on_preempt is not None:
            self.on_preempt(victim)

    def _schedule(self) -> None:
        while self._waiting and self._room(self._waiting[0][0]):
            seq, granted = self._waiting.popleft()
            if granted.cancelled():
                continue
            self._start(seq)
            granted.set_result(None)
