"""HTTP request metrics, as prometheus-fastapi-instrumentator names them: ``http_requests_total`` by
``handler``, ``method`` and ``status`` (grouped: ``2xx``, ``4xx`` …) and ``http_request_duration_seconds``
by ``handler`` and ``method``, the request's whole time in the app (a stream's included).

``handler`` is the matched route's path template (``/admin/keys/{key_id}``), ``none`` for a path no
route matched, so a client can't grow the series by sending paths; ``/metrics`` itself is not
counted. The edge middleware (:mod:`gateway.http.edge`) records each request.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import Scope

#: ``http_request_duration_seconds`` buckets, s (the instrumentator's low-resolution set).
BUCKETS = (0.1, 0.5, 1.0)
#: Methods kept as labels; any other token a client sends counts as ``other``.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_EXCLUDED = frozenset({"/metrics"})


def handler_label(scope: Scope) -> str:
    """The route template that served ``scope``, or ``none``: FastAPI puts a matched ``APIRoute`` in
    ``scope["route"]``; a plain Starlette route puts its ASGI app in ``scope["endpoint"]``, and the
    inference routes' (:class:`~gateway.http.inference.InferenceRoute`) has the ``path`` too."""
    route = scope.get("route") or scope.get("endpoint")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "none"


class HttpMetrics:
    """The two HTTP series on ``registry``; children are bound once per label set."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "http_requests", "Total number of requests by method, status and handler.",
            ("method", "status", "handler"), registry=registry,
        )  # fmt: skip
        self._duration = Histogram(
            "http_request_duration_seconds", "Duration of HTTP requests in seconds",
            ("method", "handler"), buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def observe(self, scope: Scope, status: int, duration_s: float) -> None:
        """One finished request answered with ``status`` after ``duration_s`` seconds."""
        handler = handler_label(scope)
        if handler in _EXCLUDED:
            return
        method = scope["method"] if scope["method"] in _METHODS else "other"
        key = (method, f"{status // 100}xx", handler)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self._requests.labels(*key),
                self._duration.labels(method, handler),
            )
        children[0].inc()
        children[1].observe(duration_s)
