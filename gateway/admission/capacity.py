"""What a running request holds of the backend, and whether another one fits beside the running ones.

The backend (vLLM, ``--max-num-seqs 2`` over one shared KV pool) has three things a request can wait for:

- a **slot**: one of ``slots`` sequences (OpenAI's ``n`` takes ``n``);
- **KV**: its tokens in the pool of ``kv_budget_tokens`` — prompt plus output budget, reserved whole at
  admission, because vLLM allocates blocks as a sequence grows and, once the pool is full, preempts and
  later recomputes a running sequence (a 950k-token prefill took 1,058 s on the DGX Spark pair);
- the **lane**: at most ``long_slots`` requests with a long prompt at once, so the other slots stay an
  express lane for short requests while an ~18-minute prefill runs.

Pure arithmetic, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    """What a waiting request waits for (telemetry's ``waited_for`` keys, the ``reason`` label)."""

    SLOT = "slot"
    KV = "kv"
    LANE = "lane"
    KEY = "key_concurrency"
    """Its key is at its ``max_concurrency``."""
    RESERVED = "reserved"
    """It would fit, but what it needs is kept for an older request passed over too often."""
    HELD = "held"
    """It would evict the cached prefix of an agent session whose next turn is due (a hold)."""

    @property
    def phrase(self) -> str:
        """What it waits for, in words ("2 waiting for a free slot"), for the console and the CLI."""
        return _PHRASES[self]


_PHRASES = {
    Reason.SLOT: "a free slot",
    Reason.KV: "room in the KV cache",
    Reason.LANE: "the long-prompt lane",
    Reason.KEY: "their key's concurrency limit",
    Reason.RESERVED: "room kept for an older request",
    Reason.HELD: "an agent session's held prefix",
}


@dataclass(frozen=True, slots=True)
class Need:
    """What one request holds while it runs: ``sequences`` slots, ``kv_tokens`` of the KV pool, and the
    long-prompt lane if ``long``; ``batch``: its class is batch (it waits behind every interactive
    request; it holds nothing more); ``session``: the agent session it is a turn of
    (:mod:`gateway.proxy.sessions`), and ``footprint``: its prompt's tokens, which stay in the prefix
    cache after it ends (what a hold of its session keeps); ``service_s``: how long it is expected to
    run."""

    sequences: int = 1
    kv_tokens: int = 0
    long: bool = False
    batch: bool = False
    session: str | None = None
    footprint: int = 0
    service_s: float = 1.0
    """Expected service time, s: its uncached prefill and expected output at the backend's measured
    rates (:class:`~gateway.admission.service.ServiceRates`); what it is queued by."""
    rejoin_tag: float | None = None
    """The fair-queue finish tag of a request whose prefill was preempted and that queues again: it
    keeps its place (in-process admission; a shared queue preempts nothing)."""


@dataclass(frozen=True, slots=True)
class Held:
    """Totals held by running requests: slots, KV tokens, long requests."""

    sequences: int = 0
    kv_tokens: int = 0
    long: int = 0

    def plus(self, need: Need) -> Held:
        return Held(self.sequences + need.sequences, self.kv_tokens + need.kv_tokens, self.long + need.long)

    def minus(self, need: Need) -> Held:
        return Held(self.sequences - need.sequences, self.kv_tokens - need.kv_tokens, self.long - need.long)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The backend's limits: ``slots`` sequences, ``kv_budget_tokens`` of KV pool, ``long_slots`` long
    requests at once (``slots``: no express lane)."""

    slots: int
    kv_budget_tokens: float
    """Tokens; ``math.inf`` for no bound."""
    long_slots: int

    def blocker(self, held: Held, need: Need) -> Reason | None:
        """What ``need`` waits for beside ``held`` (slot first, then lane, then KV); None if it fits."""
        if held.sequences + need.sequences > self.slots:
            return Reason.SLOT
        if need.long and held.long + 1 > self.long_slots:
            return Reason.LANE
        if held.kv_tokens + need.kv_tokens > self.kv_budget_tokens:
            return Reason.KV
        return None

    def never_fits(self, need: Need) -> str | None:
        """Why ``need`` could not run even on an idle backend, or None."""
        if not 1 <= need.sequences <= self.slots:
            return f"a request of {need.sequences} sequences can never hold {self.slots} slots"
        if need.kv_tokens > self.kv_budget_tokens:
            return f"{need.kv_tokens} KV tokens can never fit a pool of {self.kv_budget_tokens}"
        return None

    def spares(self, held: Held, holders: Iterable[Need], guarded: Need, extra: Need) -> bool:
        """Whether granting ``extra`` now leaves ``guarded`` (a waiter that does not fit) able to run as
        soon as the oldest holders it waits for have left.

        ``holders``: the running requests' needs, oldest grant first. The holders ``guarded`` waits for
        are the shortest oldest-first run whose leaving makes it fit; ``extra`` is spared if ``guarded``
        still fits beside everything else once they have gone — the reservation of EASY backfilling
        (Lifka, "The ANL/IBM SP scheduling system", 1995), with the oldest holder taken to end first.
        """
        rest = held
        for need in holders:
            if self.blocker(rest, guarded) is None:
                break
            rest = rest.minus(need)
        return self.blocker(rest.plus(extra), guarded) is None
