"""HTTP request metrics (``http_requests_total`` by handler, method and status;
``http_request_duration_seconds`` by handler and method) from prometheus-fastapi-instrumentator, with
the route of a static path resolved once instead of per request.

The instrumentator labels each request with its route template, found before the request goes on:
version 8.1 flattens FastAPI's included routers (``_effective_routes``) and matches the path against
every route, on every request. That took ~0.09 ms per inference request, on the way to its first
token (a timeline of ``POST /v1/chat/completions`` at one stream; docs/performance.md). When a
method and path resolve to the path itself — a route without parameters (``/v1/chat/completions``,
``/admin/keys``), matched whole or for another method (a 405) — that answer is kept; every other
(a template such as ``/admin/keys/{key_id}``, a 404) is resolved by the library each time, as
before. The labels are the library's exactly. The kept answers are bounded by the route table only
while the app does not redirect slashes: the library answers a path one slash away from a route
with the path itself (:func:`instrument` refuses such an app).
"""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from prometheus_fastapi_instrumentator import Instrumentator, metrics
from prometheus_fastapi_instrumentator.middleware import PrometheusInstrumentatorMiddleware
from starlette.middleware import Middleware
from starlette.requests import Request

#: Methods whose static-path answers are kept (a client can send any token as a method: the cache
#: stays bounded by the route table).
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class StaticRouteInstrumentatorMiddleware(PrometheusInstrumentatorMiddleware):
    """The instrumentator's middleware; ``(method, path)`` -> ``(path, True)`` answers are kept."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._static: dict[tuple[str, str], tuple[str, bool]] = {}

    def _get_handler(self, request: Request) -> tuple[str, bool]:
        """(route template or path, whether a route matched): the library's answer."""
        key = (request.scope["method"], request.scope["path"])
        handler = self._static.get(key)
        if handler is None:
            handler = super()._get_handler(request)
            if handler == (key[1], True) and key[0] in _METHODS:
                self._static[key] = handler
        return handler


#: ``http_request_duration_seconds`` buckets, s: the library's default set's (its "low resolution" one).
_BUCKETS = (0.1, 0.5, 1.0)


def instrument(app: FastAPI, registry: CollectorRegistry) -> None:
    """Add the HTTP request metrics middleware to ``app``, registered on ``registry`` (``/metrics``
    itself is not counted). Call while building the app: it adds a middleware. Raises
    ``ValueError`` if ``app`` redirects slashes (see the module doc)."""
    if app.router.redirect_slashes:
        raise ValueError("redirect_slashes must be off: '/<route>/<anything>/' would each be kept")
    instrumentator = Instrumentator(registry=registry, excluded_handlers=["/metrics"])
    # the two series an HTTP dashboard reads; the library's default set adds request and response
    # size summaries and a second, unlabelled latency histogram: ~40 µs more per request, read by nothing
    instrumentator.add(
        metrics.requests(registry=registry),
        metrics.latency(should_include_status=False, buckets=_BUCKETS, registry=registry),
    )
    instrumentator.instrument(app)
    added = app.user_middleware[0]  # Starlette inserts a new middleware first
    if added.cls is not PrometheusInstrumentatorMiddleware:
        raise RuntimeError(f"unexpected middleware from the instrumentator: {added.cls!r}")
    app.user_middleware[0] = Middleware(StaticRouteInstrumentatorMiddleware, *added.args, **added.kwargs)
