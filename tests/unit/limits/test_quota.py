"""Token quotas (gateway/limits/quota.py) on the ``limits`` memory storage: UTC calendar periods, the
weighted cost, an atomic reservation a parallel burst cannot overspend (each holds at most what was
left), settlement, warn mode."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import cast

import pytest
from limits.aio.storage import Storage
from limits.errors import StorageError

from gateway.auth.principal import Quota
from gateway.errors import GatewayError
from gateway.limits.quota import Hold, Quotas, QuotaWeights, Reserved, period_bounds
from gateway.limits.rate import storage_for


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        ("day", "2026-12-04T23:59:59", "2026-12-04", "2026-12-05"),
        ("week", "2026-12-04T08:00:00", "2026-11-30", "2026-12-07"),  # a Friday: Monday to Monday
        ("week", "2026-11-30T00:00:00", "2026-11-30", "2026-12-07"),
        ("month", "2026-12-31T12:00:00", "2026-12-01", "2027-01-01"),
        ("month", "2028-02-29T12:00:00", "2028-02-01", "2028-03-01"),
    ],
)
def test_periods_are_utc_calendar_periods(period: str, now: str, start: str, end: str) -> None:
    assert period_bounds(period, at(now)) == (at(start), at(end))


def test_cost_weighs_each_kind_of_token() -> None:
    default = QuotaWeights()
    assert default.cost(prompt=100, cached=40, completion=30, reasoning=10) == 130  # tokens, as they are
    priced = QuotaWeights(prompt=1, cached_prompt=0.1, output=4, reasoning=2)
    assert priced.cost(prompt=100, cached=40, completion=30, reasoning=10) == 60 + 4 + 80 + 20
    assert priced.cost(prompt=1, cached=1, completion=0, reasoning=0) == 1  # 0.1 rounds up
    assert priced.most(prompt=100, output_budget=50) == 100 + 200
    assert priced.output_paid(300, prompt=100) == 50 and priced.output_paid(303, prompt=100) == 50
    assert QuotaWeights(output=0, reasoning=0).output_paid(5, prompt=100) is None  # output is free


def quotas() -> Quotas:
    return Quotas(storage_for("memory://"), QuotaWeights())


async def test_a_parallel_burst_cannot_spend_more_than_the_quota() -> None:
    book, quota = quotas(), Quota("key:k", tokens=1000, period="day")

    async def take() -> Hold | GatewayError:
        try:
            return await book.reserve(quota, 300, 300)
        except GatewayError as refused:
            return refused

    results = await asyncio.gather(*(take() for _ in range(10)))
    held = [r for r in results if isinstance(r, Hold)]
    refused = [r for r in results if isinstance(r, GatewayError)]
    assert len(held) == 3 and len(refused) == 7
    standing = await book.standing(quota)  # held by the running three, used by none yet
    assert (standing.used, standing.held, standing.remaining) == (0, 900, 100)
    error = refused[0]  # what is missing is held by the three still running: a short wait
    assert (error.status, error.code) == (429, "quota_exceeded")
    assert error.headers["Retry-After"] == "5" and "still running" in error.message
    for hold in held:
        await book.settle(hold, 300)  # each spent all it held
    with pytest.raises(GatewayError) as spent:
        await book.reserve(quota, 300, 300)
    assert 5 < int(spent.value.headers["Retry-After"]) <= 86_400 and "resets at" in spent.value.message


async def test_settlement_replaces_the_reservation_with_the_real_cost() -> None:
    book, quota = quotas(), Quota("group:g", tokens=1000)
    first, second = await book.reserve(quota, 400, 400), await book.reserve(quota, 400, 400)
    await book.settle(first, 50)  # used far less than its budget: given back
    await book.settle(second, 450)  # used more: charged
    standing = await book.standing(quota)
    assert (standing.used, standing.remaining) == (500, 500)
    assert standing.as_dict()["period"] == "month" and standing.resets_at.day == 1
    with pytest.raises(GatewayError, match="group's quota"):
        await book.reserve(quota, 501, 501)
    assert (await book.standing(quota)).used == 500  # all given back


async def test_a_reservation_past_what_is_left_holds_the_rest_or_nothing() -> None:
    book, quota = quotas(), Quota("key:k", tokens=1000)
    huge = await book.reserve(quota, 10**9, 10)  # a request that may generate to its context's end
    assert huge.reserved == 1000 and not huge.over
    with pytest.raises(GatewayError, match="quota of 1000 tokens"):
        await book.reserve(quota, 10**9, 1)  # nothing left: not even its least
    await book.settle(huge, 600)
    assert (await book.reserve(quota, 500, 350)).reserved == 400  # what was left, at least its least
    with pytest.raises(GatewayError):
        await book.reserve(Quota("key:small", tokens=100), 10**9, 101)  # its prompt alone is too much
    assert (await book.standing(Quota("key:small", tokens=100))).used == 0


async def test_parallel_reservations_past_what_is_left_share_it_without_overspending() -> None:
    book, quota = quotas(), Quota("key:k", tokens=1000, period="day")

    async def take() -> int:
        try:
            return (await book.reserve(quota, 300, 50)).reserved
        except GatewayError:
            return 0

    held = await asyncio.gather(*(take() for _ in range(10)))
    assert sum(held) == 1000 and sorted(held, reverse=True)[:4] == [300, 300, 300, 100]
    assert (await book.standing(quota)).held == 1000


async def test_warn_mode_admits_counts_and_marks_what_is_over() -> None:
    book, quota = quotas(), Quota("key:w", tokens=100, mode="warn")
    within, over = await book.reserve(quota, 80, 0), await book.reserve(quota, 80, 0)
    assert (within.over, over.over) == (False, True)
    assert (await book.standing(quota)).held == 160 and (await book.standing(quota)).remaining == 0


async def test_a_counter_starts_from_the_ledger_once_for_every_process() -> None:
    asked: list[tuple[str, datetime]] = []

    async def ledger(holder: str, since: datetime) -> tuple[int, int, int, int]:
        asked.append((holder, since))
        return 300, 100, 50, 20  # prompt, cached, completion, reasoning

    storage, weights = storage_for("memory://"), QuotaWeights(cached_prompt=0.5)
    first, second = Quotas(storage, weights, ledger), Quotas(storage, weights, ledger)  # two replicas
    quota = Quota("key:k", tokens=1000, period="day")
    assert (await first.standing(quota)).used == 200 + 50 + 50
    await second.reserve(quota, 100, 100)
    standing = await first.standing(quota)
    assert (standing.used, standing.held) == (300, 100)  # seeded once, by whichever came first
    assert asked == [("key:k", period_bounds("day", datetime.now(UTC))[0])]


async def test_a_counter_lost_under_running_gateways_starts_again_from_the_ledger() -> None:
    """A Redis flushed (or restarted without persistence): the next use re-reads what the ledger
    holds, and a request reserved before the loss is charged its real cost, not its cost minus a
    reservation the new counter never held (which drove counters negative)."""
    ledger_spent = [0]

    async def ledger(holder: str, since: datetime) -> tuple[int, int, int, int]:
        return ledger_spent[0], 0, 0, 0

    storage = storage_for("memory://")
    book, quota = Quotas(storage, QuotaWeights(), ledger), Quota("key:k", tokens=5_000, period="day")
    before = await book.reserve(quota, 2_000, 2_000)
    done = await book.reserve(quota, 1_000, 1_000)
    await book.settle(done, 800)
    ledger_spent[0] = 800  # its row is in the ledger
    await storage.reset()  # the shared store is emptied
    assert (await book.standing(quota)).used == 800  # not 0: started again from the ledger
    after = await book.reserve(quota, 4_500, 1)
    assert after.reserved == 4_200  # what the ledger says is left
    await book.settle(before, 1_500)  # reserved before the loss: its whole cost, not 1,500 - 2,000
    await book.settle(after, 100)
    assert (await book.standing(quota)).used == 800 + 1_500 + 100


async def test_concurrent_requests_wait_for_the_seed_of_a_cold_counter() -> None:
    """After a restart on memory storage, 20 requests at once against a quota the ledger says is spent:
    all of them wait for the ledger's figure, so none passes."""
    reads = 0

    async def slow_ledger(holder: str, since: datetime) -> tuple[int, int, int, int]:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.05)
        return 1_000, 0, 0, 0

    book, quota = Quotas(storage_for("memory://"), QuotaWeights(), slow_ledger), Quota("key:k", tokens=1_000)

    async def take() -> bool:
        try:
            await book.reserve(quota, 50, 50)
        except GatewayError:
            return False
        return True

    first = asyncio.create_task(take())
    await asyncio.sleep(0.01)  # the others come while it reads the ledger
    assert not any(await asyncio.gather(first, *(take() for _ in range(19))))
    assert reads == 1 and (await book.standing(quota)).used == 1_000


