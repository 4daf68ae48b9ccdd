"""The console's usage page (``/console/usage``): tokens and requests per key, group or model over the
last hour, day, week or a custom range, drawn by uPlot (``static/vendor``) from
``/console/usage/series.json``; the same figures as CSV; and the range's totals per key, group and
model, each exportable as CSV or JSON. Query: ``range`` (hour | day | week | custom, with ``from``,
``to`` and ``tz``: :func:`gateway.console.series.window`) and ``by`` (key | group | model)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast, get_args
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.admin import reads
from gateway.console import series
from gateway.console.pages import SECURITY_HEADERS, page, render
from gateway.console.sessions import Session
from gateway.errors import GatewayError
from gateway.telemetry.ledger import GroupBy, SeriesBy

#: What the totals are grouped by, in the order the page shows them.
TOTALS: tuple[GroupBy, ...] = ("key", "group", "model", "day")
#: The query fields that choose the figures (and so go on every link and export).
QUERY = ("range", "from", "to", "from_tz", "to_tz", "tz", "by")


def _split_by(request: Request) -> SeriesBy:
    by = request.query_params.get("by") or "key"
    if by not in get_args(SeriesBy):
        raise GatewayError("invalid_value", f"by must be one of {', '.join(get_args(SeriesBy))}.")
    return cast(SeriesBy, by)


async def usage(request: Request, session: Session) -> Response:
    params = {name: request.query_params.get(name, "") for name in QUERY}
    split_by = _split_by(request)
    try:
        span = series.window(request.query_params, datetime.now(UTC))
    except ValueError as exc:
        return render(request, "usage.html", 400, params=params, error=str(exc), span=None, tables={})
    ledger = await reads.flushed_ledger(request)
    tables = {group: await ledger.usage(group, since=span.start, until=span.end) for group in TOTALS}
    query = urlencode({name: value for name, value in params.items() if value} | {"by": split_by})
    return render(
        request, "usage.html", params=params, span=span, split_by=split_by, tables=tables, query=query
    )


async def _laid_out(request: Request) -> dict[str, Any]:
    split_by = _split_by(request)
    span = _window(request)
    ledger = await reads.flushed_ledger(request)
    return series.layout(await ledger.series(split_by, span.start, span.end, span.bucket_s), split_by, span)


async def series_export(request: Request, session: Session) -> Response:
    """``/console/usage/series.json`` (what the chart draws) or ``.csv`` (a row per bucket and series
    where anything arrived: :data:`gateway.console.series.CSV_COLUMNS`)."""
    kind = _kind(request)
    laid_out = await _laid_out(request)
    name = f"usage-by-{laid_out['split_by']}-over-time"
    if kind == "json":
        return JSONResponse(laid_out, headers=_attachment(f"{name}.json"))
    return _csv(series.csv_rows(laid_out), series.CSV_COLUMNS, f"{name}.csv")


async def totals_export(request: Request, session: Session) -> Response:
    """``/console/usage.csv`` or ``.json``: the range's totals grouped by ``group_by`` (:data:`TOTALS`)."""
    kind = _kind(request)
    group = request.query_params.get("group_by", "key")
    if group not in TOTALS:
        raise GatewayError("invalid_value", f"group_by must be one of {', '.join(TOTALS)}.")
    span = _window(request)
    ledger = await reads.flushed_ledger(request)
    rows = await ledger.usage(cast(GroupBy, group), since=span.start, until=span.end)
    name = f"usage-by-{group}"
    if kind == "json":
        body = {"group_by": group, "start": span.start.isoformat(), "end": span.end.isoformat(), "data": rows}
        return JSONResponse(body, headers=_attachment(f"{name}.json"))
    columns = (group, "requests", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")
    return _csv(rows, columns, f"{name}.csv")


def _window(request: Request) -> series.Window:
    """The query's window (:func:`gateway.console.series.window`); 400 saying what is wrong."""
    try:
        return series.window(request.query_params, datetime.now(UTC))
    except ValueError as exc:
        raise GatewayError("invalid_value", str(exc)) from None


def _kind(request: Request) -> str:
    """An export's format, ``csv`` or ``json`` (404 for any other)."""
    kind: str = request.path_params["kind"]
    if kind not in ("csv", "json"):
        raise GatewayError("not_found", f"No export as {kind!r}: csv or json.")
    return kind


def _attachment(filename: str) -> dict[str, str]:
    return {**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{filename}"'}


#: What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert(value: Any) -> Any:
    """A text cell that a spreadsheet would evaluate (a key named ``=HYPERLINK(…)`` or ``-1-1``) with
    ``'`` before it, so it stays text; numbers and other text as they are."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], filename: str) -> Response:
    out = io.StringIO()
    writer = csv.DictWriter(out, columns)
    writer.writeheader()
    writer.writerows({name: inert(value) for name, value in row.items()} for row in rows)
    return Response(out.getvalue(), media_type="text/csv", headers=_attachment(filename))


def install(app: Any) -> None:
    """The usage page's routes (after :func:`gateway.console.pages.install`)."""
    for path, endpoint in (
        ("/console/usage", usage),
        ("/console/usage.{kind:str}", totals_export),
        ("/console/usage/series.{kind:str}", series_export),
    ):
        app.add_api_route(path, page(endpoint), methods=["GET"], include_in_schema=False)
