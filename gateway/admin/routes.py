"""``/admin``: usage and recent requests (admin scope only; client keys get 403)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from starlette.requests import Request

from gateway.auth import Principal
from gateway.auth.dependency import require_principal
from gateway.durations import parse_since
from gateway.errors import GatewayError
from gateway.telemetry.ledger import GroupBy, UsageLedger

ADMIN_SCOPE = "admin"


async def require_admin(principal: Annotated[Principal, Depends(require_principal)]) -> Principal:
    """The caller, if it has the ``admin`` scope; else 403."""
    if ADMIN_SCOPE not in principal.scopes:
        raise GatewayError(403, "This route needs an admin key.", code="admin_required")
    return principal


router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)], tags=["admin"])


async def _flushed_ledger(request: Request) -> UsageLedger:
    ledger: UsageLedger = request.app.state.ledger
    await ledger.flush()  # an admin reading usage sees every finished request
    return ledger


@router.get("/usage", summary="Token usage totals, grouped by day, key or model")
async def usage(
    request: Request,
    group_by: GroupBy = "key",
    key: Annotated[str | None, Query(description="Only this key name")] = None,
    since: Annotated[
        str | None, Query(description="A duration back from now (7d, 12h) or an ISO 8601 start")
    ] = None,
) -> dict[str, Any]:
    try:
        start = parse_since(since)
    except ValueError as exc:
        raise GatewayError(400, str(exc), code="invalid_value", param="since") from None
    ledger = await _flushed_ledger(request)
    return {"group_by": group_by, "data": await ledger.usage(group_by, since=start, key_name=key)}


@router.get("/status", summary="Live admission state: slots, queue, per-key in flight and waiting")
async def status(request: Request) -> dict[str, Any]:
    traits = request.app.state.forwarder.traits
    return {
        **request.app.state.admission.status(),
        "upstream": {
            "splits_reasoning": traits.splits_reasoning,
            "per_request_metrics": traits.per_request_metrics,
        },
    }


@router.get("/audit", summary="Admin actions, newest first")
async def audit(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    return {"data": await request.app.state.audit.recent(limit)}


@router.get("/requests", summary="Recent requests' telemetry (no prompt text, no keys)")
async def requests(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> dict[str, Any]:
    ledger = await _flushed_ledger(request)
    return {"data": await ledger.recent(limit)}
