"""Token quotas: how much a key (or its group) may spend in a calendar day, week or month, reserved
before admission and settled with the real usage.

A quota counts *cost*, the request's tokens weighted by kind (:class:`QuotaWeights`:
``GATEWAY_QUOTA_WEIGHTS``, every weight 1 by default, so cost is prompt + completion tokens):
``prompt × (uncached prompt tokens) + cached_prompt × (cached ones) + output × (completion tokens
that are not reasoning) + reasoning × (reasoning tokens)``, rounded up.

Periods are UTC calendar periods — a day from 00:00, a week from Monday 00:00 (ISO 8601), a month
from its first day — so a quota resets when its holder expects, the same instant for every replica.

Reservation is one atomic increment of the period's counter by the request's most cost (its prompt
and its whole output budget at the dearer of the output and reasoning weights; a request that sets
no budget is given ``GATEWAY_OUTPUT_RESERVE_TOKENS``, spliced as its cap), the excess given back at
once when it does not fit: two requests at the same moment cannot both take the last of a quota, as
a check-then-charge (LiteLLM's budget check) lets them. A request whose most cost does not fit holds
what is left and may generate only what that pays for (:class:`~gateway.proxy.billing.Billing` caps its output
budget: it ends with the API's length finish); one that cannot pay its prompt and one token is
refused. At the end the counter is moved by the real cost minus the reservation. Counters live in
the rate limits' storage (``GATEWAY_LIMITS_STORAGE``:
process memory, or Redis shared by the replicas), keyed by holder and period start, expiring a day
after their period ends. A counter the storage does not hold yet — a new period, a gateway restarted
on memory storage, a Redis emptied — starts from what the usage ledger holds of the period
(``seed``), once: the first process to touch it takes a marker beside it (one atomic increment) and
adds the ledger's figure; so a restart, or a Redis emptied under running gateways, loses no more of a
quota than the ledger's last unflushed second (:class:`Quotas`: settlements across it).

``mode``: ``enforce`` refuses a request that does not fit (429 ``quota_exceeded``, ``Retry-After``
the seconds until the period resets); ``warn`` admits it, counts it, and only reports it (the answer's
``x-quota-warning`` header, a log line) — a quota to watch before enforcing it.
"""

from __future__ import annotations

import asyncio
import math
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from limits.aio.storage import Storage
from limits.errors import StorageError

from gateway.auth.principal import Quota
from gateway.errors import GatewayError

#: How often, and how long each time, a process waits for the generation another one is drawing, s.
_GENERATION_WAITS, _GENERATION_WAIT_S = 100, 0.05
#: How long a seeding's marker lasts, s: past it, a seeding that never drew its generation is retried.
_MARKER_S = 60
#: ``Retry-After`` of a refusal while the quota is held by running requests, s.
RUNNING_RETRY_S = 5
#: How long a counter outlives its period, s: a late settlement still finds it.
_KEEP_S = 86_400


@dataclass(frozen=True, slots=True)
class QuotaWeights:
    """What one token of each kind costs (``GATEWAY_QUOTA_WEIGHTS``)."""

    prompt: float = 1.0
    cached_prompt: float = 1.0
    output: float = 1.0
    reasoning: float = 1.0

    def cost(self, prompt: int, cached: int, completion: int, reasoning: int) -> int:
        """The cost of a request's usage (OpenAI's counts: ``cached`` is part of ``prompt``,
        ``reasoning`` part of ``completion``), rounded up."""
        cached, reasoning = min(cached, prompt), min(reasoning, completion)
        return math.ceil(
            (prompt - cached) * self.prompt
            + cached * self.cached_prompt
            + (completion - reasoning) * self.output
            + reasoning * self.reasoning
        )

    def most(self, prompt: int, output_budget: int) -> int:
        """The most a request may cost: its prompt uncached and its whole budget at the dearer rate."""
        return math.ceil(
            prompt * max(self.prompt, self.cached_prompt) + output_budget * max(self.output, self.reasoning)
        )

    def output_paid(self, cost: int, prompt: int) -> int | None:
        """The output tokens ``cost`` pays for beside ``prompt`` (:meth:`most` inverted, rounded down:
        ``most(prompt, paid) <= cost``); None when output costs nothing."""
        rate = max(self.output, self.reasoning)
        if rate <= 0:
            return None
        return math.floor((cost - prompt * max(self.prompt, self.cached_prompt)) / rate)


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar ``period`` holding ``now``: ``(start, end)``."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    start = day.replace(day=1)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


