"""Forward one inference request: check the model, normalise, rate-limit, admit, then hand the
request to an :class:`~gateway.proxy.exchange.Exchange`.

The slot is held from admission until the upstream has finished the sequence (its ``[DONE]``, or the
whole non-stream body read: :meth:`~gateway.proxy.exchange.Exchange.release_early`) or the request is
abandoned, and released exactly once on every path (error before headers, client gone while queued
or while waiting for headers, normal end, mid-stream failure, mid-stream disconnect). Every request
that reaches here — success or failure — publishes exactly one :class:`RequestTelemetry`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from gateway import json_codec
from gateway.admission import Admission, Waiter
from gateway.asgi import ClientDisconnectedError, unless_disconnected
from gateway.auth import Principal
from gateway.config import Settings
from gateway.errors import GatewayError, internal_error
from gateway.http_protocol import DIRECT_BODY
from gateway.limits import RateLimiter
from gateway.openai_api import ChatCompletionRequest, InferenceRequest
from gateway.openai_api.normalize import Normalized, normalize_chat, normalize_completion
from gateway.openai_api.thinking import as_level
from gateway.proxy.body import parse_body
from gateway.proxy.client_view import ClientView
from gateway.proxy.exchange import Exchange, telemetry_fn
from gateway.proxy.relay import RelayOutcome
from gateway.proxy.upstream import Upstream
from gateway.reasoning.policy import ReasoningPolicy
from gateway.telemetry.backend import BackendMonitor
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.sinks import TelemetrySinks
from gateway.traits import UpstreamTraits

log = logging.getLogger("gateway.forward")


@dataclass(slots=True)
class Prepared:
    """A request ready to send: the upstream body (JSON bytes, serialized before the request queues: a
    waiting request holds one bytes object, not a tree of dicts the cyclic GC walks), its prompt size
    estimate (tokens, :func:`estimate_prompt_tokens`; 0 for a key without a tokens-per-minute limit,
    which borrows nothing), the reasoning policy, and what the client asked to see."""

    body: bytes
    prompt_estimate: int
    policy: ReasoningPolicy
    include_usage: bool
    continuous_usage: bool
    include_metrics: bool


@dataclass(slots=True)
class Forwarder:
    """What forwarding needs: upstream, slots, settings, telemetry sinks, backend monitor, learnt traits."""

    upstream: Upstream
    admission: Admission
    settings: Settings
    sinks: TelemetrySinks
    monitor: BackendMonitor
    limits: RateLimiter
    traits: UpstreamTraits = field(default_factory=UpstreamTraits)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    def check_model(self, principal: Principal, model: str) -> None:
        """Raise 404 ``model_not_found`` for a model not served, 403 for one the key may not use."""
        if model != self.settings.served_model:
            raise GatewayError(
                404, f"The model `{model}` does not exist.", code="model_not_found", param="model"
            )
        if not principal.may_use(model):
            raise GatewayError(
                403, f"This API key may not use the model `{model}`.", code="model_not_allowed", param="model"
            )

    def prepare(self, principal: Principal, body: InferenceRequest) -> Prepared:
        """Normalise ``body`` for the backend (raises 400 on invalid thinking fields, and
        ``context_length_exceeded`` for output that could never fit the backend's KV pool)."""
        completion_tokens = getattr(body, "max_completion_tokens", None)
        param = "max_completion_tokens" if completion_tokens else "max_tokens"  # the one vLLM uses
        requested = completion_tokens or body.max_tokens
        if requested is not None and requested > self.settings.kv_budget_tokens:
            raise GatewayError(
                400,
                f"{param} {requested} exceeds the backend's KV cache "
                f"({self.settings.kv_budget_tokens} tokens).",
                code="context_length_exceeded",
                param=param,
            )
        payload = body.upstream_payload()
        normalized: Normalized
        mode = self.settings.reasoning_split
        if isinstance(body, ChatCompletionRequest):
            default = as_level(principal.default_thinking or self.settings.default_thinking)
            normalized = normalize_chat(payload, default, self.settings.backend_reasoning_field)
        else:
            normalized = normalize_completion(payload)
            mode = "off" if mode == "off" else "gateway"  # vLLM never splits /v1/completions
        if mode == "off" and not normalized.include_reasoning:
            payload["include_reasoning"] = False  # untouched passthrough: let vLLM drop it
        include_metrics = payload.pop("include_metrics", False) is True
        asked = payload.get("stream_options") or {}
        if body.stream:  # telemetry needs usage on every chunk, whatever the client asked
            payload["stream_options"] = {**asked, "include_usage": True, "continuous_usage_stats": True}
        policy = ReasoningPolicy(
            mode=mode,
            thinking=normalized.thinking.on,
            fields=self.settings.reasoning_fields,
            include_reasoning=normalized.include_reasoning,
        )
        return Prepared(
            json_codec.dumps(payload),
            # a second serialization of the prompt (~12 ms for a 1M-token one): only where it is used
            estimate_prompt_tokens(payload) if principal.tpm else 0,
            policy,
            include_usage=asked.get("include_usage") is True,
            continuous_usage=asked.get("continuous_usage_stats") is True,
            include_metrics=include_metrics,
        )

    def wants_counters(self) -> bool:
        """Whether to scrape vLLM's spec-decode counters around a request (``metrics_delta``)."""
        mode = self.settings.spec_counters
        return mode == "always" or (mode == "auto" and self.traits.per_request_metrics is not True)

    async def forward(
        self, request: Request, principal: Principal, path: str, model: type[InferenceRequest]
    ) -> Response:
        """Read the body as ``model``, then limit, admit and send it to ``path`` upstream; stream or
        buffer the answer as asked. Every request gets exactly one telemetry record (usage row), from
        its arrival: one whose body never arrived or was invalid too.

        Raises :class:`GatewayError` (413/400 body, 400 bad thinking fields, 404/403 model, 429 rate
        limit or queue, 503 upstream down, or the upstream's own error status) after recording it.
        """
        recorder = RequestRecorder.start(
            request_id=request.state.request_id,
            key_id=principal.key_id,
            key_name=principal.name,
            model="unknown",
            route=path,
            stream=False,
            k=self.settings.spec_k,
        )
        exchange: Exchange | None = None
        try:
            body = await parse_body(request, model)
            served = body.model == self.settings.served_model
            recorder.record.model = body.model if served else "unknown"  # a bounded metrics label
            recorder.record.stream = body.stream
            self.check_model(principal, body.model)
            prepared, stream = self.prepare(principal, body), body.stream
            del body  # prepared holds what is needed: don't keep the model while queued (~2 kB each)
            ticket = await self.limits.admit(principal, prepared.prompt_estimate)
            wants_telemetry = request.headers.get("x-gateway-telemetry") == "1"
            view = ClientView(
                include_usage=prepared.include_usage,
                continuous_usage=prepared.continuous_usage,
                include_metrics=prepared.include_metrics,
                telemetry=telemetry_fn(recorder) if wants_telemetry else None,
            )
            direct = request.scope.get("extensions", {}).get(DIRECT_BODY)
            exchange = Exchange(self, path, prepared, recorder, ticket, view, stream, direct)
            entry = self.admission.enqueue(principal.name, principal.priority, principal.max_concurrency)
            outcome = RelayOutcome()
            if stream and isinstance(entry, Waiter) and not entry.future.done():
                return exchange.stream_response(exchange.queued_events(entry, outcome), outcome)
            opened = exchange
            if stream:
                await unless_disconnected(request.receive, lambda: opened.admit_and_open(entry))
                return exchange.stream_response(exchange.relay(outcome), outcome)
            return await unless_disconnected(request.receive, lambda: opened.answer(entry))
        except GatewayError as exc:
            await self._fail(exchange, recorder, exc.status, client_gone=False)
            raise
        except ClientDisconnectedError:
            await self._fail(exchange, recorder, 499, client_gone=True)
            raise
        except asyncio.CancelledError:  # a server shutdown: still give everything back
            with anyio.CancelScope(shield=True):
                await self._fail(exchange, recorder, 499, client_gone=True)
            raise
        except Exception as exc:
            log.exception("request %s failed", recorder.record.request_id)
            await self._fail(exchange, recorder, 500, client_gone=False)
            raise internal_error() from exc

    def in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` off the request path; :meth:`drain` waits for it at shutdown."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def drain(self) -> None:
        """Wait for background recording (called before the ledger's last flush)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def _fail(
        self, exchange: Exchange | None, recorder: RequestRecorder, status: int, client_gone: bool
    ) -> None:
        if exchange is not None:
            await exchange.close(status, client_gone)
            await exchange.recorded()  # an error answer is rare: record it before answering
        else:
            self.sinks.publish(recorder.finish(status, client_gone))


def estimate_prompt_tokens(payload: dict[str, Any]) -> int:
    """A cheap prompt-size estimate for the tokens-per-minute borrow: ~4 characters per token."""
    text = payload.get("messages", payload.get("prompt", ""))
    return max(1, len(json.dumps(text, ensure_ascii=False)) // 4)
