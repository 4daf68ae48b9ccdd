"""``GET /metrics``: the gateway's Prometheus exposition, never public.

It names keys and JWT subjects (the per-key series), so it answers:

- with ``GATEWAY_METRICS_TOKEN`` set, a caller sending ``Authorization: Bearer <it>`` (compared in
  constant time; a wrong one counts as a failed authentication of its address);
- without it, loopback callers only: a Prometheus on the same host. A request that came through a
  proxy (``X-Forwarded-For`` or ``Forwarded``) is not local even from 127.0.0.1 — a reverse proxy on
  the same host (Caddy, systemd deployment) forwards the internet's requests from loopback.
"""

from __future__ import annotations

import hmac
import ipaddress

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import GatewayError
from gateway.http.auth import client_address

#: Headers a proxy adds: a request carrying one is somebody else's, relayed.
PROXIED = ("x-forwarded-for", "forwarded")


async def metrics(request: Request) -> Response:
    """Prometheus text format, for the metrics token's bearer or a local caller (see the module doc):
    401 ``invalid_metrics_token``, 403 ``metrics_local_only``."""
    token: str | None = request.app.state.settings.metrics_token
    if token:
        sent = request.headers.get("authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            await request.app.state.throttle.failed(client_address(request))  # guessing it is key guessing
            raise GatewayError("invalid_metrics_token", "A valid metrics token is required.")
    elif not local(request):
        raise GatewayError(
            "metrics_local_only",
            "/metrics answers loopback clients only; set GATEWAY_METRICS_TOKEN to scrape it from elsewhere.",
        )
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def local(request: Request) -> bool:
    """Whether the caller is this host itself, not relayed by a proxy."""
    if any(name in request.headers for name in PROXIED):
        return False
    try:
        return ipaddress.ip_address(client_address(request)).is_loopback
    except ValueError:  # "unknown", or a name a test client makes up
        return False
