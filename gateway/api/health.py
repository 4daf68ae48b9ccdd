"""``/health`` (the process is up) and ``/ready`` (the upstream answers), both public."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.errors import GatewayError

router = APIRouter(tags=["health"])


@router.get("/health", summary="Liveness: the gateway process is up")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: the model server answers /health")
async def ready(request: Request) -> JSONResponse:
    settings = request.app.state.settings
    if await request.app.state.forwarder.upstream.probe(settings.ready_timeout_s):
        return JSONResponse({"status": "ready"})
    raise GatewayError(503, "The model server is not reachable.", code="upstream_unavailable")
