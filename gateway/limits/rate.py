"""Per-key rate limits: requests per minute and tokens per minute, shared across replicas via Redis.

Built on the ``limits`` library (the engine slowapi runs on) used directly: slowapi's decorator
model fixes limits per route at import time and writes its own header names, while these limits are
per key, change at runtime (PATCH /admin/keys) and answer with OpenAI's headers
(``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``; OpenAI API docs, "Rate limits"), on the
answer and on a 429 alike (the ticket's :attr:`Ticket.headers` go on every answer after it was taken).

Tokens per minute are reserved at admission — the prompt's estimate plus the whole output budget, in
one atomic increment, so a parallel burst cannot admit more than the window holds — and settled
after the response against real usage (TensorZero's ticket pattern): what was reserved and not used
is given back (while the window it was taken from lasts), what was used beyond it is charged.
Windows are fixed minutes, as slowapi's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import storage_from_string

from gateway.auth.principal import Principal
from gateway.errors import GatewayError

#: The longest a Redis storage may take to answer, s: past it the request is answered 503 at once
#: (redis-py's default waits for as long as the kernel keeps the connection).
STORE_TIMEOUT_S = 2.0
#: ``Retry-After`` of a 503 ``limits_unavailable``, s.
STORE_RETRY_AFTER_S = 5


def storage_for(uri: str) -> Storage:
    """``memory://`` or ``redis://host:port/db`` -> an async ``limits`` storage (redis-py client): its
    failures raised as ``limits.errors.StorageError`` (:func:`limits_unavailable`), a Redis that does
    not answer within :data:`STORE_TIMEOUT_S` one of them."""
    async_uri = uri if uri.startswith("async+") else "async+" + uri
    options: dict[str, str | float] = {}
    if "redis" in async_uri.split("://", 1)[0]:
        options = {
            "implementation": "redispy",
            "socket_timeout": STORE_TIMEOUT_S,
            "socket_connect_timeout": STORE_TIMEOUT_S,
        }
    storage = storage_from_string(async_uri, wrap_exceptions=True, **options)
    assert isinstance(storage, Storage)
    return storage


def limits_unavailable() -> GatewayError:
    """503 ``limits_unavailable`` with ``Retry-After``: the store of the rate limits and quotas failed
    (``limits.errors.StorageError``), so what a request may spend cannot be counted."""
    return GatewayError(
        "limits_unavailable",
        "The gateway could not reach the store of its rate limits and quotas; retry shortly.",
        headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
    )


def reset_after(seconds: float) -> str:
    """A time until a window resets as OpenAI's ``x-ratelimit-reset-*`` headers write it (API docs,
    "Rate limits": ``1s``, ``6m0s``; ``12ms`` below a second): Go's ``time.Duration`` text, to the
    millisecond (rounded up) — ``120ms``, ``1s``, ``59.5s``, ``6m0s``, ``1h0m0s``; ``0s`` when reset."""
    ms = max(0, math.ceil(round(seconds * 1000, 6)))  # round first: 0.12 s is 120 ms, not 121
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def retry_after_s(reset_time: float) -> int:
    """``Retry-After`` for a window that resets at ``reset_time`` (epoch s): whole seconds, at least 1."""
    return max(1, math.ceil(reset_time - time.time()))


#: Unused tokens are given back only while their window has at least this long left, s: a refund
#: that landed in the next window would let it hold more than its budget.
_REFUND_MARGIN_S = 0.05


@dataclass(frozen=True, slots=True)
class Window:
    """One rate window as it stands: its ``limit`` and what ``remaining`` of it (requests or tokens),
    and when it resets (``reset_at``, epoch s)."""

    limit: int
    remaining: int
    reset_at: float

    def headers(self, what: str) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{what}`` headers of this window."""
        return {
            f"x-ratelimit-limit-{what}": str(self.limit),
            f"x-ratelimit-remaining-{what}": str(self.remaining),
            f"x-ratelimit-reset-{what}": reset_after(self.reset_at - time.time()),
        }


