"""What every inference request shares, whatever its dialect: the backends (each with its upstream
and slots), the limits, where telemetry goes, and what the gateway learnt of its upstream.

One :class:`Pipeline` lives on ``app.state``; each request is an
:class:`~gateway.proxy.exchange.Exchange` over it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.admission import Need
from gateway.auth.principal import Principal
from gateway.backends.pool import Backend, Backends
from gateway.config import Settings
from gateway.dialects.base import Prepared
from gateway.errors import GatewayError
from gateway.limits.quota import Quotas, QuotaWeights
from gateway.limits.rate import RateLimiter, storage_for
from gateway.proxy.aliases import ModelAliases
from gateway.storage.response_owners import Owner
from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.tracing import Tracing


class Sink(Protocol):
    """Where finished records go (:class:`~gateway.telemetry.sinks.TelemetrySinks`: Prometheus, the
    ledger, the log). ``publish`` does no I/O on the caller's path; ``check`` raises the
    :class:`~gateway.errors.GatewayError` of a sink that can't keep a record now (503
    ``ledger_unavailable``), before the request is served."""

    def publish(self, record: RequestTelemetry) -> None: ...

    def check(self) -> None: ...


class Owners(Protocol):
    """Which key created which stored response, on which backend
    (:class:`~gateway.storage.response_owners.ResponseOwners`)."""

    def claim(self, response_id: str, owner: Owner) -> None: ...

    async def owner(self, response_id: str) -> Owner | None: ...

    async def forget(self, response_id: str) -> None: ...


@dataclass(slots=True)
class Pipeline:
    """The shared parts of forwarding. ``background`` holds the recording tasks still running;
    ``owners`` remembers which key created which stored response (None: not tracked, as in the
    in-memory test pipelines that serve no Responses API); ``tracing``: OpenTelemetry spans of the
    requests (None: off, :mod:`gateway.telemetry.tracing`); ``cache_secret``: what every request's
    ``cache_salt`` is derived from (:mod:`gateway.auth.cache_salt`; the app reads it from the settings
    or the database, a pipeline made without one has its own)."""

    backends: Backends
    settings: Settings
    sink: Sink
    limits: RateLimiter
    owners: Owners | None = None
    quotas: Quotas = field(default_factory=lambda: Quotas(storage_for("memory://"), QuotaWeights()))
    tracing: Tracing | None = None
    cache_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    background: set[asyncio.Task[None]] = field(default_factory=set)
    aliases: ModelAliases = field(init=False)

    def __post_init__(self) -> None:
        self.aliases = ModelAliases(self.settings.served_model, self.settings.model_aliases)

    async def stored_at(self, principal: Principal, response_id: str, param: str) -> Backend:
        """The backend that stores the response ``response_id``; 404 ``response_not_found`` unless
        ``principal``'s key created it (any other key must not learn it exists) or when the backend
        it was stored on is no longer configured. A claim without a backend: the first one up."""
        owner = await self.owners.owner(response_id) if self.owners is not None else None
        backends = self.backends
        if owner is None or owner.key_id != principal.key_id:
            backend = None
        elif owner.backend is None:
            backend = backends.first_up()
        else:
            backend = backends.by_name.get(owner.backend)
        if backend is None:
            raise GatewayError(
                "response_not_found", f"Response with id '{response_id}' not found.", param=param
            )
        return backend

    def output_cap(self, prepared: Prepared, prompt_tokens: int) -> int:
        """The most output tokens a request may produce: its own cap, else
        ``GATEWAY_OUTPUT_RESERVE_TOKENS``, within what the context leaves."""
        room = max(0, self.settings.max_model_len - prompt_tokens)
        return min(room, prepared.output_budget or self.settings.output_reserve_tokens)

    def need(
        self, prepared: Prepared, prompt_tokens: int, cached_tokens: int = 0, service_s: float = 1.0
    ) -> Need:
        """What the request holds while it runs: its sequences, ``sequences x (prompt + output)`` KV
        tokens — the output budget capped at what the context leaves, ``GATEWAY_OUTPUT_RESERVE_TOKENS``
        when it sets none (its cap, spliced once its tokens are reserved); the cached prefix counts
        too, as vLLM cannot evict blocks a running sequence uses — and the lane if what it must
        prefill, the prompt less the prefix the backend's cache holds (``cached_tokens``), is long.
        400 ``context_length_exceeded`` when that is more than the whole pool. ``service_s``: how
        long it is expected to run (what the queue orders it by)."""
        settings = self.settings
        output = self.output_cap(prepared, prompt_tokens)
        whole = prepared.sequences * (prompt_tokens + output)
        if whole > settings.kv_budget_tokens:
            message = (
                f"This request needs {whole} tokens of KV cache ({prepared.sequences} x "
                f"({prompt_tokens} prompt + {output} output)); the backend's holds "
                f"{settings.kv_budget_tokens}."
            )
            param = prepared.output_param if prepared.output_budget else None
            raise GatewayError("context_length_exceeded", message, param=param)
        return Need(
            sequences=prepared.sequences,
            kv_tokens=whole,
            long=prompt_tokens - cached_tokens >= settings.long_prompt_tokens,
            footprint=prompt_tokens,
            service_s=service_s,
        )

    def wants_counters(self, backend: Backend) -> bool:
        """Whether to scrape ``backend``'s spec-decode counters around a request (``metrics_delta``)."""
        mode = self.settings.spec_counters
        return mode == "always" or (mode == "auto" and backend.traits.per_request_metrics is not True)

    def in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` off the request's path; :meth:`settled` waits for it."""
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def settled(self) -> None:
        """Wait for the recording of every request that has ended (before the ledger is read or flushed
        for the last time)."""
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)
