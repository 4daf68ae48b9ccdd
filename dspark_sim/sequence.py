"""One request inside the simulated engine (``Sequence``) and one engine step of it (``Step``): the
state the engine (``dspark_sim.engine``) and the scheduler (``dspark_sim.scheduler``) share."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from .tokens import Ids


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
    prompt_ids: Ids | None = None
    """The prompt's token ids, for the prefix cache (None: not cached)."""
    cache_salt: str | None = None
    """The request's ``cache_salt``: it shares cached blocks only with requests of the same one."""
    cached_tokens: int = 0
    """Prompt tokens its first prefill found in the prefix cache (``cached_tokens`` of its usage)."""
    priority: int = 0
    """The request's ``priority`` (lower first, with ``SimConfig.scheduling_policy`` ``priority``)."""
    arrival: float = field(default_factory=time.monotonic)
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    generated: int = 0
    steps: list[Step] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    """Monotonic time each step in ``steps`` was emitted, s."""
    kv_held: int = 0
    """KV cache tokens it holds now (what it prefilled so far + what it generated; 0 when not running)."""
    prefilling: bool = False
    """In a prefill chunk (it shares the prefill compute with the others that are)."""
    preempted: bool = False
    """Set by the scheduler when it preempts the sequence; cleared by its task when it starts over."""
    preemptions: int = 0
    nap: asyncio.Future[None] | None = None
    """What its task waits on until its next chunk or step is due (:meth:`interrupt` ends it early)."""

    def interrupt(self) -> None:
        """Wake its task from the wait for its next chunk or step (it then sees ``preempted``)."""
        if self.nap is not None and not self.nap.done():
            self.nap.set_result(None)
