"""``/admin`` reads: usage, live status, the audit trail and recent requests (admin scope: the route
table, :mod:`gateway.app.routes`, attaches the check)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from starlette.requests import Request

from gateway.admin.durations import parse_since
from gateway.errors import GatewayError
from gateway.telemetry.ledger import GroupBy, RequestFilter, UsageLedger


async def flushed_ledger(request: Request) -> UsageLedger:
    """The usage ledger with every finished request written."""
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
    until: Annotated[
        str | None, Query(description="The end, as since: a duration back from now or an ISO 8601 time")
    ] = None,
) -> dict[str, Any]:
    bounds = _bounds(since, until)
    ledger = await flushed_ledger(request)
    rows = await ledger.usage(group_by, since=bounds["since"], key_name=key, until=bounds["until"])
    return {"group_by": group_by, "data": rows}


def _bounds(since: str | None, until: str | None) -> dict[str, datetime | None]:
    """``since`` and ``until`` as instants (:func:`parse_since`); 400 naming the bad one."""
    bounds = {}
    for name, text in (("since", since), ("until", until)):
        try:
            bounds[name] = parse_since(text)
        except ValueError as exc:
            raise GatewayError("invalid_value", f"{name} {exc}", param=name) from None
    return bounds


async def status(request: Request) -> dict[str, Any]:
    pipeline = request.app.state.pipeline
    return {**pipeline.backends.status(), "long_prompt_tokens": pipeline.settings.long_prompt_tokens}


async def audit(request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    return {"data": await request.app.state.audit.recent(limit)}


async def requests(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9, description="Rows to skip (the next page)")] = 0,
    key: Annotated[str | None, Query(description="Only this key name")] = None,
    group: Annotated[str | None, Query(description="Only this group's keys (empty: keys in none)")] = None,
    route: Annotated[str | None, Query(description="Only this route (/v1/messages …)")] = None,
    status: Annotated[str | None, Query(description="A status code (429) or class (5xx)")] = None,
    end_reason: Annotated[
        str | None, Query(description="complete | error | client_gone | client_slow")
    ] = None,
    since: Annotated[
        str | None, Query(description="A duration back from now (7d) or an ISO 8601 time")
    ] = None,
    until: Annotated[str | None, Query(description="The end, as since")] = None,
    search: Annotated[
        str | None, Query(description="Text the request id, x-request-id or trace id contains")
    ] = None,
) -> dict[str, Any]:
    """The ledger's rows, latest arrival first (``has_more``: another page follows)."""
    bounds = _bounds(since, until)
    where = RequestFilter(key, group, route, status, end_reason, bounds["since"], bounds["until"], search)
    try:
        where.conditions()
    except ValueError as exc:
        raise GatewayError("invalid_value", str(exc), param="status") from None
    ledger = await flushed_ledger(request)
    rows = await ledger.recent(limit + 1, where, offset)
    return {"data": rows[:limit], "has_more": len(rows) > limit}