def tighter(windows: list[Window]) -> Window:
    """The window of ``windows`` (one limit, a key's and its group's) that lets the fewest more through:
    the least ``remaining``, then the smaller ``limit`` — what a client may count on (headers, ``GET
    /v1/key``)."""
    return min(windows, key=lambda window: (window.remaining, window.limit))


def window_headers(windows: dict[str, Window]) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of ``windows`` (by ``requests`` / ``tokens``)."""
    return {name: value for what, window in windows.items() for name, value in window.headers(what).items()}


@dataclass(frozen=True, slots=True)
class Bucket:
    """One holder of windows: a key (``key_<id>``) or its group (``group:<id>``), and its limits."""

    name: str
    rpm: int | None
    tpm: int | None


def buckets(principal: Principal) -> tuple[Bucket, ...]:
    """The windows a request of ``principal`` counts against: its key's, then its group's (shared by
    every key of the group)."""
    own = Bucket(principal.key_id, principal.rpm, principal.tpm)
    group = principal.group
    return (own,) if group is None else (own, Bucket(f"group:{group.id}", group.rpm, group.tpm))


@dataclass(slots=True)
class Ticket:
    """One admitted request's borrowing: ``reserved`` tokens charged up front per bucket, in the window
    that resets at ``window_reset[bucket]`` (epoch s); headers to send."""

    principal: Principal
    reserved: dict[str, int] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    window_reset: dict[str, float] = field(default_factory=dict)


class RateLimiter:
    """Checks and charges requests/min and tokens/min of a key and of its group.

    The ``x-ratelimit-*`` headers show, for requests and for tokens, the :func:`tighter` of the key's
    and its group's windows (the one that has that limit when only one has); a refusal shows the
    window that refused.
    """

    def __init__(self, storage: Storage, window_s: int = 60) -> None:
        self._storage = storage
        self._limiter = FixedWindowRateLimiter(storage)
        self._window_s = window_s

    def _item(self, amount: int) -> RateLimitItem:
        return RateLimitItemPerSecond(amount, self._window_s)

    async def _refuse(self, what: str, item: RateLimitItem, bucket: Bucket, ticket: Ticket) -> GatewayError:
        """The 429 of a spent window: ``Retry-After`` (whole seconds) and the ``x-ratelimit-*`` headers
        of the ticket's windows so far and of this one, as a success would carry them."""
        headers = dict(ticket.headers)
        retry = retry_after_s(await self._headers(what, item, bucket.name, headers))
        headers["Retry-After"] = str(retry)
        whose = "this key's group" if bucket.name.startswith("group:") else "this key"
        return GatewayError(
            f"rate_limit_{what}",
            f"Rate limit of {whose} reached for {what} ({item.amount} per {self._window_s} s); "
            f"retry in {retry} s.",
            headers=headers,
        )

    async def _window(self, what: str, item: RateLimitItem, key: str) -> Window:
        stats = await self._limiter.get_window_stats(item, what, key)
        return Window(item.amount, max(0, stats.remaining), float(stats.reset_time))

    async def _headers(self, what: str, item: RateLimitItem, key: str, out: dict[str, str]) -> float:
        """Write the window's ``x-ratelimit-*`` headers into ``out``; return its reset time (epoch s)."""
        window = await self._window(what, item, key)
        out.update(window.headers(what))
        return window.reset_at

    async def _windows(self, what: str, principal: Principal) -> list[Window]:
        """The ``what`` (``requests`` | ``tokens``) windows of ``principal``'s key and group that have
        that limit, as they stand."""
        windows = []
        for bucket in buckets(principal):
            limit = bucket.rpm if what == "requests" else bucket.tpm
            if limit:
                windows.append(await self._window(what, self._item(limit), bucket.name))
        return windows

    async def _show(self, what: str, principal: Principal, out: dict[str, str]) -> None:
        """Write the :func:`tighter` ``what`` window's headers into ``out`` (none without that limit)."""
        windows = await self._windows(what, principal)
        if windows:
            out.update(tighter(windows).headers(what))

    async def count(self, principal: Principal) -> Ticket:
        """Count one request against the requests per minute of its key and group (429 with
        ``Retry-After`` when one is spent): taken as soon as the caller is known, before its body
        is read."""
        ticket = Ticket(principal)
        for bucket in buckets(principal):
            if bucket.rpm:
                item = self._item(bucket.rpm)
                if not await self._limiter.hit(item, "requests", bucket.name):
                    raise await self._refuse("requests", item, bucket, ticket)
        await self._show("requests", principal, ticket.headers)
        return ticket

    async def reserve(self, ticket: Ticket, tokens: int) -> None:
        """Reserve ``tokens`` (prompt estimate + output budget) of the tokens per minute of its key
        and group (429 with ``Retry-After`` when they do not fit one of them).

        A reservation larger than a whole budget is capped at it, so one big request per window
        passes. Each reservation is one increment, given back at once when it does not fit (with
        those already taken), so two requests at the same moment cannot both take a window's last
        tokens.
        """
        windows = []
        for bucket in buckets(ticket.principal):
            if bucket.tpm:
                item = self._item(bucket.tpm)
                reserve = min(max(1, tokens), bucket.tpm)
                if not await self._limiter.hit(item, "tokens", bucket.name, cost=reserve):
                    await self._limiter.hit(item, "tokens", bucket.name, cost=-reserve)
                    await self._give_back(ticket)
                    raise await self._refuse("tokens", item, bucket, ticket)
                ticket.reserved[bucket.name] = reserve
                windows.append(await self._window("tokens", item, bucket.name))
                ticket.window_reset[bucket.name] = windows[-1].reset_at
        if windows:
            ticket.headers.update(tighter(windows).headers("tokens"))

    async def _give_back(self, ticket: Ticket) -> None:
        """Return every reservation the ticket holds (a later bucket refused the request)."""
        for bucket in buckets(ticket.principal):
            reserved = ticket.reserved.pop(bucket.name, 0)
            if reserved and bucket.tpm:
                await self._limiter.hit(self._item(bucket.tpm), "tokens", bucket.name, cost=-reserved)

    async def describe(self, ticket: Ticket) -> None:
        """Write the tokens-per-minute headers into ``ticket`` without charging anything: a request
        answered before its reservation (refused for the queue) shows them too."""
        if "x-ratelimit-limit-tokens" not in ticket.headers:
            await self._show("tokens", ticket.principal, ticket.headers)

    async def standing(self, principal: Principal) -> dict[str, Window]:
        """The windows the ``x-ratelimit-*`` headers show now, by ``requests`` / ``tokens`` (the
        :func:`tighter` of the key's and its group's), nothing charged (``GET /v1/key``)."""
        windows: dict[str, Window] = {}
        for what in ("requests", "tokens"):
            if found := await self._windows(what, principal):
                windows[what] = tighter(found)
        return windows

    async def settle(self, ticket: Ticket, used_tokens: Callable[[int], int]) -> None:
        """Settle each reservation against ``used_tokens(reserved)``: charge what was used beyond it;
        give back what was not used if the window it was taken from still runs (a later one owes it
        nothing)."""
        for bucket in buckets(ticket.principal):
            reserved = ticket.reserved.get(bucket.name, 0)
            if not bucket.tpm or not reserved:
                continue
            used = used_tokens(reserved)
            if used == reserved:
                continue
            if used < reserved and time.time() > ticket.window_reset[bucket.name] - _REFUND_MARGIN_S:
                continue
            await self._limiter.hit(self._item(bucket.tpm), "tokens", bucket.name, cost=used - reserved)