class FailingAfter:
    """A ``limits`` storage that fails from its ``n``-th increment on (a Redis lost mid-reservation)."""

    def __init__(self, n: int) -> None:
        self.inner, self.left = storage_for("memory://"), n

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        self.left -= 1
        if self.left < 0:
            raise StorageError(ConnectionError("gone"))
        return await self.inner.incr(key, expiry, amount)

    async def get(self, key: str) -> int:
        return await self.inner.get(key)


async def test_a_store_lost_half_way_through_a_reservation_hands_back_what_it_moved() -> None:
    """The counter took the request's most, then the store failed before the excess was given back:
    the hold that comes up with the failure settles it back, so nothing stays in the counter."""
    storage = FailingAfter(3)  # the first reservation (2 increments), then the counter moved
    book, quota = Quotas(cast(Storage, storage), QuotaWeights()), Quota("key:k", tokens=1_000)
    await book.reserve(quota, 900, 900)
    with pytest.raises(Reserved) as partial:
        await book.reserve(quota, 10**6, 1)  # moved by 10**6, the give-back fails
    storage.left = 10
    await book.settle(partial.value.hold, 0)
    await book.settle(partial.value.hold, 0)  # a retried settlement moves nothing twice
    assert (await book.standing(quota)).held == 900


async def test_a_seeding_that_fails_leaves_the_next_use_to_seed() -> None:
    """The ledger failed while a counter was being seeded: its marker is given back, so the next use
    seeds it (instead of waiting on a generation nobody will draw)."""
    answers: list[object] = [ConnectionError("database gone"), (700, 0, 0, 0)]

    async def flaky(holder: str, since: datetime) -> tuple[int, int, int, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return cast(tuple[int, int, int, int], answer)

    book, quota = Quotas(storage_for("memory://"), QuotaWeights(), flaky), Quota("key:k", tokens=1_000)
    with pytest.raises(ConnectionError):
        await book.standing(quota)
    assert (await book.standing(quota)).used == 700 and answers == []
