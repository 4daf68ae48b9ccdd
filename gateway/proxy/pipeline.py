"""What every inference request shares, whatever its dialect: the upstream, the slots, the limits,
where telemetry goes, and what the gateway learnt of its upstream.

One :class:`Pipeline` lives on ``app.state``; each request is an
:class:`~gateway.proxy.exchange.Exchange` over it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.admission import Admission
from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.limits import RateLimiter
from gateway.proxy.upstream import Upstream
from gateway.telemetry.record import RequestTelemetry
from gateway.traits import UpstreamTraits


class Sink(Protocol):
    """Where finished records go (:class:`~gateway.telemetry.sinks.TelemetrySinks`: Prometheus, the
    ledger, the log). ``publish`` does no I/O on the caller's path."""

    def publish(self, record: RequestTelemetry) -> None: ...


class Scraper(Protocol):
    """Reads named samples of the backend's ``/metrics`` (:class:`~gateway.telemetry.backend.BackendMonitor`):
    ``{name: value}``, or None when the page can't be read."""

    async def scrape(self, names: tuple[str, ...], timeout_s: float = 2.0) -> dict[str, float] | None: ...


@dataclass(slots=True)
class Pipeline:
    """The shared parts of forwarding. ``background`` holds the recording tasks still running."""

    upstream: Upstream
    admission: Admission
    settings: Settings
    sink: Sink
    backend: Scraper
    limits: RateLimiter
    traits: UpstreamTraits = field(default_factory=UpstreamTraits)
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def check_model(self, principal: Principal, model: str) -> None:
        """404 ``model_not_found`` for a model not served, 403 ``model_not_allowed`` for one the key may
        not use."""
        if model != self.settings.served_model:
            raise GatewayError("model_not_found", f"The model `{model}` does not exist.", param="model")
        if not principal.may_use(model):
            message = f"This API key may not use the model `{model}`."
            raise GatewayError("model_not_allowed", message, param="model")

    def check_budget(self, budget: int | None, param: str) -> None:
        """400 ``context_length_exceeded`` for an output budget no KV pool of this backend could hold."""
        kv = self.settings.kv_budget_tokens
        if budget is not None and budget > kv:
            message = f"{param} {budget} exceeds the backend's KV cache ({kv} tokens)."
            raise GatewayError("context_length_exceeded", message, param=param)

    def wants_counters(self) -> bool:
        """Whether to scrape vLLM's spec-decode counters around a request (``metrics_delta``)."""
        mode = self.settings.spec_counters
        return mode == "always" or (mode == "auto" and self.traits.per_request_metrics is not True)

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
