"""``/health`` (the process is up; degraded while usage rows wait for the database) and ``/ready``
(the upstream answers), both public."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.backends.upstream import probe
from gateway.errors import GatewayError


async def health(request: Request) -> dict[str, Any]:
    """Liveness: the gateway process is up (also while draining): ``{"status": "ok"}``, or
    ``{"status": "degraded", "reasons": [...]}`` while usage rows wait unwritten after a failed write
    (:meth:`~gateway.telemetry.ledger.UsageLedger.trouble`). Still 200: a restart would lose the rows
    the process keeps for the database."""
    trouble = request.app.state.ledger.trouble()
    return {"status": "degraded", "reasons": [trouble]} if trouble else {"status": "ok"}


async def ready(request: Request) -> JSONResponse:
    """Readiness: a model server answers its ``/health`` (503 while draining: the edge refuses it)."""
    settings = request.app.state.settings
    if await probe(request.app.state.pipeline.backends.first_up().upstream, settings.ready_timeout_s):
        return JSONResponse({"status": "ready"})
    raise GatewayError("upstream_unavailable", "The model server is not reachable.")
