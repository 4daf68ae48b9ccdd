"""Forward one inference request: check the model, admit, call upstream, answer.

The slot is held from admission until the upstream response is fully relayed or abandoned, and
released exactly once on every path (error before headers, client gone while queued or while waiting
for headers, normal end, mid-stream failure, mid-stream disconnect).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
from starlette.requests import Request
from starlette.responses import Response

from gateway.admission import Admission, Lease
from gateway.asgi import unless_disconnected
from gateway.auth import Principal
from gateway.errors import GatewayError
from gateway.openai_api import InferenceRequest
from gateway.proxy.relay import relay_response
from gateway.proxy.upstream import Upstream


@dataclass(slots=True)
class Forwarder:
    """What forwarding needs: the upstream, the slot pool and the served model name."""

    upstream: Upstream
    admission: Admission
    served_model: str

    def check_model(self, principal: Principal, model: str) -> None:
        """Raise 404 ``model_not_found`` for a model not served, 403 for one the key may not use."""
        if model != self.served_model:
            raise GatewayError(
                404, f"The model `{model}` does not exist.", code="model_not_found", param="model"
            )
        if not principal.may_use(model):
            raise GatewayError(
                403, f"This API key may not use the model `{model}`.", code="model_not_allowed", param="model"
            )

    async def forward(
        self, request: Request, principal: Principal, path: str, body: InferenceRequest
    ) -> Response:
        """Admit ``body`` and send it to ``path`` upstream; stream or buffer the answer as asked.

        Raises :class:`GatewayError` (404/403 model, 429 queue, 503 upstream down, upstream status).
        """
        self.check_model(principal, body.model)
        payload = json.dumps(body.upstream_payload()).encode()

        async def admit_and_open() -> tuple[Lease, httpx.Response]:
            lease = await self.admission.acquire()
            try:
                return lease, await self.upstream.open("POST", path, payload)
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
            return relay_response(upstream, on_close=close)
        try:
            content = await unless_disconnected(request.receive, upstream.aread)
        except httpx.HTTPError as exc:
            raise GatewayError(
                502, f"The model server response broke: {type(exc).__name__}", code="upstream_error"
            ) from exc
        finally:
            await close()
        return Response(content, status_code=upstream.status_code, media_type="application/json")
