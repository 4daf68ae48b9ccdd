"""A request's account with its key's limits (gateway/proxy/billing.py) on the ``limits`` memory
storage: reserved when sized, settled against real usage, a client that left charged what the
backend may have run for it, a quota in warn mode said so in a header."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest
from limits.aio.storage import Storage
from limits.errors import StorageError

from gateway.auth.principal import Group, Principal, Quota
from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.limits.quota import Quotas, QuotaWeights
from gateway.limits.rate import RateLimiter, storage_for
from gateway.proxy import billing as billing_module
from gateway.proxy.billing import Billing, charged, spent
from gateway.telemetry.record import RequestTelemetry

SETTINGS = Settings(upstream="http://unused", tpm_output_reserve_tokens=100, output_reserve_tokens=5_000)


def record(stream: bool, gone: bool, prompt: int, completion: int, admitted: bool = True) -> RequestTelemetry:
    made = RequestTelemetry("r", "k", "n", "m", "/v1/chat/completions", "chat", stream, datetime.now(UTC))
    made.prompt_tokens, made.completion_tokens, made.client_disconnected = prompt, completion, gone
    made.queue_wait_s = 0.0 if admitted else None
    return made


def limits() -> tuple[RateLimiter, Quotas]:
    storage = storage_for("memory://")
    return RateLimiter(storage), Quotas(storage, QuotaWeights())


async def test_reserved_when_sized_and_settled_against_what_was_used() -> None:
    rate, quotas = limits()
    key = Principal(key_id="key_1", name="team", tpm=1000, quota=Quota("key:key_1", 10_000, "day"))
    billing = Billing(rate, quotas, key, SETTINGS, "req-1")
    await billing.count()
    headers, cap = await billing.reserve(prompt_tokens=50, sequences=1, output_budget=None)  # 50 + 100
    assert headers["x-ratelimit-remaining-tokens"] == "850"
    assert cap == 5_000  # no budget: GATEWAY_OUTPUT_RESERVE_TOKENS, spliced as its cap
    await billing.settle(record(True, False, 50, 20), prompt_tokens=50)
    assert (await rate.standing(key))["tokens"].remaining == 930
    assert (await quotas.standing(key.quotas()[0])).used == 70


async def test_a_quota_in_warn_mode_is_said_in_a_header() -> None:
    rate, quotas = limits()
    key = Principal(key_id="key_2", name="team", quota=Quota("key:key_2", 100, "day", mode="warn"))
    first, second = (Billing(rate, quotas, key, SETTINGS, f"req-{i}") for i in (2, 3))
    for billing in (first, second):
        await billing.count()
    assert "x-quota-warning" not in (await first.reserve(prompt_tokens=50, sequences=2, output_budget=8))[0]
    headers, cap = await second.reserve(prompt_tokens=30, sequences=1, output_budget=10)  # past it: served
    assert headers["x-quota-warning"] == "key quota exceeded" and cap is None  # and not capped


async def test_the_output_is_capped_at_what_the_key_and_its_group_have_left() -> None:
    rate, quotas = limits()
    group = Quota("group:g", 1_000, "day")
    team = Group("g", "team", quota=group)
    key = Principal(key_id="key_4", name="team", quota=Quota("key:key_4", 10**7, "day"), group=team)
    capped = Billing(rate, quotas, key, SETTINGS, "req-4")
    await capped.count()
    _, cap = await capped.reserve(prompt_tokens=100, sequences=2, output_budget=None)  # 5,000 each
    assert cap == 450  # the group's 1,000: the prompt, then 450 for each of its two sequences
    assert (await quotas.standing(key.quotas()[0])).held == 100 + 2 * 5_000
    assert (await quotas.standing(group)).held == 1_000
    await capped.settle(record(False, False, 100, 2 * 450), prompt_tokens=100)
    assert (await quotas.standing(key.quotas()[0])).used == (await quotas.standing(group)).used == 1_000
    within = Billing(rate, quotas, Principal(key_id="key_5", name="t", quota=Quota("key:key_5", 500)),
                     SETTINGS, "req-5")  # fmt: skip
    await within.count()
    assert (await within.reserve(prompt_tokens=100, sequences=1, output_budget=300))[1] is None  # it fits


def test_a_client_that_left_is_charged_what_the_backend_may_have_run() -> None:
    assert charged(record(False, False, 10, 5), reserved=500, prompt_tokens=10) == 15
    assert charged(record(False, True, 0, 0), reserved=500, prompt_tokens=10) == 500  # a whole body unread
    assert charged(record(True, True, 0, 3), reserved=500, prompt_tokens=40) == 43  # its prefill, at least
    left_queued = record(False, True, 0, 0, admitted=False)  # the backend never saw it
    assert charged(left_queued, reserved=500, prompt_tokens=10) == 0
    assert spent(left_queued, QuotaWeights(), reserved=50_021, prompt_tokens=21) == 0


async def test_an_unread_answer_without_an_output_cap_is_not_charged_its_whole_context() -> None:
    """It held its output reserve while it ran; its client left, the answer was aborted: it is
    charged its prompt and GATEWAY_TPM_OUTPUT_RESERVE_TOKENS (100 here), as the tokens per minute are."""
    rate, quotas = limits()
    key = Principal(key_id="key_6", name="team", quota=Quota("key:key_6", 10**7, "day"))
    billing = Billing(rate, quotas, key, SETTINGS, "req-6")
    await billing.count()
    await billing.reserve(prompt_tokens=100, sequences=1, output_budget=None)
    standing = await quotas.standing(key.quotas()[0])
    assert (standing.used, standing.held) == (0, 100 + 5_000)  # while it runs
    await billing.settle(record(False, True, 0, 0), prompt_tokens=100)
    assert (await quotas.standing(key.quotas()[0])).used == 100 + 100


class Flaky:
    """A ``limits`` store that fails the increments it is told to (a Redis blip), else the memory one."""

    def __init__(self) -> None:
        self.inner, self.failing = storage_for("memory://"), 0

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        if self.failing:
            self.failing -= 1
            raise StorageError(ConnectionError("blip"))
        return await self.inner.incr(key, expiry, amount)

    async def get(self, key: str) -> int:
        return await self.inner.get(key)


async def test_a_store_that_fails_is_a_503_and_a_settlement_is_tried_again(monkeypatch) -> None:
    monkeypatch.setattr(billing_module, "SETTLE_BACKOFF_S", 0.0)
    store = Flaky()
    quotas = Quotas(cast(Storage, store), QuotaWeights())
    key = Principal(key_id="key_7", name="team", quota=Quota("key:key_7", 1_000, "day"))
    held = Billing(RateLimiter(storage_for("memory://")), quotas, key, SETTINGS, "req-7")
    await held.count()
    await held.reserve(prompt_tokens=10, sequences=1, output_budget=90)
    store.failing = 2  # the settlement's first two tries fail
    await held.settle(record(False, False, 10, 20), prompt_tokens=10)
    assert (await quotas.standing(key.quotas()[0])).used == 30
    half = Billing(RateLimiter(storage_for("memory://")), quotas, key, SETTINGS, "req-8")
    await half.count()
    await store.incr("quota/key:key_7/day/" + datetime.now(UTC).strftime("%Y%m%d"), 60, 2_000)  # spent
    store.failing = 0
    calls = {"n": 0}
    original = store.incr

    async def fail_the_give_back(key: str, expiry: int, amount: int = 1) -> int:
        calls["n"] += 1
        if calls["n"] == 2:  # the counter moved, then the give-back fails
            raise StorageError(ConnectionError("blip"))
        return await original(key, expiry, amount)

    store.incr = fail_the_give_back  # type: ignore[method-assign]
    try:
        await half.reserve(prompt_tokens=10, sequences=1, output_budget=90)
    except GatewayError as refused:
        assert (refused.status, refused.code) == (503, "limits_unavailable")
        assert refused.headers["Retry-After"] == "5"
    else:
        raise AssertionError("a store failing half-way was not a 503")
    store.incr = original  # type: ignore[method-assign]
    await half.settle(record(False, False, 0, 0, admitted=False), prompt_tokens=10)
    assert (await quotas.standing(key.quotas()[0])).used == 2_030  # what it moved, given back


async def test_an_uncapped_request_is_given_the_output_reserve_or_what_its_context_leaves() -> None:
    rate, quotas = limits()
    key = Principal(key_id="key_9", name="team", quota=Quota("key:key_9", 10**7, "day"))
    context = SETTINGS.max_model_len
    for prompt, budget, cap in (
        (100, None, 5_000),
        (context - 300, None, 300),
        (context, None, 1),
        (9, 7_000, None),
    ):
        billing = Billing(rate, quotas, key, SETTINGS, "req-9")
        await billing.count()
        assert (await billing.reserve(prompt_tokens=prompt, sequences=1, output_budget=budget))[1] == cap


async def test_a_groups_tokens_per_minute_hold_a_key_without_its_own() -> None:
    rate, quotas = limits()
    key = Principal(key_id="key_10", name="team", group=Group("g10", "team", tpm=300))
    first, second = (Billing(rate, quotas, key, SETTINGS, f"req-1{i}") for i in (0, 1))
    for billing in (first, second):
        await billing.count()
    headers, _ = await first.reserve(prompt_tokens=100, sequences=1, output_budget=100)
    assert (headers["x-ratelimit-limit-tokens"], headers["x-ratelimit-remaining-tokens"]) == ("300", "100")
    with pytest.raises(GatewayError) as refused:
        await second.reserve(prompt_tokens=100, sequences=1, output_budget=100)
    assert refused.value.code == "rate_limit_tokens"