@dataclass(slots=True)
class Hold:
    """One request's reservation against one quota: ``reserved`` cost in the counter ``counter`` of the
    period ending at ``ends``, made in the counter's ``generation`` (:class:`Quotas`); how far its
    settlement got."""

    quota: Quota
    counter: str
    ends: datetime
    reserved: int
    generation: int = 0
    over: bool = False
    held: int = 0  # what the counter's running reservations (``/held``) count of it
    charged: bool = False  # settled: its real cost replaced the reservation


@dataclass(frozen=True, slots=True)
class Standing:
    """A quota's state now: cost ``used`` of ``quota.tokens`` (what ended requests cost), ``held`` by
    requests still running (their reservations, until they settle), and when the period resets."""

    quota: Quota
    used: int
    resets_at: datetime
    held: int = 0

    @property
    def remaining(self) -> int:
        """What a new request may still reserve: neither used nor held."""
        return max(0, self.quota.tokens - self.used - self.held)

    def as_dict(self) -> dict[str, object]:
        """JSON view (``GET /v1/key``, the admin API)."""
        return {
            "tokens": self.quota.tokens,
            "period": self.quota.period,
            "mode": self.quota.mode,
            "used": self.used,
            "held": self.held,
            "remaining": self.remaining,
            "resets_at": self.resets_at.isoformat(),
        }


#: What a holder used since a time: prompt, cached, completion, reasoning tokens (the usage ledger's
#: :meth:`~gateway.telemetry.ledger.UsageLedger.spent`).
Seed = Callable[[str, datetime], Awaitable[tuple[int, int, int, int]]]


class Quotas:
    """Reserves, settles and reads quotas on a ``limits`` storage; counters start from ``seed``.

    A counter the storage loses (a Redis flushed or restarted: the scale deployment's keeps nothing on
    disk; a gateway restarted on memory storage) starts again from the ledger at its next use. Each
    seeding draws a random *generation*, kept beside the counter; a reservation remembers the one it
    was made in, and its settlement moves the counter by the real cost minus the reservation only if
    that generation still holds — else its reservation is not in the counter, which is charged the
    real cost. Concurrent uses of a counter this process is seeding wait for the seed.
    """

    def __init__(self, storage: Storage, weights: QuotaWeights, seed: Seed | None = None) -> None:
        self._storage = storage
        self.weights = weights
        self._seed = seed
        self._seeding: dict[str, asyncio.Future[int]] = {}  # counter -> its seeding in this process

    async def _counter_of(self, quota: Quota, now: datetime) -> tuple[str, datetime, int]:
        """The counter of ``quota``'s period at ``now``, the period's end and the counter's generation
        (0 without a ``seed``), seeded from the ledger when the storage does not hold it."""
        start, end = period_bounds(quota.period, now)
        counter = f"quota/{quota.holder}/{quota.period}/{start:%Y%m%d}"
        if self._seed is None:
            return counter, end, 0
        generation = await self._storage.get(counter + "/generation")
        if not generation:
            seeding = self._seeding.get(counter)
            if seeding is None:
                seeding = asyncio.ensure_future(self._seeded(quota, counter, start, _expiry(end, now)))
                self._seeding[counter] = seeding
                seeding.add_done_callback(lambda _: self._seeding.pop(counter, None))
            generation = await asyncio.shield(seeding)
        return counter, end, generation

    async def _seeded(self, quota: Quota, counter: str, start: datetime, expiry: int) -> int:
        """Seed ``counter`` from the ledger, once across processes (the first to take its marker, one
        atomic increment, adds the ledger's figure, then draws the generation); its generation. The
        marker lasts :data:`_MARKER_S`: a seeder that fails or dies leaves the seeding to the next
        use after it, and a failed seeding gives its marker back at once. 503 ``limits_unavailable``
        when no generation comes."""
        assert self._seed is not None
        marker = counter + "/seeded"
        if await self._storage.incr(marker, _MARKER_S) == 1:
            try:
                cost = self.weights.cost(*await self._seed(quota.holder, start))
                if cost:
                    await self._storage.incr(counter, expiry, cost)
            except BaseException:
                await self._storage.clear(marker)
                raise
            generation = secrets.randbelow(2**48) + 1  # drawn once seeded: who sees it sees the seed
            await self._storage.incr(counter + "/generation", expiry, generation)
            return generation
        for _ in range(_GENERATION_WAITS):  # the process seeding it reads the ledger, then draws it
            if generation := await self._storage.get(counter + "/generation"):
                return int(generation)
            await asyncio.sleep(_GENERATION_WAIT_S)
        raise StorageError(TimeoutError(f"{counter}: its seeding by another process did not end"))

    async def standing(self, quota: Quota) -> Standing:
        """``quota``'s use in its current period."""
        counter, end, _ = await self._counter_of(quota, datetime.now(UTC))
        total, held = await self._storage.get(counter), await self._storage.get(counter + "/held")
        held = max(0, min(held, total))  # a counter started again under running requests holds none of them
        return Standing(quota, total - held, end, held)

    async def report(self, quotas: Iterable[Quota]) -> list[dict[str, object]]:
        """Each of ``quotas``' standing as ``GET /v1/key`` and the console show it: ``holder``
        (``key`` | ``group``) and :meth:`Standing.as_dict`."""
        return [
            {"holder": quota.holder.split(":", 1)[0], **(await self.standing(quota)).as_dict()}
            for quota in quotas
        ]

    async def reserve(self, quota: Quota, most: int, least: int) -> Hold:
        """Take up to ``most`` of ``quota`` and at least ``least`` (``least <= most``), in one atomic
        increment. Enforced: where ``most`` does not fit, what was left of the quota (the excess given
        back), and 429 ``quota_exceeded`` (all given back) when that is less than ``least`` — saying
        so, with a short ``Retry-After``, when what is missing is held by requests still running
        (their reservations are counted beside the counter: ``/held``). Warned: ``most`` kept,
        ``over`` set past the quota. A store that fails once the counter was moved raises
        :class:`Reserved` with what is in it."""
        now = datetime.now(UTC)
        counter, end, generation = await self._counter_of(quota, now)
        expiry = _expiry(end, now)
        most = max(1, most)
        excess = await self._storage.incr(counter, expiry, most) - quota.tokens
        hold = Hold(quota, counter, end, most, generation, over=excess > 0)
        try:
            if excess > 0 and quota.mode == "enforce":
                held = most - min(excess, most)
                if held < least:
                    await self._storage.incr(counter, expiry, -most)
                    hold.reserved = 0
                    running = await self._storage.get(counter + "/held")
                    raise exceeded(quota, end, now, held_by_running=most - excess + running >= least)
                await self._storage.incr(counter, expiry, held - most)
                hold.reserved, hold.over = held, False
            await self._storage.incr(counter + "/held", expiry, hold.reserved)
            hold.held = hold.reserved
        except StorageError as exc:
            raise Reserved(hold) from exc
        return hold

    async def settle(self, hold: Hold, cost: int) -> None:
        """Replace the reservation with the real ``cost`` (all of it, when the counter was lost and
        started again since the reservation: it does not hold the reservation)."""
        now = datetime.now(UTC)
        within = min(now, hold.ends - timedelta(seconds=1))  # the counter of the hold's period
        counter, _, generation = await self._counter_of(hold.quota, within)
        expiry = _expiry(hold.ends, now)
        lost = generation != hold.generation  # its counter (and what ran beside it) started again
        if not hold.charged:  # each step once: a settlement retried after a failure repeats none
            change = cost if lost else cost - hold.reserved
            if change:
                await self._storage.incr(counter, expiry, change)
            hold.charged = True
        if hold.held and not lost:
            await self._storage.incr(counter + "/held", expiry, -hold.held)
        hold.held = 0


