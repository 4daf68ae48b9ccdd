"""Admission: what may run on the backend now, and who waits, in per-key queues served fairly.

The backend runs ``--max-num-seqs`` sequences (2 on the DGX Spark pair) over one shared KV pool; a
request sent beyond either only waits inside vLLM (or is preempted and recomputed there), out of the
gateway's sight and fairness. So the gateway holds the queue itself and admits a request only when its
:class:`~gateway.admission.capacity.Need` — slots, KV tokens, the long-prompt lane — fits beside the
running ones (:class:`~gateway.admission.capacity.Capacity`).

Order and fairness: each key has its own FIFO queue, and the queue as a whole is ordered by expected
work — fair queueing over the keys, a request's cost being its expected service time
(:attr:`Need.service_s`: its uncached prefill and expected output at the backend's measured rates,
:mod:`gateway.admission.service`). A request of key k gets the finish tag ``max(V, F_k) + service_s /
priority_k``, where ``F_k`` is the tag of k's previous request and ``V`` the virtual time: the start tag
(``max(V, F_k)`` when it was tagged) of the request admitted last (start-time fair queueing's clock:
Goyal, Vin and Cheng, SIGCOMM 1996), and at least the finish tag of every request that has ended; the
lowest finish tag that fits goes first (ties in arrival order), as in weighted fair queueing. So a
one-line question waits behind little, a 150k-token cold prefill behind more, and what a key gets is
weighed in expected seconds, not requests. Guarantees: a key's requests keep their order; a request of
service ``s`` of a key of priority ``p`` waits behind at most ``s * p_j / p`` seconds of expected work
of each other key j that arrived after it (their tags start at ``V`` or later), plus one request of each
key tagged below it already — so a key flooding 100 requests delays another key's request of like size
by at most one of its own, and no request starves; a key holding nothing joins ahead of keys that hold
some (their tags run on from their running requests'). Priority weights a key's share (a key of priority
3 gets three times the expected seconds of a key of priority 1 when both wait). A key at its
``max_concurrency`` is skipped until one of its requests ends.

Classes: a request is ``interactive`` (the default) or ``batch`` (:attr:`Need.batch`): no batch request
is admitted while an interactive one that fits waits; the order above holds within each class. Batch
work fills the slots interactive work leaves (under sustained interactive load, it waits: its queue
timeout bounds that), and gives them back: with ``preempt_batch``, an interactive waiter that needs only
slots or KV that batch requests hold has the youngest of those leases marked :attr:`Lease.preempted`
(:meth:`_preempt`); their holders abort them (vLLM frees the sequence) and release them, and the waiter
is admitted. With ``preempt_prefill``, an interactive waiter takes a slot the same way from a streamed
request still in its prefill (:attr:`Lease.prefilling`) that is due after it (a higher tag) and expected
to take at least :data:`PREFILL_PREEMPT_RATIO` times as long — a short chat need not wait for a cold
150k-token prompt's minutes of prefill. vLLM caches a prompt's blocks as it computes them and keeps them
when the request is aborted, so the preempted request, sent again with its tag
(:attr:`Need.rejoin_tag`: it keeps its place, and its ending raises no virtual time), resumes its
prefill where it stopped. It can be preempted again only by requests tagged below it, and the virtual
time reaches its tag as the requests before it end: the bound above holds, each preemption costing it
a re-send. The queue keeps room for keys with nothing waiting: a key that already waits may not take
the last :attr:`Admission.reserve` places.

Agent sessions: when a turn of a session (:attr:`Need.session`) ends, its prompt and output stay in the
backend's prefix cache, and the agent's next turn — usually within a second — finds them there. For
``session_hold_s`` the gateway *holds* them: a cold long prompt (:attr:`Need.long`, its uncached tokens
past the long-prompt threshold) of another session that would need the pool those blocks take (running
requests' KV + its own + what the held sessions' last turns held past the budget) waits
(:attr:`Reason.HELD`) until the hold is used or over; a shorter request is never held back, as what it
could evict is short too (vLLM evicts a freed prefix from its last block, so a held session loses no
more than that request's tokens and recomputes them in a fraction of the hold); while one waits so, the
held session's next turn is admitted first, most recently used session first, so the hold ends soon (a
turn sent after the hold began: requests of a session queued together take their turns as any others, so
a flood of one conversation does not pass other keys). With nobody held back, a session's turn takes its
place in the fair queue: requests that fit beside the holds are not delayed by them. A request admitted
past the holds cuts those the pool has no more room for, least recently used first, from their ends. A
waiter is held back for ``session_hold_s`` at most from when it joined, and once one has waited that
long no turn is resumed ahead of the fair queue: no hold delays a request by more than
``session_hold_s`` and a turn. A hold keeps the turn's prompt (its output is seldom reused), and a key
keeps at most :data:`HOLDS_PER_KEY` holds (a client sending a new session per request collects no more);
a grant given back unused holds nothing.

No head-of-line blocking: when the request of the lowest tag does not fit (a 900k-token prompt waiting
for KV, a second long prompt waiting for the lane), the next one in tag order that fits runs instead.
Each pass over a waiter counts; one passed ``bypass_limit`` times is *guarded*: from then on a request
is admitted ahead of it only if that leaves the guarded one able to run as soon as the holders it
waits for have left (:meth:`Capacity.spares`), and it is admitted first whenever it fits. So a long
request behind a stream of short ones waits at most ``bypass_limit`` grants plus the end of the
requests running when it was guarded.

Invariants (tested):
- the running requests' needs fit the capacity at every instant; a freed slot goes straight to a
  waiter that fits (no barging);
- every grant is released exactly once, whatever path the request leaves by: a waiter that is
  cancelled (client gone) or times out leaves its queue, and one cancelled in the same tick it was
  granted gives the grant back.

Pure asyncio: no web framework, no HTTP client.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, replace

from gateway.admission.capacity import Capacity, Held, Need, Reason
from gateway.admission.errors import QueueFullError
from gateway.admission.gate import HeldLoad, expected_wait_s, status_view
from gateway.admission.lease import Lease, Waiter, lease_when_granted
from gateway.config import Settings

#: The need of a plain request: one sequence, no KV accounted, not long.
ONE = Need()


def _rank(waiter: Waiter) -> tuple[float, int]:
    """A waiter's place in the fair queue: its tag, then its arrival."""
    return waiter.tag, waiter.order


