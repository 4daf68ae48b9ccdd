"""The backend pairs behind the gateway, each with its own upstream client, admission (slots, KV
budget, queue) and health, and the choice of one for a request.

Routing (:meth:`Backends.route`), among the backends up (all of them if none is):

- with an affinity key (:func:`affinity_key`: the client's session or user), the backend rendezvous
  hashing gives it (highest SHA-256 of ``key|name``; Thaler & Ravishankar, "Using name-based mappings
  to increase hit rates", 1998): a conversation keeps its backend and so vLLM's prefix cache, and
  only the conversations of a backend that leaves move;
- else the least loaded: fewest (sequences held + requests waiting) per slot, then least KV reserved
  per budget, then the name.

Once the prompt is counted (its token ids known), :meth:`Backends.longest_prefix` may move it to the
backend whose prefix cache holds the longest run of its blocks, if that one is within a request per
slot of the least loaded (:data:`PREFIX_LOAD_SLACK`): a conversation that lost its affinity, or never
had one, goes back to its cache.

A backend is *down* when its ``/metrics`` did not answer at the last poll: new requests go elsewhere
and its waiting ones are failed with :class:`BackendDown`, which the exchange takes as "queue again
on another" (:meth:`Backends.mark`).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gateway.admission import Capacity, Gate, Reason
from gateway.admission.gate import status_view
from gateway.admission.service import ServiceRates
from gateway.backends.breaker import Breaker
from gateway.backends.counting import CountGate
from gateway.backends.kv_index import PromptBlocks
from gateway.backends.kv_view import KVView
from gateway.backends.traits import UpstreamTraits
from gateway.backends.upstream import Upstream
from gateway.errors import GatewayError
from gateway.reasoning.policy import ReasoningShown


class Monitor(Protocol):
    """Watches one backend (:class:`~gateway.backends.monitor.BackendMonitor`): :meth:`scrape` reads
    named samples of its ``/metrics`` (``{name: value}``, None when the page can't be read); ``run``
    polls it, telling ``on_health`` whether it answered."""

    on_health: Callable[[bool], None] | None

    async def scrape(self, names: tuple[str, ...], timeout_s: float = 2.0) -> dict[str, float] | None: ...

    async def run(self) -> None: ...


class BackendDown(GatewayError):
    """The backend a request waited for went down: the exchange queues it on another one."""

    def __init__(self, name: str) -> None:
        super().__init__("upstream_unavailable", f"The model server {name} went down.")


@dataclass(eq=False, slots=True)
class Backend:
    """One backend pair: its ``name`` (metric label, shared-admission key), client, admission, its
    monitor (health, and the ``/metrics`` reads of the spec-counter deltas), the bound of the
    prompt counts sent to it outside the slots (with a client of their own), and what the gateway
    learnt of it while serving (``traits``: each backend its own, as two may run different vLLM
    versions or flags)."""

    name: str
    upstream: Upstream
    admission: Gate
    monitor: Monitor
    counts: CountGate
    kv: KVView
    """What its KV pool holds of a prompt (its events, else the estimate)."""
    breaker: Breaker = field(default_factory=Breaker)
    traits: UpstreamTraits = field(default_factory=UpstreamTraits)
    service: ServiceRates = field(default_factory=ServiceRates)
    """Its measured prefill and decode rates, and each key's mean output: what a request is expected
    to take of it (its writer: the requests' records, :meth:`ServiceRates.observe`)."""
    up: bool = True
    routed: int = 0
    """Requests placed here whose admission has not answered yet (:meth:`placed`, :meth:`unplaced`):
    between its decision and its admission a request is sized and its tokens reserved, and a shared
    admission's figures lag by a Redis round trip: a burst would all see the same idle backend."""

    def load(self) -> tuple[float, float]:
        """(sequences held + requests waiting or being admitted) per slot, KV reserved per budget (0
        with none)."""
        admission = self.admission
        budget = admission.capacity.kv_budget_tokens
        kv = admission.kv_reserved_tokens / budget if budget not in (0, math.inf) else 0.0
        return (admission.in_use + admission.queue_depth + self.routed) / admission.slots, kv

    def learn(
        self,
        reasoning: ReasoningShown | None = None,
        per_request_metrics: bool | None = None,
        counts_prompts: bool | None = None,
    ) -> None:
        """What one request showed of this backend (None: nothing of that), into :attr:`traits`: the
        one writer of what the gateway knows of it (:meth:`UpstreamTraits.with_learnt`)."""
        self.traits = self.traits.with_learnt(reasoning, per_request_metrics, counts_prompts)

    def health(self, up: bool) -> bool:
        """Its monitor's verdict (up: its ``/metrics`` answered); True when it went down now. Back up,
        its circuit lets requests through again (:meth:`~gateway.backends.breaker.Breaker.reachable`)."""
        went_down = self.up and not up
        self.up = up
        if up:
            self.breaker.reachable()
        return went_down

    def placed(self) -> None:
        """A request was placed here: it counts in :attr:`routed` until :meth:`unplaced`."""
        self.routed += 1

    def unplaced(self) -> None:
        """A request placed here was answered by admission, or left before."""
        self.routed -= 1


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a request runs and why: ``affinity`` (its session's backend) or ``least_loaded`` (a
    continuation of a stored response runs where that is stored, without asking)."""

    backend: Backend
    reason: Literal["affinity", "least_loaded"]


def affinity_key(body: Mapping[str, Any], session: str | None = None) -> str | None:
    """What keeps a conversation on one backend: ``session`` (the ``x-session-affinity`` header), else
    the body's ``prompt_cache_key`` (OpenAI: "used to cache responses for similar requests"),
    ``user``, ``safety_identifier``, or Anthropic's ``metadata.user_id``; None without any."""
    if session:
        return session
    for name in ("prompt_cache_key", "user", "safety_identifier"):
        if isinstance(value := body.get(name), str) and value:
            return value
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(value := metadata.get("user_id"), str) and value:
        return value
    return None


#: How much busier than the least loaded (requests per slot) a backend holding a longer prefix may be
#: and still be chosen for it: one more request a slot, about one turn's wait.
PREFIX_LOAD_SLACK = 1.0


class Backends:
    """All backend pairs (at least one), in configuration order. Also the gateway-wide load that the
    unlabelled ``gateway_slots_*`` / ``gateway_queue_*`` / ``gateway_kv_*`` series show: sums over
    the backends."""

    def __init__(self, backends: Iterable[Backend], affinity: bool = True) -> None:
        self.all = list(backends)
        if not self.all:
            raise ValueError("at least one backend is required")
        self.affinity = affinity
        self.by_name = {backend.name: backend for backend in self.all}

    def route(self, affinity: str | None = None, exclude: Iterable[Backend] = ()) -> Placed:
        """The backend for a request and why (see the module doc); ``exclude``: ones it was failed by."""
        gone = set(exclude)
        up = [b for b in self.all if b.up]
        candidates = (
            [b for b in up if b not in gone] or up or [b for b in self.all if b not in gone] or self.all
        )
        if self.affinity and affinity is not None:
            home = max(candidates, key=lambda b: hashlib.sha256(f"{affinity}|{b.name}".encode()).digest())
            return Placed(home, "affinity")
        return Placed(min(candidates, key=lambda b: (*b.load(), b.name)), "least_loaded")

    def longest_prefix(
        self,
        prompt: PromptBlocks,
        decided: Backend,
        exclude: Iterable[Backend],
        now: float,
        key: str,
        max_wait_s: float | None = None,
    ) -> Backend:
        """The backend among those up (not in ``exclude``) whose prefix cache holds the most of
        ``prompt``, if it holds more than ``decided`` does, has queue room for ``key`` (and an expected
        wait within ``max_wait_s``) and its load (:meth:`Backend.load`, not counting this request on
        ``decided``) is within :data:`PREFIX_LOAD_SLACK` of the least loaded's; else ``decided``
        (also when ``decided`` went down meanwhile: the fail-over decides then)."""
        gone = set(exclude)
        candidates = [b for b in self.all if b.up and b not in gone and b.kv.enabled]
        if len(candidates) < 2 or decided not in candidates:
            return decided
        loads = {b: b.load()[0] - (1 / b.admission.slots if b is decided else 0.0) for b in candidates}
        bound = min(loads.values()) + PREFIX_LOAD_SLACK
        best, most = decided, decided.kv.match(prompt, now)[0].cached_tokens
        for backend in candidates:
            if backend is decided or loads[backend] > bound:
                continue
            admission = backend.admission
            if admission.queue_refusal(key) is not None or (
                max_wait_s is not None and admission.expected_wait_s(key) > max_wait_s
            ):
                continue
            cached = backend.kv.match(prompt, now)[0].cached_tokens
            if cached > most:
                best, most = backend, cached
        return best

    def first_up(self) -> Backend:
        """A backend to ask what any of them answers alike (``/tokenize``, ``/v1/models``, ``/ready``)."""
        return next((b for b in self.all if b.up), self.all[0])

    def mark(self, backend: Backend, up: bool) -> None:
        """The monitor's verdict; a backend going down fails its waiters (:class:`BackendDown`), if
        another one is up to take them."""
        if backend.health(up) and any(b.up for b in self.all):
            backend.admission.fail_waiting(BackendDown(backend.name))

    # the gateway-wide load (GatewayMetrics' Load)

    @property
    def capacity(self) -> Capacity:
        kv = sum(b.admission.capacity.kv_budget_tokens for b in self.all)
        return Capacity(self.slots, kv, sum(b.admission.capacity.long_slots for b in self.all))

    @property
    def slots(self) -> int:
        return sum(b.admission.slots for b in self.all)

    @property
    def in_use(self) -> int:
        return sum(b.admission.in_use for b in self.all)

    @property
    def queue_depth(self) -> int:
        return sum(b.admission.queue_depth for b in self.all)

    @property
    def kv_reserved_tokens(self) -> int:
        return sum(b.admission.kv_reserved_tokens for b in self.all)

    @property
    def long_in_use(self) -> int:
        return sum(b.admission.long_in_use for b in self.all)

    def waiting_for(self) -> dict[str, int]:
        counts = {reason.value: 0 for reason in Reason}
        for backend in self.all:
            for reason, count in backend.admission.waiting_for().items():
                counts[reason] += count
        return counts

    def status(self) -> dict[str, object]:
        """``/admin/status``: the first backend's view when there is one (its ``upstream`` traits
        included), else the sums; and ``backends``: each one's name, health, circuit state
        (``closed``, ``open``, ``half_open``: :mod:`gateway.backends.breaker`), admission status and
        ``upstream`` traits."""
        now = time.monotonic()
        each = [
            {
                "name": b.name,
                "up": b.up,
                "circuit": b.breaker.state,
                **b.admission.status(),
                "upstream": b.traits.status(),
                "prefix_cache": b.kv.status(now),
            }
            for b in self.all
        ]
        if len(self.all) == 1:
            top = dict(each[0])
            del top["name"], top["up"], top["circuit"], top["prefix_cache"]
        else:
            in_flight: Counter[str] = Counter()
            waiting: Counter[str] = Counter()
            reasons: list[tuple[str, str]] = []
            for status in each:
                for key, counts in status["keys"].items():  # type: ignore[attr-defined]
                    in_flight[key] += counts["in_flight"]
                    waiting[key] += counts["waiting"]
                for key, why in status["waiting_by_key"].items():  # type: ignore[attr-defined]
                    reasons += [(key, reason) for reason, count in why.items() for _ in range(count)]
            top = status_view(self, in_flight, waiting, reasons)
        return {**top, "backends": each}
