"""The inference routes' handlers: each returns the response that runs its request
(:class:`~gateway.proxy.respond.ExchangeResponse`), and ``GET /v1/models``.

The handlers take no body parameter: the exchange reads and parses the body itself, after
authentication (FastAPI would parse a body parameter before the route's dependencies). Their OpenAPI
request body is generated from the dialect's request model (:func:`gateway.http.openapi.documented`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway import json_codec
from gateway.dialects.base import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.respond import ExchangeResponse

Endpoint = Callable[[Request], Awaitable[Response]]


def inference(dialect: Dialect) -> Endpoint:
    """The handler of ``dialect``'s route (authenticated by the route table's dependency)."""

    async def endpoint(request: Request) -> Response:
        pipeline: Pipeline = request.app.state.pipeline
        return ExchangeResponse(pipeline, dialect, request.state.principal)

    endpoint.__name__ = dialect.route.strip("/").replace("/", "_")
    return endpoint


async def list_models(request: Request) -> dict[str, Any]:
    """``GET /v1/models``: the upstream's list, filtered by the key's model allow-list."""
    pipeline: Pipeline = request.app.state.pipeline
    response = await pipeline.upstream.open("GET", "/v1/models")
    try:
        listing = await response.read()
    finally:
        response.close()
    data = json_codec.loads(listing)
    principal = request.state.principal
    data["data"] = [m for m in data.get("data", []) if principal.may_use(m.get("id", ""))]
    return dict(data)