#: Weight of the newest hold time in the moving average behind ``Retry-After``.
_EWMA_ALPHA = 0.2
#: Most sessions one key has held at once; its oldest hold goes first.
HOLDS_PER_KEY = 2
#: How many times longer than an interactive waiter's expected service a streamed request's must be for
#: its prefill to yield the slot (``GATEWAY_PREFILL_PREEMPTION``): a re-send costs its prompt's
#: tokenization and lookup, worth it only for a wait many times the waiter's own.
PREFILL_PREEMPT_RATIO = 8.0
#: Least expected service, s, of a streamed request whose prefill may yield its slot: below that the
#: waiter would not wait long for it anyway.
PREFILL_PREEMPT_MIN_S = 1.0
#: Added to a hold's timer, s: the loop may run a timer a hair before the clock reads its deadline.
_TIMER_SLACK_S = 0.005
#: Grid the times a hold ends are rounded up to, s: a burst of requests shares one look again.
_DUE_GRID_S = 0.01


@dataclass(frozen=True, slots=True)
class SessionHold:
    """A session's cached prefix kept for its next turn: ``tokens`` of KV, ``key``'s, from ``since``
    until ``until`` (monotonic s)."""

    key: str
    tokens: int
    since: float
    until: float


class Admission(HeldLoad):
    """Slots, KV pool and lane, with bounded, fair per-key wait queues.

    Args:
        slots: sequences allowed upstream at once (vLLM ``--max-num-seqs``).
        queue_max: requests allowed to wait in total; one more gets :class:`QueueFullError`.
        queue_timeout_s: longest wait in seconds before :class:`QueueTimeoutError`.
        queue_max_per_key: requests one key may have waiting (None: only the total bound).
        kv_budget_tokens: the KV pool the running requests' ``kv_tokens`` share (None: no bound).
        long_slots: long-prompt requests allowed at once (None: ``slots``, no express lane).
        long_queue_timeout_s: the queue timeout of a long-prompt request (None: ``queue_timeout_s``);
            it may wait for another one's whole prefill.
        bypass_limit: passes after which a waiter is guarded (see the module doc).
        session_hold_s: how long an agent session's cached prefix is held for its next turn, s (0:
            never).
        preempt_batch: interactive waiters take slots and KV back from batch requests (see the
            module doc).
        preempt_prefill: interactive waiters take slots back from much longer streamed requests
            still in their prefill (see the module doc).

    ``in_use`` counts sequences holding slots, ``kv_reserved_tokens`` their KV, ``long_in_use`` the
    long requests running; ``grants`` counts every grant to a waiter so far; ``reserve`` is the queue
    room kept for keys with nothing waiting (a quarter of ``queue_max``).
    """

    def __init__(
        self,
        slots: int,
        queue_max: int,
        queue_timeout_s: float,
        queue_max_per_key: int | None = None,
        *,
        kv_budget_tokens: int | None = None,
        long_slots: int | None = None,
        long_queue_timeout_s: float | None = None,
        bypass_limit: int = 8,
        session_hold_s: float = 0.0,
        preempt_batch: bool = False,
        preempt_prefill: bool = False,
    ) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        long_slots = slots if long_slots is None else long_slots
        if not 1 <= long_slots <= slots:
            raise ValueError("long_slots must be within 1..slots")
        budget = math.inf if kv_budget_tokens is None else kv_budget_tokens
        self.capacity = Capacity(slots, budget, long_slots)
        self.queue_max = queue_max
        self.queue_timeout_s = queue_timeout_s
        self.long_queue_timeout_s = long_queue_timeout_s or queue_timeout_s
        self.queue_max_per_key = queue_max_per_key
        self.bypass_limit = bypass_limit
        self.grants = 0
        self.reserve = max(1, queue_max // 4)
        self.held = Held()
        self._holders: dict[int, Need] = {}  # grant id -> need, oldest grant first
        self._next_grant = 0
        self._queues: dict[str, deque[Waiter]] = {}  # each key's waiters, in arrival (and tag) order
        self._vtime = 0.0  # the fair queue's virtual time (see the module doc)
        self._finish: dict[str, float] = {}  # each key's last finish tag, while it can exceed _vtime
        self._arrivals = itertools.count()
        self._active: set[Lease] = set()
        self._active_per_key: Counter[str] = Counter()
        self._waiting = 0
        self._batch = 0  # of them batch requests
        self._guarded: Waiter | None = None
        self._mean_hold_s = 10.0
        self.session_hold_s = session_hold_s
        self.preempt_batch = preempt_batch
        self.preempt_prefill = preempt_prefill
        self._holds: dict[str, SessionHold] = {}  # by session, the most recently used last
        self._due: deque[float] = deque()  # when a hold or a hold-back ends, soonest first
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    def configured(cls, settings: Settings) -> Admission:
        """The admission ``settings`` describe (``GATEWAY_SLOTS``, ``GATEWAY_KV_BUDGET_TOKENS``, ...)."""
        return cls(
            settings.slots,
            settings.queue_max,
            settings.queue_timeout_s,
            settings.queue_max_per_key,
            kv_budget_tokens=settings.kv_budget_tokens,
            long_slots=settings.slots - settings.express_slots,
            long_queue_timeout_s=settings.queue_timeout_long_s,
            bypass_limit=settings.bypass_limit,
            session_hold_s=settings.session_hold_s if settings.prefix_caching else 0.0,
            preempt_batch=settings.batch_preemption,
            preempt_prefill=settings.prefill_preemption,
        )

    def waiting_for(self) -> dict[str, int]:
        """Requests waiting now, by what they wait for (every :class:`Reason`, zeros included)."""
        counts = Counter(w.reason for queue in self._queues.values() for w in queue if w.reason)
        return {reason.value: counts[reason] for reason in Reason}

    def retry_after_s(self) -> int:
        """Seconds a client should wait before retrying: the queue ahead drained at the mean hold time."""
        return max(1, math.ceil(self._mean_hold_s * (self._waiting + 1) / self.slots))

    def status(self) -> dict[str, object]:
        """Live view for ``/admin/status``: slots, KV reserved vs budget, the lane, what the waiting
        requests wait for, and per key its requests in flight and waiting."""
        waiting = {key: len(queue) for key, queue in self._queues.items()}
        reasons = ((w.key, w.reason.value) for queue in self._queues.values() for w in queue if w.reason)
        return {**status_view(self, self._active_per_key, waiting, reasons), "session_holds": self.holds()}

    def position(self, waiter: Waiter) -> int:
        """Estimated grants before ``waiter`` (1 = next): the waiters of its class or an earlier one
        with a lower tag (passing for what does not fit ignored)."""
        queue = self._queues.get(waiter.key)
        if not queue or waiter not in queue:
            return 0
        rank = (waiter.need.batch, waiter.tag, waiter.order)
        return 1 + sum((w.need.batch, w.tag, w.order) < rank for q in self._queues.values() for w in q)

    def enqueue(
        self, key: str = "", priority: int = 1, max_concurrency: int | None = None, need: Need = ONE
    ) -> Lease | Waiter:
        """Admit ``need`` now if it fits and nobody waits, else join ``key``'s queue (and be admitted at
        once if it fits where the waiters don't). Raises :class:`QueueFullError` (the queue, the key's
        bound, or the reserve a key that waits already may not take), ``ValueError`` for a need no idle
        backend could hold (:meth:`Capacity.never_fits`)."""
        if (why := self.capacity.never_fits(need)) is not None:
            raise ValueError(why)
        now = time.monotonic()
        if not self._queues and self._key_free(key, max_concurrency) and self._fits(need, now, now):
            tag = self._tag(key, priority, need)
            self._vtime = max(self._vtime, tag - need.service_s / max(1, priority))
            return Lease(self, key, self._take(key, need), need, tag=tag)
        # a preempted request queuing again had its place: the queue's bounds do not refuse it
        if need.rejoin_tag is None and (refusal := self._no_room(key)) is not None:
            raise refusal
        timeout = self.long_queue_timeout_s if need.long else self.queue_timeout_s
        future = asyncio.get_running_loop().create_future()
        waiter = Waiter(key, max(1, priority), max_concurrency, future, need, timeout)
        waiter.tag, waiter.order = self._tag(key, priority, need), next(self._arrivals)
        if need.long and self.session_hold_s > 0:  # held back (by holds now or to come) that long at most
            self._look_again(now + self.session_hold_s)
        self._queues.setdefault(key, deque()).append(waiter)
        self._waiting += 1
        self._batch += need.batch
        self._dispatch()
        return waiter

    def _tag(self, key: str, priority: int, need: Need) -> float:
        """The finish tag of ``key``'s next request (see the module doc): it starts at the later
        of the virtual time and the key's last finish tag, and lasts its expected service time over
        the key's weight (``priority``); a preempted request's own (:attr:`Need.rejoin_tag`)."""
        if need.rejoin_tag is not None:
            return need.rejoin_tag
        tag = max(self._vtime, self._finish.get(key, 0.0)) + need.service_s / max(1, priority)
        self._finish[key] = tag
        return tag

    def _no_room(self, key: str) -> QueueFullError | None:
        """The queue's refusal of one more waiter of ``key``: the whole queue full (its last quarter
        kept for keys with nothing waiting), or the key's bound."""
        waits = len(self._queues.get(key, ()))
        if self._waiting >= self.queue_max - (self.reserve if waits else 0):
            return QueueFullError(self.retry_after_s(), per_key=waits > 0)
        if self.queue_max_per_key is not None and waits >= self.queue_max_per_key:
            return QueueFullError(self.retry_after_s(), per_key=True)
        return None

    def expected_wait_s(self, key: str) -> float:
        if self.held.sequences < self.capacity.slots:  # the waiters could not take it: this one may
            return 0.0
        queued = {k: len(q) for k, q in self._queues.items()}
        return expected_wait_s(self._mean_hold_s, self.slots, self._waiting, queued, key)

    def queue_refusal(self, key: str) -> QueueFullError | None:
        """:meth:`_no_room`, for a request that would have to wait: others wait, or every slot is held."""
        if not self._queues and self.held.sequences < self.capacity.slots:
            return None
        return self._no_room(key)

    async def admit(
        self, key: str = "", priority: int = 1, max_concurrency: int | None = None, need: Need = ONE
    ) -> Lease | Waiter:
        """:meth:`enqueue`, as the request pipeline calls every :class:`~gateway.admission.gate.Gate`."""
        return self.enqueue(key, priority, max_concurrency, need)

    async def wait(self, waiter: Waiter) -> Lease:
        """Wait for ``waiter``'s admission. Raises :class:`QueueTimeoutError`; cancellation leaks nothing."""
        return await lease_when_granted(self, waiter)

    def abandon(self, waiter: Waiter) -> None:
        """Give up ``waiter``'s place: out of its queue, or, if it was granted what no :class:`Lease`
        holds, the grant back. Idempotent; nothing for a waiter that became a lease."""
        if waiter.settled:
            return
        waiter.settled = True
        waiter.note(None, time.monotonic())
        if waiter.grant is not None:
            self._give_back(waiter.key, waiter.grant, None)  # granted in the tick it was given up
            return
        waiter.future.cancel()
        self._discard(waiter)
        self._dispatch()  # a guarded waiter leaving may let others in

    def fail_waiting(self, error: Exception) -> None:
        """Fail every waiter with ``error`` (their backend went down): each one's :meth:`wait` raises it
        and gives its place up."""
        for queue in self._queues.values():
            for waiter in queue:
                if not waiter.future.done():
                    waiter.future.set_exception(error)

    async def acquire(
        self, key: str = "", priority: int = 1, max_concurrency: int | None = None, need: Need = ONE
    ) -> Lease:
        """Wait for admission and return the lease (:meth:`enqueue` then :meth:`wait`)."""
        entry = self.enqueue(key, priority, max_concurrency, need)
        return entry if isinstance(entry, Lease) else await self.wait(entry)

    def _fits(self, need: Need, since: float, now: float) -> bool:
        """Whether ``need``, waiting since ``since``, may run now: the capacity has room for it, and
        it evicts no held session's prefix (or has waited ``session_hold_s`` already)."""
        return self._blocker(need, since, now) is None

    def _blocker(self, need: Need, since: float, now: float) -> Reason | None:
        reason = self.capacity.blocker(self.held, need)
        if reason is None and need.long and self._holds and now - since < self.session_hold_s:
            kept = self._held_tokens(need.session, now)
            if self.held.kv_tokens + need.kv_tokens + kept > self.capacity.kv_budget_tokens:
                return Reason.HELD
        return reason

    def _held_tokens(self, session: str | None, now: float) -> int:
        """KV tokens the live holds of sessions other than ``session`` keep (expired holds dropped: the
        oldest first, as every hold lasts ``session_hold_s`` from its place at the end)."""
        while self._holds and next(iter(self._holds.values())).until <= now:
            del self._holds[next(iter(self._holds))]
        return sum(hold.tokens for name, hold in self._holds.items() if name != session)

    def _hold(self, key: str, need: Need) -> None:
        """Hold the prefix a turn of ``need.session`` leaves, for its next turn; a key's oldest hold
        goes past :data:`HOLDS_PER_KEY`."""
        assert need.session is not None
        self._holds.pop(need.session, None)
        mine = [name for name, hold in self._holds.items() if hold.key == key]
        for name in mine[: max(0, len(mine) - HOLDS_PER_KEY + 1)]:
            del self._holds[name]
        now = time.monotonic()
        self._holds[need.session] = SessionHold(key, need.footprint, now, now + self.session_hold_s)
        self._look_again(now + self.session_hold_s)

    def _look_again(self, at: float) -> None:
        """Dispatch again at ``at`` (monotonic s), rounded up to :data:`_DUE_GRID_S`. Every such time is
        now + ``session_hold_s``, so they come in order: one timer, for the soonest, serves them all."""
        at = math.ceil(at / _DUE_GRID_S) * _DUE_GRID_S
        if self._due and self._due[-1] >= at:
            return
        self._due.append(at)
        if self._timer is None:
            self._arm(time.monotonic())

    def _arm(self, now: float) -> None:
        delay = max(0.0, self._due[0] - now) + _TIMER_SLACK_S
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_due)

    def _on_due(self) -> None:
        now = time.monotonic()
        while self._due and self._due[0] <= now:
            self._due.popleft()
        self._timer = None
        if self._due:
            self._arm(now)
        self._dispatch()

    async def take_hold(self, session: str) -> int:
        """Give up ``session``'s hold (its next turn runs on another backend); the tokens it held."""
        self._held_tokens(None, time.monotonic())
        hold = self._holds.pop(session, None)
        if hold is not None:
            self._dispatch()  # the waiters it held back may go
        return 0 if hold is None else hold.tokens

    async def adopt_hold(self, key: str, session: str, tokens: int) -> None:
        """Hold ``tokens`` of ``session``'s prefix from now, for ``session_hold_s``, as a turn's end
        would (a hold taken from another backend, :meth:`take_hold`)."""
        if self.session_hold_s > 0 and tokens > 0:
            self._hold(key, Need(session=session, footprint=tokens))
            self._evict_holds()

    def holds(self) -> list[dict[str, object]]:
        """The live holds, most recently used first: session, key, tokens, seconds left."""
        now = time.monotonic()
        self._held_tokens(None, now)
        return [
            {"session": name, "key": hold.key, "tokens": hold.tokens, "left_s": round(hold.until - now, 3)}
            for name, hold in reversed(self._holds.items())
        ]

    def _key_free(self, key: str, max_concurrency: int | None) -> bool:
        return max_concurrency is None or self._active_per_key[key] < max_concurrency

    def _discard(self, waiter: Waiter) -> None:
        queue = self._queues.get(waiter.key)
        if queue is None or waiter not in queue:
            return
        queue.remove(waiter)
        self._waiting -= 1
        self._batch -= waiter.need.batch
        if waiter is self._guarded:
            self._guarded = None
        if not queue:
            self._drop_key(waiter.key)

    def _drop_key(self, key: str) -> None:
        del self._queues[key]
        self._forget(key)

    def _forget(self, key: str) -> None:
        """Drop ``key``'s finish tag once nothing of it waits or runs and the virtual time has reached
        it (its next request starts at the virtual time anyway); now and then every such key's, so
        the tags kept stay bounded by the keys waiting or running."""
        idle = key not in self._queues and not self._active_per_key.get(key)
        if idle and self._finish.get(key, math.inf) <= self._vtime:
            del self._finish[key]
        if len(self._finish) > 4 * (len(self._queues) + len(self._active_per_key)) + 64:
            self._finish = {
                k: tag
                for k, tag in self._finish.items()
                if tag > self._vtime or k in self._queues or self._active_per_key.get(k)
            }

    def _dispatch(self) -> None:
        """Admit waiters while one fits: the guarded one first, then in the fair queue's tag order
        (passing the ones that don't fit); then note what each one left waits for."""
        now = time.monotonic()
        while self._waiting and self.held.sequences < self.slots:
            resumed = self._resumed()
            if resumed is not None:
                self._admit(resumed)
                continue
            guarded = self._guard()
            if (
                guarded is not None
                and self._key_free(guarded.key, guarded.max_concurrency)
                and self._fits(guarded.need, guarded.enqueued_at, now)
            ):
                self._admit(guarded)
                continue
            chosen = self._pick(guarded)
            if chosen is None:
                break
            self._admit(chosen)
        if (self.preempt_batch or self.preempt_prefill) and self._waiting > self._batch:
            self._preempt(now)
        self._note_reasons()

    def _preempt(self, now: float) -> None:
        """Take slots back for the interactive waiters, in tag order, that wait for a slot or KV only:
        for each, the leases that may yield to it (:meth:`_yields`: batch ones, the youngest first —
        the least work lost —, then prefills, the last due first) whose leaving lets it run are marked
        :attr:`Lease.preempted` (their holders abort and release them); leases marked already count
        as gone, and each waiter they make room for as running, so a waiter preempts at most what it
        needs, once. Stops at the first one that no yielding lease would make fit."""
        spare = [
            lease
            for lease in self._active
            if not lease.preempted.is_set()
            and ((self.preempt_batch and lease.need.batch) or (self.preempt_prefill and lease.prefilling))
        ]
        if not spare:
            return
        spare.sort(key=lambda x: (not x.need.batch, -x.grant if x.need.batch else -x.tag))
        after = self.held
        for lease in self._active:  # marked and leaving (a prefill whose output began stays)
            if lease.preempted.is_set() and (lease.need.batch or lease.prefilling):
                after = after.minus(lease.need)
        for waiter in heapq.merge(*self._queues.values(), key=_rank):
            if (
                waiter.need.batch
                or waiter.future.done()
                or not self._key_free(waiter.key, waiter.max_concurrency)
            ):
                continue
            if self._blocker(waiter.need, waiter.enqueued_at, now) not in (Reason.SLOT, Reason.KV):
                continue
            yielding = [lease for lease in spare if self._yields(lease, waiter)]
            taken: list[Lease] = []
            while self.capacity.blocker(after, waiter.need) is not None and yielding:
                taken.append(yielding.pop(0))
                after = after.minus(taken[-1].need)
            if self.capacity.blocker(after, waiter.need) is not None:
                return
            for lease in taken:
                lease.preempted.set()
                spare.remove(lease)
            after = after.plus(waiter.need)

    @staticmethod
    def _yields(lease: Lease, waiter: Waiter) -> bool:
        """Whether ``lease`` gives its slot up for ``waiter``: a batch request always; a prefill when
        it is due after the waiter and expected to take :data:`PREFILL_PREEMPT_RATIO` times as long,
        and :data:`PREFILL_PREEMPT_MIN_S` at least."""
        if lease.need.batch:
            return True
        service = lease.need.service_s
        longer = service >= PREFILL_PREEMPT_MIN_S and service >= PREFILL_PREEMPT_RATIO * waiter.need.service_s
        return lease.tag > waiter.tag and longer

    def _resumed(self) -> Waiter | None:
        """The waiting next turn of a held session that fits, the most recently used session first,
        while a waiter is held back by the holds (:attr:`Reason.HELD`). A next
        turn is one sent after the hold began (an agent's, after its last answer): requests of a
        session queued together take their turns as any others. None while a waiter is guarded or has
        waited ``session_hold_s``: the fair queue serves them first."""
        if not self._holds or self._guarded is not None:
            return None
        now = time.monotonic()
        kept = self._held_tokens(None, now)
        room = self.capacity.kv_budget_tokens - self.held.kv_tokens - kept
        turns: dict[str, Waiter] = {}
        held_back = False
        for queue in self._queues.values():
            for waiter in queue:
                if now - waiter.enqueued_at >= self.session_hold_s and not waiter.future.done():
                    return None  # one has waited a hold's length: no turn passes it any more
                need = waiter.need
                if need.session is not None:
                    turns.setdefault(need.session, waiter)
                if not held_back and need.kv_tokens > room:  # past the holds: is it the holds that stop it?
                    held_back = self._blocker(need, waiter.enqueued_at, now) is Reason.HELD
        if not held_back:
            return None
        for session, hold in reversed(self._holds.items()):
            turn = turns.get(session)
            if (
                turn is not None
                and turn.enqueued_at >= hold.since
                and not turn.future.done()
                and self._key_free(turn.key, turn.max_concurrency)
                and self._fits(turn.need, turn.enqueued_at, now)
            ):
                return turn
        return None

    def _pick(self, guarded: Waiter | None) -> Waiter | None:
        """The waiter of the lowest tag that fits (and spares ``guarded``), interactive ones before any
        batch one; each one passed that did not fit gets a pass (a batch waiter is not passed by an
        interactive one: it comes after them by its class)."""
        passed: list[Waiter] = []
        gone: list[Waiter] = []
        chosen: Waiter | None = None
        now = time.monotonic()
        holders = self._holders.values()
        queues = [q for key, q in self._queues.items() if self._key_free(key, q[0].max_concurrency)]
        for batch in (False, True) if self._batch else (False,):
            for waiter in heapq.merge(*queues, key=_rank):  # each key's queue is in tag order
                if waiter.need.batch is not batch:
                    continue
                if waiter.future.done():  # cancelled (client gone, queue timeout), its task not yet run
                    gone.append(waiter)
                elif waiter is guarded or not self._fits(waiter.need, waiter.enqueued_at, now):
                    passed.append(waiter)
                elif guarded is None or self.capacity.spares(self.held, holders, guarded.need, waiter.need):
                    chosen = waiter
                    break
            if chosen is not None:
                break
        for waiter in gone:
            self._discard(waiter)
        if chosen is not None:
            for waiter in passed:
                waiter.passes += 1
        return chosen

    def _guard(self) -> Waiter | None:
        """The guarded waiter: the one guarded already, else the oldest passed ``bypass_limit`` times.
        One whose future is done (cancelled, timed out, failed, its task not yet run) is dropped."""
        if self._guarded is not None and self._guarded.future.done():
            self._discard(self._guarded)
        if self._guarded is None:
            over = [
                w
                for q in self._queues.values()
                for w in q
                if w.passes >= self.bypass_limit and not w.future.done()
            ]
            if over:
                self._guarded = min(over, key=lambda w: w.enqueued_at)
        return self._guarded

    def _admit(self, waiter: Waiter) -> None:
        key = waiter.key
        queue = self._queues[key]
        queue.remove(waiter)
        self._waiting -= 1
        self._batch -= waiter.need.batch
        if waiter is self._guarded:
            self._guarded = None
        waiter.grant = self._take(key, waiter.need)
        waiter.note(None, time.monotonic())
        self.grants += 1
        waiter.future.set_result(None)
        self._vtime = max(self._vtime, waiter.tag - waiter.need.service_s / waiter.priority)
        if not queue:
            self._drop_key(key)

    def _note_reasons(self) -> None:
        now = time.monotonic()
        guarded = self._guarded
        holders = self._holders.values()
        for key, queue in self._queues.items():
            for waiter in queue:
                if not self._key_free(key, waiter.max_concurrency):
                    reason: Reason | None = Reason.KEY
                else:
                    reason = self._blocker(waiter.need, waiter.enqueued_at, now)
                if (
                    reason is None
                    and guarded is not None
                    and waiter is not guarded
                    and not self.capacity.spares(self.held, holders, guarded.need, waiter.need)
                ):
                    reason = Reason.RESERVED
                waiter.note(reason or Reason.SLOT, now)

    def _take(self, key: str, need: Need) -> int:
        # counted at grant, so max_concurrency and the capacity hold before the waiter's Lease exists
        grant = self._next_grant
        self._next_grant += 1
        self._holders[grant] = need
        self.held = self.held.plus(need)
        if need.session is not None:
            self._holds.pop(need.session, None)  # its turn came: the prefix is this request's now
        if self._holds:
            self._evict_holds()
        self._active_per_key[key] += 1
        return grant

    def _evict_holds(self) -> None:
        """Cut the holds the running requests leave no room for, least recently used first, each from
        its end: vLLM evicts those blocks first (its free-block queue, a freed prefix's last block
        first), and a hold counted past the pool would hold back every later cold prompt. Run at
        every grant, it keeps running KV + holds within the pool: a hold made when a turn ends keeps
        no more than the turn gave back."""
        kept = sum(hold.tokens for hold in self._holds.values())
        over = self.held.kv_tokens + kept - self.capacity.kv_budget_tokens
        for name, hold in list(self._holds.items()):
            if over <= 0:
                return
            if hold.tokens > over:
                self._holds[name] = replace(hold, tokens=hold.tokens - int(over))
                return
            over -= self._holds.pop(name).tokens

    def hold(self, lease: Lease) -> None:
        """Lease bookkeeping: ``lease`` is held (the others it overlaps are marked)."""
        self._active.add(lease)
        if len(self._active) > 1:
            for held in self._active:
                held.overlapped = True

    def unhold(self, lease: Lease, held_s: float) -> None:
        """Lease bookkeeping: ``lease``, held ``held_s`` s, is released; its grant goes to the waiters."""
        self._active.discard(lease)
        self._mean_hold_s += _EWMA_ALPHA * (held_s - self._mean_hold_s)
        # a prefill cut has not ended: it queues again with its tag, and holds no prefix
        cut = lease.preempted.is_set() and lease.prefilling
        self._give_back(lease.key, lease.grant, None if cut else lease.tag)

    def _give_back(self, key: str, grant: int, ended_tag: float | None) -> None:
        """Grant ``grant`` of ``key`` given back; ``ended_tag``: the finish tag of a request that ran
        to its end (None: it did not run, or its prefill was cut)."""
        need = self._holders.pop(grant)
        ran = ended_tag is not None
        if ended_tag is not None:
            self._vtime = max(self._vtime, ended_tag)  # its work is done: no key owes it
        self.held = self.held.minus(need)
        if ran and need.session is not None and need.footprint and self.session_hold_s > 0:
            self._hold(key, need)
        self._active_per_key[key] -= 1
        if self._active_per_key[key] <= 0:
            del self._active_per_key[key]
            self._forget(key)
        self._dispatch()
