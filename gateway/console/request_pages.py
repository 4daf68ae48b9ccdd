"""The console's request log (``/console/requests``): the usage ledger's rows, latest arrival first,
filtered by key, group, route, status (a code or a class), end reason, time range and text in the
request id (or the client's ``x-request-id``, or the trace id), :data:`PAGE` rows a page; and one
request's page (``/console/requests/{id}``) with every figure the ledger holds. Telemetry only: the
ledger stores no prompt or answer text."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import reads
from gateway.auth.groups import GroupStore
from gateway.console import series
from gateway.console.pages import page, render
from gateway.console.sessions import Session
from gateway.errors import GatewayError
from gateway.telemetry.ledger import RequestFilter

#: Rows a page, and the last page one may ask for.
PAGE = 50
LAST_PAGE = 10_000
#: The query fields of the filters, kept on every page link.
FILTERS = (
    "key",
    "group",
    "route",
    "status",
    "end_reason",
    "range",
    "from",
    "to",
    "from_tz",
    "to_tz",
    "tz",
    "q",
)
#: How a request can end (:attr:`gateway.telemetry.record.RequestTelemetry.end_reason`).
END_REASONS = ("complete", "error", "client_gone", "client_slow")
#: Statuses offered as you type (any code may be typed).
STATUSES = ("2xx", "4xx", "5xx", "400", "401", "403", "404", "413", "429", "499", "502", "503")
#: A group filter's value for keys in none.
NO_GROUP = "(none)"


def _where(params: Mapping[str, str], now: datetime) -> RequestFilter:
    """The filter of a page's query (``range``: empty for any time, else as the usage page's);
    ``ValueError`` saying what is wrong."""
    span = series.window(params, now) if params.get("range") else None
    group = params.get("group") or None
    where = RequestFilter(
        key=params.get("key") or None,
        group="" if group == NO_GROUP else group,
        route=params.get("route") or None,
        status=params.get("status", "").strip() or None,
        end_reason=params.get("end_reason") or None,
        since=span.start if span else None,
        until=span.end if span else None,
        search=params.get("q", "").strip() or None,
    )
    where.conditions()  # a bad status is refused here, not by the database
    return where


async def requests_page(request: Request, session: Session) -> Response:
    params = {name: request.query_params.get(name, "") for name in FILTERS}
    try:
        number = min(LAST_PAGE, max(1, int(request.query_params.get("page") or 1)))
    except ValueError:
        number = 1
    choices = await _choices(request)
    try:
        where = _where(params, datetime.now(UTC))
    except ValueError as exc:
        return render(request, "requests.html", 400, params=params, error=str(exc), rows=[], **choices)
    ledger = await reads.flushed_ledger(request)
    rows = await ledger.recent(PAGE + 1, where, (number - 1) * PAGE)
    query = {name: value for name, value in params.items() if value}
    return render(
        request,
        "requests.html",
        params=params,
        rows=rows[:PAGE],
        number=number,
        newer=urlencode(query | {"page": number - 1}) if number > 1 else None,
        older=urlencode(query | {"page": number + 1}) if len(rows) > PAGE else None,
        **choices,
    )


async def _choices(request: Request) -> dict[str, Any]:
    """The filters' choices: every key and group by name, every route the ledger has seen."""
    ledger = await reads.flushed_ledger(request)
    groups = await GroupStore(request.app.state.store.engine).list()
    return {
        "keys": sorted(record.name for record in await request.app.state.store.list()),
        "groups": [NO_GROUP, *(record.name for record, _ in groups)],
        "routes": await ledger.routes(),
        "end_reasons": END_REASONS,
        "statuses": STATUSES,
    }


async def request_detail(request: Request, session: Session) -> Response:
    ledger = await reads.flushed_ledger(request)
    row_id = request.path_params["row_id"]
    row = await ledger.one(row_id) if row_id < 2**63 else None  # a row id is a BIGINT at most
    if row is None:
        raise GatewayError("not_found", "No such request in the ledger.")
    return render(request, "request.html", row=row)


def install(app: Any) -> None:
    """The request log's routes (after :func:`gateway.console.pages.install`)."""
    for path, endpoint in (
        ("/console/requests", requests_page),
        ("/console/requests/{row_id:int}", request_detail),
    ):
        app.add_api_route(path, page(endpoint), methods=["GET"], include_in_schema=False)
