"""Per-key limits (gateway/limits/rate.py) on the ``limits`` memory storage: tokens per minute reserve
prompt + output at admission, so a parallel burst cannot take more than the window; settlement gives
back what was not used while its window lasts, and charges what was used beyond."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.auth.principal import Group, Principal
from gateway.errors import GatewayError
from gateway.limits.rate import RateLimiter, Ticket, reset_after, storage_for, window_headers
from tests.support.clients import seconds_of

KEY = Principal(key_id="key_1", name="team", tpm=100)


async def admit(limiter: RateLimiter, tokens: int) -> Ticket:
    """A request of ``KEY`` counted and ``tokens`` reserved, as the exchange does."""
    ticket = await limiter.count(KEY)
    await limiter.reserve(ticket, tokens)
    return ticket


async def admitted(limiter: RateLimiter, tokens: int, requests: int) -> list[Ticket]:
    results = await asyncio.gather(*(admit(limiter, tokens) for _ in range(requests)), return_exceptions=True)
    return [r for r in results if not isinstance(r, BaseException)]


async def test_a_parallel_burst_cannot_take_more_than_the_window() -> None:
    """12 requests of 30 tokens (prompt estimate + max_tokens) at once against 100 a minute: 3 run."""
    limiter = RateLimiter(storage_for("memory://"))
    tickets = await admitted(limiter, 30, 12)
    assert len(tickets) == 3
    with pytest.raises(GatewayError) as refused:
        await admit(limiter, 30)
    assert refused.value.code == "rate_limit_tokens" and int(refused.value.headers["Retry-After"]) >= 1


async def test_what_a_request_did_not_use_is_given_back() -> None:
    limiter = RateLimiter(storage_for("memory://"))
    tickets = await admitted(limiter, 30, 3)
    for ticket in tickets:
        await limiter.settle(ticket, lambda reserved: 10)  # used 10 of the 30 reserved
    assert len(await admitted(limiter, 30, 12)) == 2  # 30 used, 70 left: two more of 30


async def test_what_a_request_used_beyond_its_reservation_is_charged() -> None:
    limiter = RateLimiter(storage_for("memory://"))
    [ticket] = await admitted(limiter, 10, 1)
    await limiter.settle(ticket, lambda reserved: 95)
    with pytest.raises(GatewayError):
        await admit(limiter, 10)


async def test_nothing_is_given_back_to_a_window_the_reservation_was_not_taken_from() -> None:
    limiter = RateLimiter(storage_for("memory://"), window_s=1)
    [ticket] = await admitted(limiter, 90, 1)
    await asyncio.sleep(1.1)  # the window the 90 were taken from has ended
    await limiter.settle(ticket, lambda reserved: 0)
    assert len(await admitted(limiter, 50, 3)) == 2  # a fresh 100, not 190


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.0004, "1ms"), (0.12, "120ms"), (1, "1s"), (59.5, "59.5s"), (360, "6m0s"),
     (3661.25, "1h1m1.25s")],
)  # fmt: skip
def test_reset_times_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    """OpenAI API docs, "Rate limits": ``x-ratelimit-reset-requests: 1s``, ``-tokens: 6m0s``; ``12ms``
    and the like below a second (Go's duration text)."""
    assert reset_after(seconds) == text


async def test_a_refusal_carries_the_rate_limit_headers_with_the_time_left_in_its_window() -> None:
    """A 429 has the x-ratelimit-* headers a success has, and its reset is the window's real time
    left: under the window's length, and what ``Retry-After`` rounds up."""
    key = Principal(key_id="key_2", name="team", rpm=1, tpm=100)
    limiter = RateLimiter(storage_for("memory://"), window_s=600)
    ticket = await limiter.count(key)
    await limiter.reserve(ticket, 10)
    assert seconds_of(ticket.headers["x-ratelimit-reset-requests"]) <= 600
    with pytest.raises(GatewayError) as requests:
        await limiter.count(key)
    headers = requests.value.headers
    assert (headers["x-ratelimit-limit-requests"], headers["x-ratelimit-remaining-requests"]) == ("1", "0")
    left = seconds_of(headers["x-ratelimit-reset-requests"])
    assert 0 < left <= 600 and int(headers["Retry-After"]) - 1 <= left <= int(headers["Retry-After"])
    tokens_key = Principal(key_id="key_3", name="team", rpm=5, tpm=100)
    await limiter.reserve(await limiter.count(tokens_key), 90)
    with pytest.raises(GatewayError) as tokens:
        await limiter.reserve(await limiter.count(tokens_key), 50)
    headers = tokens.value.headers
    assert tokens.value.code == "rate_limit_tokens"
    assert (headers["x-ratelimit-limit-tokens"], headers["x-ratelimit-remaining-tokens"]) == ("100", "10")
    assert headers["x-ratelimit-remaining-requests"] == "3"  # the request was counted before its tokens
    assert 0 < seconds_of(headers["x-ratelimit-reset-tokens"]) <= 600


async def test_standing_gives_each_window_as_figures_and_charges_nothing() -> None:
    """``standing`` (``GET /v1/key``, the headers of answers that count nothing): per window its limit,
    what remains and when it resets; the key's own window, its group's for a limit only the group has."""
    group = Group(id="grp_1", name="lab", rpm=7)
    principal = Principal(key_id="key_2", name="team", tpm=100, group=group)
    limiter = RateLimiter(storage_for("memory://"))
    await limiter.reserve(await limiter.count(principal), 30)
    before = time.time()
    windows = await limiter.standing(principal)
    again = await limiter.standing(principal)
    figures = {what: (w.limit, w.remaining) for what, w in windows.items()}
    assert figures == {"requests": (7, 6), "tokens": (100, 70)}
    assert again == windows  # nothing charged
    assert before < windows["tokens"].reset_at <= before + 60
    assert window_headers(windows)["x-ratelimit-remaining-tokens"] == "70"


async def test_a_key_and_its_group_are_each_held_and_the_headers_show_the_tighter() -> None:
    """Tokens per minute of the key (1,000) and its group (300) are both reserved; the headers and
    ``standing`` show whichever window lets fewer more through — the group's, then the key's once it
    has less left."""
    group = Group(id="grp_2", name="lab", rpm=50, tpm=300)
    principal = Principal(key_id="key_4", name="team", rpm=2, tpm=1_000, group=group)
    limiter = RateLimiter(storage_for("memory://"))
    ticket = await limiter.count(principal)
    await limiter.reserve(ticket, 100)
    headers = ticket.headers
    assert (headers["x-ratelimit-limit-tokens"], headers["x-ratelimit-remaining-tokens"]) == ("300", "200")
    assert (headers["x-ratelimit-limit-requests"], headers["x-ratelimit-remaining-requests"]) == ("2", "1")
    member = Principal(key_id="key_5", name="other", group=group)  # the group's alone
    await limiter.reserve(await limiter.count(member), 150)
    with pytest.raises(GatewayError) as refused:
        await limiter.reserve(await limiter.count(principal), 100)
    assert refused.value.code == "rate_limit_tokens" and "group" in refused.value.message
    figures = {what: (w.limit, w.remaining) for what, w in (await limiter.standing(principal)).items()}
    assert figures == {"requests": (2, 0), "tokens": (300, 50)}
    described = Ticket(member)
    await limiter.describe(described)
    assert described.headers["x-ratelimit-remaining-tokens"] == "50"
