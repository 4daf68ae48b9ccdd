"""``/admin`` reads: usage, live status, the audit trail and recent requests (admin scope: the route
table, :mod:`gateway.app.routes`, attaches the check)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from starlette.requests import Request

from gateway.admin.durations import parse_since
from gateway.errors import GatewayError
from gateway.telemetry.ledger import GroupBy, UsageLedger


async def _flushed_ledger(request: Request) -> UsageLedger:
    ledger: UsageLedger = request.app.state.ledger
    await request.app.state.pipeline.settled()  # an admin reading usage sees every finished request
    await ledger.flush()
    return ledger


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
        raise GatewayError("invalid_value", f"since {exc}", param="since") from None
    ledger = await _flushed_ledger(request)
    return {"group_by": group_by, "data": await ledger.usage(group_by, since=start, key_name=key)}


async def status(request: Request) -> dict[str, Any]:
    pipeline = request.app.state.pipeline
    return {**pipeline.backends.status(), "long_prompt_tokens": pipeline.settings.long_prompt_tokens}


async def audit(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    return {"data": await request.app.state.audit.recent(limit)}


async def requests(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> dict[str, Any]:
    ledger = await _flushed_ledger(request)
    return {"data": await ledger.recent(limit)}
