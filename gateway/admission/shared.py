"""Admission shared by every gateway replica in front of one backend: its holders and its fair queue
live in Redis (:mod:`~gateway.admission.shared_scripts`), so the backend never sees more than its
slots and KV budget from all replicas together, and one key flooding one replica can't starve another
key's request on another.

- A grant is a *lease* in Redis with a TTL (``GATEWAY_ADMISSION_LEASE_TTL_S``) that the holding replica
  renews every third of it; a replica killed with -9 stops renewing, and its slots come back within
  the TTL (so do its queued tickets). Each lease carries a fencing token: a release after expiry is a
  no-op, never another holder's capacity.
- Grants reach the waiting replica by pub/sub (``grant:<replica>``); a missed message is found at
  the next renewal. A release is sent in the background: the caller's path does no Redis I/O on the
  way out, and a lost release still ends within the TTL.
- What each waiter waits for and its place are the scripts' answer at enqueue and at every renewal;
  the totals ``/metrics`` and ``/admin/status`` show are the last answer's, at most a renewal old.
- Agent session holds live in Redis too (``GATEWAY_SESSION_HOLD_S``): a turn released on one replica
  holds its session's prefix against cold long prompts queued on any replica, and its next turn,
  whichever replica it reaches, is resumed first. A replica whose waiter is held back looks again
  (a renewal) when the script says the hold-back or the soonest hold ends.

Each replica must be configured with the same capacity (slots, KV budget, lane, hold) for a backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Awaitable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.admission.capacity import Capacity, Held, Need, Reason
from gateway.admission.errors import AdmissionUnavailableError, QueueFullError
from gateway.admission.gate import HeldLoad, expected_wait_s, status_view
from gateway.admission.lease import Lease, Waiter, lease_when_granted
from gateway.admission.shared_scripts import ABANDON, ENQUEUE, MOVE_HOLD, RELEASE, RENEW
from gateway.config import Settings

log = logging.getLogger("gateway.admission.shared")

#: Added to a look again's delay, s: the scripts' clock counts whole milliseconds.
_CLOCK_GRAIN_S = 0.005


class SharedAdmission(HeldLoad):
    """One backend's admission in Redis (``client``), its keys under ``prefix``
    (``<GATEWAY_ADMISSION_NAMESPACE>:admission:{<backend>}:``).

    Args as :class:`~gateway.admission.scheduler.Admission`'s (``session_hold_s`` among them), plus
    ``lease_ttl_s``: how long a lease or a queued ticket outlives its replica's last renewal, s.
    """

    def __init__(
        self,
        client: Redis,
        prefix: str,
        capacity: Capacity,
        queue_max: int,
        queue_timeout_s: float,
        queue_max_per_key: int | None = None,
        *,
        long_queue_timeout_s: float | None = None,
        bypass_limit: int = 8,
        lease_ttl_s: float = 10.0,
        session_hold_s: float = 0.0,
    ) -> None:
        self.capacity = capacity
        self.queue_max = queue_max
        self.queue_timeout_s = queue_timeout_s
        self.long_queue_timeout_s = long_queue_timeout_s or queue_timeout_s
        self.queue_max_per_key = queue_max_per_key
        self.reserve = max(1, queue_max // 4)
        self.lease_ttl_s = lease_ttl_s
        self.session_hold_s = session_hold_s
        self.replica = uuid.uuid4().hex
        self.grants = 0
        self.held = Held()
        self._client = client
        self._prefix = prefix
        self._channel = f"{prefix}grant:{self.replica}"
        kv = capacity.kv_budget_tokens
        self._capacity_args = [
            capacity.slots, -1 if kv == math.inf else int(kv), capacity.long_slots,
            int(lease_ttl_s * 1000), bypass_limit, int(session_hold_s * 1000),
        ]  # fmt: skip
        self._enqueue = client.register_script(ENQUEUE)
        self._release = client.register_script(RELEASE)
        self._abandon = client.register_script(ABANDON)
        self._renew = client.register_script(RENEW)
        self._move_hold = client.register_script(MOVE_HOLD)
        self._waiters: dict[str, Waiter] = {}
        self._enqueuing: set[str] = set()  # tickets whose ENQUEUE has not answered yet
        self._leases: dict[str, Lease] = {}  # ticket -> lease held by this replica
        self._waiting = 0
        self._in_flight: dict[str, int] = {}
        self._queued: dict[str, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._mean_hold_s = 10.0
        self._holds: list[list[Any]] = []  # the last answer's [session, key, tokens, ms left]
        self._holds_at = 0.0  # monotonic s of that answer
        self._look: asyncio.TimerHandle | None = None  # the renewal a held-back waiter waits for
        self._look_at = math.inf

    @classmethod
    def configured(cls, settings: Settings, client: Redis, backend: str) -> SharedAdmission:
        """Backend ``backend``'s admission as ``settings`` describe it, shared through ``client``."""
        return cls(
            client,
            f"{settings.admission_namespace}:admission:{{{backend}}}:",
            Capacity(settings.slots, settings.kv_budget_tokens, settings.slots - settings.express_slots),
            settings.queue_max,
            settings.queue_timeout_s,
            settings.queue_max_per_key,
            long_queue_timeout_s=settings.queue_timeout_long_s,
            bypass_limit=settings.bypass_limit,
            lease_ttl_s=settings.admission_lease_ttl_s,
            session_hold_s=settings.session_hold_s if settings.prefix_caching else 0.0,
        )

    # -- lifecycle

    async def start(self) -> None:
        """Subscribe to this replica's grants and start renewing (call once, in the app's lifespan)."""
        pubsub = self._client.pubsub()
        await pubsub.subscribe(self._channel)
        self._loops = [asyncio.create_task(self._listen(pubsub)), asyncio.create_task(self._renewing())]

    async def aclose(self) -> None:
        """Stop renewing, send the releases still pending, close the client."""
        if self._look is not None:
            self._look.cancel()
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                await task
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
        await self._client.aclose()

    # -- the Gate (its figures, HeldLoad's, are all replicas' as of the last script's answer)

    async def admit(self, key: str, priority: int, max_concurrency: int | None, need: Need) -> Lease | Waiter:
        """Queue a ticket in Redis and dispatch: a :class:`Lease` if it was granted at once, else the
        :class:`Waiter` (:class:`QueueFullError`; ``ValueError`` for a need that never fits)."""
        if (why := self.capacity.never_fits(need)) is not None:
            raise ValueError(why)
        timeout = self.long_queue_timeout_s if need.long else self.queue_timeout_s
        future = asyncio.get_running_loop().create_future()
        waiter = Waiter(key, max(1, priority), max_concurrency, future, need, timeout)
        waiter.ticket = f"{self.replica}:{uuid.uuid4().hex[:12]}"
        fields = {
            "key": key, "prio": waiter.priority, "maxc": -1 if max_concurrency is None else max_concurrency,
            "seq": need.sequences, "kv": need.kv_tokens, "long": int(need.long), "b": int(need.batch),
            "replica": self.replica,
        }  # fmt: skip
        if need.session is not None:
            fields |= {"session": need.session, "footprint": need.footprint}
        self._waiters[waiter.ticket] = waiter  # a grant's message may come before the script's answer
        self._enqueuing.add(waiter.ticket)
        try:
            result = await self._call(
                self._enqueue,
                waiter.ticket,
                json.dumps(fields),
                self.queue_max,
                -1 if self.queue_max_per_key is None else self.queue_max_per_key,
                self.reserve,
            )
        except BaseException as exc:
            self._waiters.pop(waiter.ticket, None)
            self._spawn(self._call(self._abandon, waiter.ticket))
            if isinstance(exc, (RedisError, OSError)):
                raise AdmissionUnavailableError(type(exc).__name__) from exc
            raise
        finally:
            self._enqueuing.discard(waiter.ticket)
        if "full" in result:
            self._waiters.pop(waiter.ticket, None)
            raise QueueFullError(self.retry_after_s(), per_key=result["full"] == "key")
        if "fence" in result:
            waiter.settled = True
            self._waiters.pop(waiter.ticket, None)
            return Lease(self, key, int(result["fence"]), need, ticket=waiter.ticket)
        self._describe(waiter, result["queued"])
        return waiter

    async def wait(self, waiter: Waiter) -> Lease:
        """Wait for the grant's message (or the renewal that finds it); :class:`QueueTimeoutError`."""
        lease = await lease_when_granted(self, waiter)
        self._waiters.pop(waiter.ticket, None)
        return lease

    def abandon(self, waiter: Waiter) -> None:
        """Give the ticket up (or the grant it got, if no lease holds it yet), in the background."""
        if waiter.settled:
            return
        waiter.settled = True
        waiter.note(None, time.monotonic())
        self._waiters.pop(waiter.ticket, None)
        if not waiter.future.done():
            waiter.future.cancel()
        self._spawn(self._call(self._abandon, waiter.ticket))

    def fail_waiting(self, error: Exception) -> None:
        """Fail this replica's waiters with ``error``; each one's :meth:`wait` gives its ticket up."""
        for waiter in self._waiters.values():
            if not waiter.settled and not waiter.future.done():
                waiter.future.set_exception(error)

    def position(self, waiter: Waiter) -> int:
        return waiter.place

    def waiting_for(self) -> dict[str, int]:
        """This replica's waiters, by what they wait for (the others' are their replicas')."""
        counts = {reason.value: 0 for reason in Reason}
        for waiter in self._waiters.values():
            if waiter.reason is not None:
                counts[waiter.reason.value] += 1
        return counts

    def retry_after_s(self) -> int:
        return max(1, math.ceil(self._mean_hold_s * (self._waiting + 1) / self.slots))

    def expected_wait_s(self, key: str) -> float:
        """As :meth:`Admission.expected_wait_s`, from this replica's last call to Redis and its own
        measured hold times."""
        if self.held.sequences < self.slots:  # the waiters could not take it: this one may
            return 0.0
        return expected_wait_s(self._mean_hold_s, self.slots, self._waiting, self._queued, key)

    def queue_refusal(self, key: str) -> QueueFullError | None:
        """The whole queue full at this replica's last call to Redis (its figures of every replica's
        waiters); the reserve and the key's bound are checked as the request enqueues."""
        if self.queue_max and self._waiting >= self.queue_max:
            return QueueFullError(self.retry_after_s(), per_key=False)
        return None

    def status(self) -> dict[str, object]:
        """As :meth:`Admission.status`, for all replicas (``waiting_for`` and ``waiting_by_key``: this
        replica's waiters), plus the ``replica`` id and ``shared: true``."""
        reasons = ((w.key, w.reason.value) for w in self._waiters.values() if w.reason and not w.settled)
        view = status_view(self, self._in_flight, self._queued, reasons, shared=True, replica=self.replica)
        return {**view, "session_holds": self.holds()}

    def holds(self) -> list[dict[str, object]]:
        """Every replica's live holds as of this replica's last call to Redis, most recently used
        first: session, key, tokens, seconds left."""
        gone = time.monotonic() - self._holds_at
        return [
            {"session": session, "key": key, "tokens": tokens, "left_s": round(left_ms / 1000 - gone, 3)}
            for session, key, tokens, left_ms in self._holds
            if left_ms / 1000 > gone
        ]

    async def take_hold(self, session: str) -> int:
        """As :meth:`Admission.take_hold`, for every replica (one call to Redis)."""
        try:
            return int(await self._call(self._move_hold, "take", session, "", 0))
        except (RedisError, OSError) as exc:  # the hold ends with its time; the turn runs all the same
            log.warning("admission store call failed (%s); a session's hold stays where it was", exc)
            return 0

    async def adopt_hold(self, key: str, session: str, tokens: int) -> None:
        """As :meth:`Admission.adopt_hold`, for every replica (one call to Redis)."""
        if self.session_hold_s > 0 and tokens > 0:
            try:
                await self._call(self._move_hold, "adopt", session, key, tokens)
            except (RedisError, OSError) as exc:
                log.warning("admission store call failed (%s); a session's hold was not moved", exc)

    # -- lease bookkeeping (LeaseOwner)

    def hold(self, lease: Lease) -> None:
        # the backend's spec-decode counters are every replica's: never this request's alone
        lease.overlapped = True
        self._leases[lease.ticket] = lease

    def unhold(self, lease: Lease, held_s: float) -> None:
        self._leases.pop(lease.ticket, None)
        self._mean_hold_s += 0.2 * (held_s - self._mean_hold_s)
        self._spawn(self._call(self._release, lease.grant, lease.ticket))

    # -- Redis

    async def _call(self, script: Any, *args: object) -> Any:
        """Run ``script`` with the capacity and ``args``; take the totals it answers; its ``result``."""
        raw = await script(keys=[self._prefix], args=[*self._capacity_args, *args])
        answer = json.loads(raw)
        self.held = Held(answer["seq"], answer["kv"], answer["long"])
        self._waiting = answer["waiting"]
        self._in_flight, self._queued = answer["in_flight"] or {}, answer["queued"] or {}
        self._holds, self._holds_at = answer["holds"] or [], time.monotonic()
        self._watch_holds()
        return answer["result"]

    def _watch_holds(self) -> None:
        """With holds live and a long waiter of this replica that they may hold back, look again when
        the soonest hold or that waiter's hold-back ends (by this replica's clock: a look a hair early
        gets the hold-back's exact end in the renewal's answer)."""
        if not self._holds:
            return
        now = time.monotonic()
        ends = [
            w.enqueued_at + self.session_hold_s - now
            for w in self._waiters.values()
            if w.need.long and not w.settled and w.enqueued_at + self.session_hold_s > now
        ]
        if ends:
            self._look_again(min([*ends, *(left_ms / 1000 for *_, left_ms in self._holds)]))

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def logged() -> None:
            try:
                await work
            except Exception as exc:  # the lease's TTL gives back what this call could not
                log.warning("admission store call failed (%s); leases end in %.0f s", exc, self.lease_ttl_s)

        task = asyncio.ensure_future(logged())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _granted(self, waiter: Waiter, fence: int) -> None:
        if waiter.grant is None and not waiter.future.done():
            waiter.grant = fence
            waiter.note(None, time.monotonic())
            self.grants += 1
            waiter.future.set_result(None)

    def _describe(self, waiter: Waiter, described: list[Any]) -> None:
        """Take a ticket's ``[reason, place]``; a held-back one's ``[reason, place, ms]`` also says when
        its hold-back ends: look again then, or when the soonest hold ends if that comes first (no
        other call may come meanwhile)."""
        reason, place, *held_ms = described
        waiter.note(Reason(reason), time.monotonic())
        waiter.place = int(place)
        if held_ms:
            soonest = min([held_ms[0], *(left_ms for *_, left_ms in self._holds)])
            self._look_again(soonest / 1000)

    def _look_again(self, delay_s: float) -> None:
        """Renew after ``delay_s`` (plus Redis's millisecond clock's grain), unless one comes sooner."""
        delay_s = max(0.0, delay_s) + _CLOCK_GRAIN_S
        at = time.monotonic() + delay_s
        if self._look is not None and self._look_at <= at:
            return
        if self._look is not None:
            self._look.cancel()
        self._look_at = at
        self._look = asyncio.get_running_loop().call_later(delay_s, self._looked)

    def _looked(self) -> None:
        self._look, self._look_at = None, math.inf
        self._spawn(self.renew())

    async def _listen(self, pubsub: Any) -> None:
        """Resolve the waiters this replica's grant messages name (``"<ticket> <fence>"``); subscribe
        again after a lost connection (meanwhile renewals find the grants)."""
        while True:
            try:
                async with pubsub:
                    if not pubsub.subscribed:
                        await pubsub.subscribe(self._channel)
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        ticket, fence = message["data"].decode().split()
                        waiter = self._waiters.get(ticket)
                        if waiter is not None and not waiter.settled:
                            self._granted(waiter, int(fence))
            except (RedisError, OSError) as exc:
                log.warning("admission grants channel lost (%s); subscribing again", exc)
                await asyncio.sleep(min(1.0, self.lease_ttl_s / 10))
                pubsub = self._client.pubsub()

    async def _renewing(self) -> None:
        """Every third of the TTL: extend this replica's leases and tickets, learn the grants it
        missed and what its waiters wait for (and so give the expired holders' slots on)."""
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                await self.renew()
            except Exception as exc:
                log.warning("admission lease renewal failed: %s", exc)

    async def renew(self) -> None:
        """One renewal (see :meth:`_renewing`)."""
        held = [(lease.grant, ticket) for ticket, lease in self._leases.items()]
        tickets = [t for t, w in self._waiters.items() if not w.settled and t not in self._enqueuing]
        result = await self._call(self._renew, len(held), *(part for pair in held for part in pair), *tickets)
        for fence in result["lost"] or []:
            log.warning("admission lease %s expired before its release", fence)
        for ticket, fence in (result["granted"] or {}).items():
            if (waiter := self._waiters.get(ticket)) is not None:
                self._granted(waiter, int(fence))
        for ticket, described in (result["queued"] or {}).items():
            if (waiter := self._waiters.get(ticket)) is not None:
                self._describe(waiter, described)
        for ticket in result["gone"] or []:  # expired unrenewed (the store was out of reach too long)
            waiter = self._waiters.get(ticket)
            if waiter is not None and not waiter.future.done():
                waiter.future.set_exception(AdmissionUnavailableError("the request's place expired"))
