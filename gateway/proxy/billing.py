"""A request's account with its key's limits: counted against its requests per minute before its body
is read, its tokens per minute and its quotas' cost (:mod:`gateway.limits.quota`) reserved once its
prompt is sized, settled against its real usage at its end; and the key's ``x-ratelimit-*``
headers (``x-quota-warning`` past a quota in ``warn`` mode) for whatever it is answered."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from limits.errors import StorageError

from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.limits.quota import Hold, Quotas, QuotaWeights, Reserved
from gateway.limits.rate import RateLimiter, Ticket, limits_unavailable
from gateway.telemetry.record import RequestTelemetry

log = logging.getLogger("gateway.errors")
#: Tries of one settlement while the limits' store fails, the first wait between them (doubled each
#: time: 1 + 2 + ... + 32 s, about a minute), s.
SETTLE_TRIES, SETTLE_BACKOFF_S = 7, 1.0


class Billing:
    """One request's :class:`~gateway.limits.rate.Ticket` (None until it was counted)."""

    __slots__ = (
        "_limits", "_quotas", "_principal", "_settings", "_request_id", "ticket", "_holds", "_unread_cost"
    )  # fmt: skip

    def __init__(
        self, limits: RateLimiter, quotas: Quotas, principal: Principal, settings: Settings, request_id: str
    ) -> None:
        self._limits = limits
        self._quotas = quotas
        self._principal = principal
        self._settings = settings
        self._request_id = request_id
        self.ticket: Ticket | None = None
        self._holds: list[Hold] = []
        #: What a client that left a non-stream answer unread is charged against a quota at most: its
        #: prompt and output budget, GATEWAY_TPM_OUTPUT_RESERVE_TOKENS a sequence when it set none
        #: (not the whole context its reservation held: the answer is aborted when it leaves)
        self._unread_cost = 0

    async def count(self) -> None:
        """Count the request against its key's requests per minute (429 when spent), before its body
        is read: the rate limit's ticket. 503 ``limits_unavailable`` when their store fails."""
        try:
            self.ticket = await self._limits.count(self._principal)
        except StorageError as exc:
            raise limits_unavailable() from exc

    async def reserve(
        self, prompt_tokens: int, sequences: int, output_budget: int | None
    ) -> tuple[dict[str, str], int | None]:
        """Reserve the request's cost of each of its quotas, then of its key's and its group's tokens
        per minute; the ticket's headers and the output cap to splice into its body, per sequence
        (None: its own budget stands).

        A request that sets no output budget is given one (:func:`output_reserve`): at most
        ``GATEWAY_OUTPUT_RESERVE_TOKENS`` a sequence, and what its context leaves — so it holds that,
        not the whole context, of its quotas, and generates no more (the backend ends it with the
        length finish). A quota is reserved the request's most cost: its prompt and its output
        budget a sequence. Where that does not fit, it holds what is left and its output is capped at
        what that pays for; 429 ``quota_exceeded`` when not even its prompt and one token a sequence
        fit (:meth:`~gateway.limits.quota.Quotas.reserve`). A quota in ``warn`` mode is reserved the
        tokens-per-minute figure and only reported past its end. Tokens per minute: the prompt and the
        (capped) output budget — ``GATEWAY_TPM_OUTPUT_RESERVE_TOKENS`` a sequence when the client set
        none, settled at the end — in each window of the key and of its group (429 when they don't
        fit). 503 ``limits_unavailable`` when their store fails."""
        try:
            return await self._reserve(prompt_tokens, sequences, output_budget)
        except StorageError as exc:
            raise limits_unavailable() from exc

    async def _reserve(
        self, prompt_tokens: int, sequences: int, output_budget: int | None
    ) -> tuple[dict[str, str], int | None]:
        assert self.ticket is not None
        settings, weights = self._settings, self._quotas.weights
        budget = output_budget or output_reserve(settings, prompt_tokens)
        cap = None if output_budget else budget
        reserve = output_budget or settings.tpm_output_reserve_tokens  # tokens per minute, warn quotas
        for quota in self._principal.quotas():
            if quota.mode == "enforce":
                most, least = (
                    weights.most(prompt_tokens, sequences * budget),
                    weights.most(prompt_tokens, sequences),
                )
            else:
                most, least = weights.most(prompt_tokens, sequences * reserve), 0
            try:
                hold = await self._quotas.reserve(quota, most, least)
            except Reserved as partial:  # the store failed half-way: what it holds is given back at the end
                self._holds.append(partial.hold)
                raise limits_unavailable() from partial
            self._holds.append(hold)
            paid = weights.output_paid(hold.reserved, prompt_tokens)
            if quota.mode == "enforce" and paid is not None and paid // sequences < budget:
                cap = budget = max(1, paid // sequences)
            if hold.over:
                log.warning("request %s: past the %s quota (warn mode)", self._request_id, quota.holder)
                self.ticket.headers["x-quota-warning"] = f"{quota.holder.split(':', 1)[0]} quota exceeded"
        output = min(budget, reserve)
        self._unread_cost = weights.most(prompt_tokens, sequences * output)
        await self._limits.reserve(self.ticket, prompt_tokens + sequences * output)
        return self.ticket.headers, cap

    async def headers(self) -> dict[str, str]:
        """The key's ``x-ratelimit-*`` headers for an answer (a refusal too, also one given before the
        tokens were reserved); none before the request was counted."""
        if self.ticket is None:
            return {}
        try:
            await self._limits.describe(self.ticket)
        except Exception:  # the headers inform; a limits store failing now must not make a 500 of it
            log.warning("request %s: the tokens-per-minute headers could not be read", self._request_id)
        return self.ticket.headers

    async def settle(self, record: RequestTelemetry, prompt_tokens: int) -> None:
        """Charge the tokens the request used (:func:`charged`) instead of its reservation; a store that
        fails meanwhile is tried again, :data:`SETTLE_TRIES` times over about a minute, before the
        settlement is given up (logged with its figures)."""
        settlements: list[Callable[[], Awaitable[None]]] = []
        if self.ticket is not None:
            ticket = self.ticket
            used = functools.partial(charged, record, prompt_tokens=prompt_tokens)
            settlements.append(lambda: self._limits.settle(ticket, lambda reserved: used(reserved=reserved)))
        for hold in self._holds:
            cost = spent(record, self._quotas.weights, min(hold.reserved, self._unread_cost), prompt_tokens)
            settlements.append(functools.partial(self._quotas.settle, hold, cost))
        for settle in settlements:
            for attempt in range(SETTLE_TRIES):
                try:
                    await settle()
                    break
                except StorageError:
                    if attempt == SETTLE_TRIES - 1:
                        log.error(
                            "request %s: its usage (%d prompt, %d completion tokens) could not be settled",
                            self._request_id, record.prompt_tokens, record.completion_tokens,
                        )  # fmt: skip
                        break
                    log.warning("request %s: settling its usage failed; trying again", self._request_id)
                    await asyncio.sleep(SETTLE_BACKOFF_S * 2**attempt)


def output_reserve(settings: Settings, prompt_tokens: int) -> int:
    """The output budget a sequence of a request that sets none is given, tokens:
    ``GATEWAY_OUTPUT_RESERVE_TOKENS``, or what the context (``GATEWAY_MAX_MODEL_LEN``) leaves beside
    its prompt when that is less (at least 1: a prompt that fills the context is the backend's to
    refuse)."""
    return max(1, min(settings.output_reserve_tokens, settings.max_model_len - prompt_tokens))


def charged(record: RequestTelemetry, reserved: int, prompt_tokens: int) -> int:
    """The tokens a request is charged: its usage; a client that left may have run the backend for
    more than it saw — a whole body it never received, a prefill before its first usage —, so its
    reservation stands (non-stream, once admitted: one that left while queued never reached the
    backend), or at least its prompt's size (stream: ``prompt_tokens``)."""
    used = record.prompt_tokens + record.completion_tokens
    if not record.client_disconnected or record.queue_wait_s is None:
        return used
    if not record.stream:
        return max(used, reserved)
    return max(used, record.completion_tokens + prompt_tokens)


def spent(record: RequestTelemetry, weights: QuotaWeights, reserved: int, prompt_tokens: int) -> int:
    """The cost a request is charged against a quota: its usage's (:meth:`QuotaWeights.cost`); for a
    client that left, as :func:`charged` reckons: its reservation (non-stream, once admitted), or at
    least its prompt's (stream)."""
    cost = weights.cost(
        record.prompt_tokens, record.cached_tokens, record.completion_tokens, record.reasoning_tokens
    )
    if not record.client_disconnected or record.queue_wait_s is None:
        return cost
    if not record.stream:
        return max(cost, reserved)
    output = weights.cost(0, 0, record.completion_tokens, record.reasoning_tokens)
    return max(cost, weights.cost(prompt_tokens, 0, 0, 0) + output)
