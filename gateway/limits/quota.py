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
no budget may generate to the end of its context), the excess given back at once when it does not
fit: two requests at the same moment cannot both take the last of a quota, as a check-then-charge
(LiteLLM's budget check) lets them. A request whose most cost does not fit holds what is left and
may generate only what that pays for (:class:`~gateway.proxy.billing.Billing` caps its output
budget: it ends with the API's length finish); one that cannot pay its prompt and one token is
refused. At the end the counter is moved by the real cost minus the reservation. Counters live in
the rate limits' storage (``GATEWAY_LIMITS_STORAGE``:
process memory, or Redis shared by the replicas), keyed by holder and period start, expiring a day
after their period ends. A counter the storage does not hold yet — a new period, a gateway restarted
on memory storage, a Redis emptied — starts from what the usage ledger holds of the period
(``seed``), once: the first process to touch it takes a marker beside it (one atomic increment) and
adds the ledger's figure; so a restart loses no more of a quota than the ledger's last unflushed
second.

``mode``: ``enforce`` refuses a request that does not fit (429 ``quota_exceeded``, ``Retry-After``
the seconds until the period resets); ``warn`` admits it, counts it, and only reports it (the answer's
``x-quota-warning`` header, a log line) — a quota to watch before enforcing it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from limits.aio.storage import Storage

from gateway.auth.principal import Quota
from gateway.errors import GatewayError

#: How many seeded counters a process remembers (then it asks the storage's marker again).
_SEEDED_KEPT = 10_000
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
    period ending at ``ends``."""

    quota: Quota
    counter: str
    ends: datetime
    reserved: int
    over: bool = False


@dataclass(frozen=True, slots=True)
class Standing:
    """A quota's state now: cost ``used`` of ``quota.tokens``, and when the period resets."""

    quota: Quota
    used: int
    resets_at: datetime

    @property
    def remaining(self) -> int:
        return max(0, self.quota.tokens - self.used)

    def as_dict(self) -> dict[str, object]:
        """JSON view (``GET /v1/key``, the admin API)."""
        return {
            "tokens": self.quota.tokens,
            "period": self.quota.period,
            "mode": self.quota.mode,
            "used": self.used,
            "remaining": self.remaining,
            "resets_at": self.resets_at.isoformat(),
        }


#: What a holder used since a time: prompt, cached, completion, reasoning tokens (the usage ledger's
#: :meth:`~gateway.telemetry.ledger.UsageLedger.spent`).
Seed = Callable[[str, datetime], Awaitable[tuple[int, int, int, int]]]


class Quotas:
    """Reserves, settles and reads quotas on a ``limits`` storage; counters start from ``seed``."""

    def __init__(self, storage: Storage, weights: QuotaWeights, seed: Seed | None = None) -> None:
        self._storage = storage
        self.weights = weights
        self._seed = seed
        self._seeded: set[str] = set()  # counters this process knows to be seeded

    async def _counter_of(self, quota: Quota, now: datetime) -> tuple[str, datetime]:
        """The counter of ``quota``'s period at ``now`` and the period's end, seeded from the ledger
        the first time any process touches it."""
        start, end = period_bounds(quota.period, now)
        counter = f"quota/{quota.holder}/{quota.period}/{start:%Y%m%d}"
        if self._seed is not None and counter not in self._seeded:
            if await self._storage.incr(counter + "/seeded", _expiry(end, now)) == 1:
                cost = self.weights.cost(*await self._seed(quota.holder, start))
                if cost:
                    await self._storage.incr(counter, _expiry(end, now), cost)
            if len(self._seeded) >= _SEEDED_KEPT:  # the marker still answers for the ones forgotten
                self._seeded.clear()
            self._seeded.add(counter)
        return counter, end

    async def standing(self, quota: Quota) -> Standing:
        """``quota``'s use in its current period."""
        counter, end = await self._counter_of(quota, datetime.now(UTC))
        return Standing(quota, await self._storage.get(counter), end)

    async def reserve(self, quota: Quota, most: int, least: int) -> Hold:
        """Take up to ``most`` of ``quota`` and at least ``least`` (``least <= most``), in one atomic
        increment. Enforced: where ``most`` does not fit, what was left of the quota (the excess given
        back), and 429 ``quota_exceeded`` (all given back) when that is less than ``least``. Warned:
        ``most`` kept, ``over`` set past the quota."""
        now = datetime.now(UTC)
        counter, end = await self._counter_of(quota, now)
        expiry = _expiry(end, now)
        most = max(1, most)
        excess = await self._storage.incr(counter, expiry, most) - quota.tokens
        if excess <= 0 or quota.mode != "enforce":
            return Hold(quota, counter, end, most, over=excess > 0)
        held = most - min(excess, most)
        if held < least:
            await self._storage.incr(counter, expiry, -most)
            raise exceeded(quota, end, now)
        await self._storage.incr(counter, expiry, held - most)
        return Hold(quota, counter, end, held)

    async def settle(self, hold: Hold, cost: int) -> None:
        """Replace the reservation with the real ``cost``."""
        if cost != hold.reserved:
            now = datetime.now(UTC)
            await self._storage.incr(hold.counter, _expiry(hold.ends, now), cost - hold.reserved)


def _expiry(end: datetime, now: datetime) -> int:
    """A counter's lifetime from ``now``, s: to its period's ``end`` and a day more (a counter made
    by a settlement must last as one made by a reservation)."""
    return max(1, math.ceil((end - now).total_seconds())) + _KEEP_S


def exceeded(quota: Quota, resets_at: datetime, now: datetime) -> GatewayError:
    """429 ``quota_exceeded`` saying when the quota resets (``Retry-After`` in whole seconds)."""
    retry = max(1, math.ceil((resets_at - now).total_seconds()))
    whose = "group's" if quota.holder.startswith("group:") else "key's"
    return GatewayError(
        "quota_exceeded",
        f"This {whose} quota of {quota.tokens} tokens a {quota.period} is spent; it resets at "
        f"{resets_at.isoformat()} ({retry} s).",
        headers={"Retry-After": str(retry)},
    )
