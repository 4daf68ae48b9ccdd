"""Forward one inference request: check the model, normalise, admit, call upstream, rewrite, record.

The slot is held from admission until the upstream response is fully relayed or abandoned, and
released exactly once on every path (error before headers, client gone while queued or while waiting
for headers, normal end, mid-stream failure, mid-stream disconnect). Every request that reaches
here — success or failure — publishes exactly one :class:`RequestTelemetry`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from gateway.admission import Admission, Lease
from gateway.asgi import ClientDisconnectedError, unless_disconnected
from gateway.auth import Principal
from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.openai_api import ChatCompletionRequest, InferenceRequest
from gateway.openai_api.normalize import Normalized, normalize_chat, normalize_completion
from gateway.openai_api.thinking import as_level
from gateway.proxy.client_view import ClientView
from gateway.proxy.relay import RelayOutcome, relay_response
from gateway.proxy.rewrite import StreamRewriter, rewrite_body
from gateway.proxy.upstream import Upstream
from gateway.reasoning.policy import ReasoningPolicy
from gateway.telemetry.backend import BackendMonitor
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.sinks import TelemetrySinks
from gateway.telemetry.spec import COUNTERS
from gateway.traits import UpstreamTraits

Counters = tuple[Mapping[str, float], Mapping[str, float], bool]


@dataclass(slots=True)
class Prepared:
    """A request ready to send: upstream body, reasoning policy, and what the client asked to see."""

    payload: dict[str, Any]
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
    traits: UpstreamTraits = field(default_factory=UpstreamTraits)

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
        """Normalise ``body`` for the backend (raises 400 on invalid thinking fields)."""
        payload = body.upstream_payload()
        normalized: Normalized
        if isinstance(body, ChatCompletionRequest):
            default = as_level(principal.default_thinking or self.settings.default_thinking)
            normalized = normalize_chat(payload, default, self.settings.backend_reasoning_field)
        else:
            normalized = normalize_completion(payload)
        include_metrics = payload.pop("include_metrics", False) is True
        asked = payload.get("stream_options") or {}
        if body.stream:  # telemetry needs usage on every chunk, whatever the client asked
            payload["stream_options"] = {**asked, "include_usage": True, "continuous_usage_stats": True}
        policy = ReasoningPolicy(
            mode=self.settings.reasoning_split,
            thinking=normalized.thinking.on,
            fields=self.settings.reasoning_fields,
            include_reasoning=normalized.include_reasoning,
        )
        return Prepared(
            payload,
            policy,
            include_usage=asked.get("include_usage") is True,
            continuous_usage=asked.get("continuous_usage_stats") is True,
            include_metrics=include_metrics,
        )

    async def forward(
        self, request: Request, principal: Principal, path: str, body: InferenceRequest
    ) -> Response:
        """Admit ``body`` and send it to ``path`` upstream; stream or buffer the answer as asked.

        Raises :class:`GatewayError` (400 bad thinking fields, 404/403 model, 429 queue, 503 upstream
        down, or the upstream's own error status) after recording it.
        """
        recorder = RequestRecorder.start(
            request_id=request.state.request_id,
            key_id=principal.key_id,
            key_name=principal.name,
            model=body.model,
            route=path,
            stream=body.stream,
            k=self.settings.spec_k,
        )
        try:
            return await self._forward(request, principal, path, body, recorder)
        except GatewayError as exc:
            self.sinks.publish(recorder.finish(exc.status, client_disconnected=False))
            raise
        except ClientDisconnectedError:
            self.sinks.publish(recorder.finish(499, client_disconnected=True))
            raise

    def _wants_counters(self) -> bool:
        mode = self.settings.spec_counters
        return mode == "always" or (mode == "auto" and self.traits.per_request_metrics is not True)

    async def _forward(
        self,
        request: Request,
        principal: Principal,
        path: str,
        body: InferenceRequest,
        recorder: RequestRecorder,
    ) -> Response:
        self.check_model(principal, body.model)
        prepared = self.prepare(principal, body)
        raw = json.dumps(prepared.payload).encode()
        headers = {"x-request-id": recorder.record.request_id}
        before: dict[str, float] | None = None

        async def admit_and_open() -> tuple[Lease, httpx.Response]:
            nonlocal before
            lease = await self.admission.acquire()
            try:
                recorder.admitted(lease.queue_wait_s)
                if self._wants_counters():
                    before = await self.monitor.scrape()
                return lease, await self.upstream.open("POST", path, raw, headers)
            except BaseException:
                lease.release()
                raise

        lease, upstream = await unless_disconnected(request.receive, admit_and_open)

        async def counters() -> Counters | None:
            if before is None:
                return None
            after = await self.monitor.scrape()
            if after is None:
                return None
            picked = (
                {n: before[n] for n in COUNTERS if n in before},
                {n: after[n] for n in COUNTERS if n in after},
            )
            return picked[0], picked[1], not lease.overlapped

        def telemetry() -> dict[str, Any]:
            return recorder.snapshot().client_view()

        wants_telemetry = request.headers.get("x-gateway-telemetry") == "1"
        view = ClientView(
            include_usage=prepared.include_usage,
            continuous_usage=prepared.continuous_usage,
            include_metrics=prepared.include_metrics,
            telemetry=telemetry if wants_telemetry else None,
        )
        if body.stream:
            outcome = RelayOutcome()

            async def close(client_gone: bool) -> None:
                try:
                    await upstream.aclose()
                finally:
                    lease.release()
                gone = client_gone and not outcome.done
                status = outcome.error.status if outcome.error is not None else (499 if gone else 200)
                self._learn(recorder)
                self.sinks.publish(recorder.finish(status, gone, await counters()))

            rewriter = StreamRewriter(prepared.policy, self.traits, view, recorder.observe_chunk)
            return relay_response(upstream, rewriter.step, outcome, on_close=close)
        try:
            content = await unless_disconnected(request.receive, upstream.aread)
        except httpx.HTTPError as exc:
            raise GatewayError(
                502, f"The model server response broke: {type(exc).__name__}", code="upstream_error"
            ) from exc
        finally:
            await upstream.aclose()
            lease.release()
        return await self._respond(content, upstream.status_code, prepared, view, recorder, await counters())

    async def _respond(
        self,
        content: bytes,
        status: int,
        prepared: Prepared,
        view: ClientView,
        recorder: RequestRecorder,
        counters: Counters | None,
    ) -> Response:
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise GatewayError(
                502, "The model server sent a response that is not JSON.", code="upstream_error"
            ) from exc
        reasoning_chars, content_chars = rewrite_body(body, prepared.policy, self.traits)
        recorder.observe_body(body, reasoning_chars, content_chars)
        record = recorder.finish(status, client_disconnected=False, counters=counters)
        view.apply_body(body)  # after finish: the telemetry object is complete
        self._learn(recorder)
        self.sinks.publish(record)
        return Response(
            json.dumps(body, ensure_ascii=False).encode(), status_code=status, media_type="application/json"
        )

    def _learn(self, recorder: RequestRecorder) -> None:
        if recorder.saw_backend_metrics:
            self.traits.per_request_metrics = True
