"""Forward one inference request: check the model, normalise, admit, call upstream, rewrite, answer.

The slot is held from admission until the upstream response is fully relayed or abandoned, and
released exactly once on every path (error before headers, client gone while queued or while waiting
for headers, normal end, mid-stream failure, mid-stream disconnect).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from gateway.admission import Admission, Lease
from gateway.asgi import unless_disconnected
from gateway.auth import Principal
from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.openai_api import ChatCompletionRequest, InferenceRequest
from gateway.openai_api.normalize import Normalized, normalize_chat, normalize_completion
from gateway.openai_api.thinking import as_level
from gateway.proxy.relay import relay_response
from gateway.proxy.rewrite import StreamRewriter, rewrite_body
from gateway.proxy.upstream import Upstream
from gateway.reasoning.policy import ReasoningPolicy, UpstreamTraits


@dataclass(slots=True)
class Forwarder:
    """What forwarding needs: the upstream, the slot pool, settings, and what was learnt of the upstream."""

    upstream: Upstream
    admission: Admission
    settings: Settings
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

    def _prepare(
        self, principal: Principal, body: InferenceRequest
    ) -> tuple[dict[str, Any], ReasoningPolicy]:
        payload = body.upstream_payload()
        normalized: Normalized
        if isinstance(body, ChatCompletionRequest):
            default = as_level(principal.default_thinking or self.settings.default_thinking)
            normalized = normalize_chat(payload, default, self.settings.backend_reasoning_field)
        else:
            normalized = normalize_completion(payload)
        policy = ReasoningPolicy(
            mode=self.settings.reasoning_split,
            thinking=normalized.thinking.on,
            fields=self.settings.reasoning_fields,
            include_reasoning=normalized.include_reasoning,
        )
        return payload, policy

    async def forward(
        self, request: Request, principal: Principal, path: str, body: InferenceRequest
    ) -> Response:
        """Admit ``body`` and send it to ``path`` upstream; stream or buffer the answer as asked.

        Raises :class:`GatewayError` (400 bad thinking fields, 404/403 model, 429 queue, 503 upstream
        down, or the upstream's own error status).
        """
        self.check_model(principal, body.model)
        payload, policy = self._prepare(principal, body)
        raw = json.dumps(payload).encode()

        async def admit_and_open() -> tuple[Lease, httpx.Response]:
            lease = await self.admission.acquire()
            try:
                return lease, await self.upstream.open("POST", path, raw)
            except BaseException:
                lease.release()
                raise

        lease, upstream = await unless_disconnected(request.receive, admit_and_open)

        async def close() -> None:
            try:
                await upstream.aclose()
            finally:
                lease.release()

        if body.stream:
            return relay_response(upstream, StreamRewriter(policy, self.traits).step, on_close=close)
        try:
            content = await unless_disconnected(request.receive, upstream.aread)
        except httpx.HTTPError as exc:
            raise GatewayError(
                502, f"The model server response broke: {type(exc).__name__}", code="upstream_error"
            ) from exc
        finally:
            await close()
        return _json_response(content, upstream.status_code, policy, self.traits)


def _json_response(content: bytes, status: int, policy: ReasoningPolicy, traits: UpstreamTraits) -> Response:
    if policy.passthrough:
        return Response(content, status_code=status, media_type="application/json")
    try:
        body = json.loads(content)
    except ValueError as exc:
        raise GatewayError(
            502, "The model server sent a response that is not JSON.", code="upstream_error"
        ) from exc
    rewritten = rewrite_body(body, policy, traits)
    return Response(
        json.dumps(rewritten, ensure_ascii=False).encode(), status_code=status, media_type="application/json"
    )
