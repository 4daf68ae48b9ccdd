"""``/health`` (the process is up) and ``/ready`` (the upstream answers), both public."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.backends.upstream import probe
from gateway.errors import GatewayError


async def health() -> dict[str, str]:
    """Liveness: the gateway process is up (also while draining)."""
    return {"status": "ok"}


async def ready(request: Request) -> JSONResponse:
    """Readiness: a model server answers its ``/health`` (503 while draining: the edge refuses it)."""
    settings = request.app.state.settings
    if await probe(request.app.state.pipeline.backends.first_up().upstream, settings.ready_timeout_s):
        return JSONResponse({"status": "ready"})
    raise GatewayError("upstream_unavailable", "The model server is not reachable.")
