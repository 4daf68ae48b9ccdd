"""``GET /metrics``: the gateway's Prometheus exposition, optionally behind a bearer token."""

from __future__ import annotations

import hmac

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.http.auth import client_address


async def metrics(request: Request) -> Response:
    """Prometheus text format. With ``GATEWAY_METRICS_TOKEN`` set, requires ``Authorization: Bearer <it>``
    (compared in constant time)."""
    token: str | None = request.app.state.settings.metrics_token
    if token:
        sent = request.headers.get("authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            await request.app.state.throttle.failed(client_address(request))  # guessing it is key guessing
            raise GatewayError("invalid_metrics_token", "A valid metrics token is required.")
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