class Reserved(Exception):  # noqa: N818 - it names what it carries, as StopIteration does
    """The store failed after a reservation moved the counter: ``hold`` is what the counter holds of it
    (settle it, as any hold, to give it back)."""

    def __init__(self, hold: Hold) -> None:
        super().__init__(hold.counter)
        self.hold = hold


def _expiry(end: datetime, now: datetime) -> int:
    """A counter's lifetime from ``now``, s: to its period's ``end`` and a day more (a counter made
    by a settlement must last as one made by a reservation)."""
    return max(1, math.ceil((end - now).total_seconds())) + _KEEP_S


def exceeded(quota: Quota, resets_at: datetime, now: datetime, held_by_running: bool = False) -> GatewayError:
    """429 ``quota_exceeded`` saying when the quota resets (``Retry-After`` in whole seconds); when
    what is missing is held by requests still running, saying so, with :data:`RUNNING_RETRY_S`."""
    whose = "group's" if quota.holder.startswith("group:") else "key's"
    if held_by_running:
        return GatewayError(
            "quota_exceeded",
            f"This {whose} quota of {quota.tokens} tokens a {quota.period} is held by its requests still "
            "running (each holds what it may generate until it ends); retry when one has ended.",
            headers={"Retry-After": str(RUNNING_RETRY_S)},
        )
    retry = max(1, math.ceil((resets_at - now).total_seconds()))
    return GatewayError(
        "quota_exceeded",
        f"This {whose} quota of {quota.tokens} tokens a {quota.period} is spent; it resets at "
        f"{resets_at.isoformat()} ({retry} s).",
        headers={"Retry-After": str(retry)},
    )
