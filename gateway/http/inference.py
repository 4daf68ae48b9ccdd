"""The inference routes' handlers: each returns the response that runs its request
(:class:`~gateway.proxy.respond.ExchangeResponse`); Anthropic's ``count_tokens``; the model list.

The handlers take no body parameter: the exchange reads and parses the body itself, after
authentication (FastAPI would parse a body parameter before the route's dependencies). Their OpenAPI
request body is generated from the dialect's request model (:func:`gateway.http.openapi.documented`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from dspark_common import json_codec
from gateway.backends.upstream import Upstream
from gateway.body.read import body_bounds, read_json
from gateway.dialects.base import Dialect
from gateway.dialects.messages import COUNT_TOKENS
from gateway.errors import GatewayError
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.preparation import check_model, resolve_model
from gateway.proxy.respond import INFERENCE, ExchangeResponse

Endpoint = Callable[[Request], Awaitable[Response]]


def inference(dialect: Dialect) -> Endpoint:
    """The handler of ``dialect``'s route (authenticated by the route table's dependency)."""

    async def endpoint(request: Request) -> Response:
        pipeline: Pipeline = request.app.state.pipeline
        return ExchangeResponse(pipeline, dialect, request.state.principal)

    endpoint.__name__ = dialect.route.strip("/").replace("/", "_")
    return endpoint


async def forward(
    upstream: Upstream,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """``method path`` sent to ``upstream``; its JSON answer returned with its status (an error status
    raises :class:`GatewayError`, answered in the route's dialect)."""
    response = await upstream.open(method, path, body, headers)
    try:
        data = await response.read()
    finally:
        response.close()
    return Response(data, status_code=response.status, media_type="application/json")


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the prompt's tokens, counted by vLLM. No slot (nothing is
    generated), but one request against the key's requests per minute, within the backend's bound on
    counts (:mod:`gateway.backends.counting`: 429 when the key has its share in flight)."""
    pipeline: Pipeline = request.app.state.pipeline
    principal = request.state.principal
    settings = pipeline.settings
    await pipeline.limits.count(principal)  # its x-ratelimit-* headers: the edge's (http/rate_headers.py)
    body, _ = await read_json(request, body_bounds(settings, settings.max_body_bytes, INFERENCE))
    resolve_model(pipeline.aliases, principal, body)
    parsed = COUNT_TOKENS.parse(body)
    check_model(settings, principal, parsed.model)
    payload = COUNT_TOKENS.normalize(parsed, principal, settings)
    headers = {**COUNT_TOKENS.forwarded(request.headers), "x-request-id": request.state.request_id}
    data = json_codec.dumps(payload)
    async with pipeline.backends.first_up().counts.hold(principal.name) as upstream:
        return await forward(upstream, "POST", COUNT_TOKENS.upstream_path, data, headers)


async def list_models(request: Request) -> dict[str, Any]:
    """``GET /v1/models``: the upstream's list, filtered by the key's model allow-list, with the
    served model's exact aliases (the key's own, ``GATEWAY_MODEL_ALIASES``) listed as models of their own."""
    pipeline: Pipeline = request.app.state.pipeline
    principal = request.state.principal
    listing = await _models(pipeline)
    cards = [m for m in listing.get("data", []) if isinstance(m, dict) and principal.may_use(m.get("id", ""))]
    served = next((m for m in cards if m.get("id") == pipeline.settings.served_model), None)
    if served is not None:
        cards += [
            {**served, "id": alias, "root": served.get("id")}
            for alias in pipeline.aliases.listed(principal.aliases)
        ]
    listing["data"] = cards
    return listing


async def get_model(request: Request) -> dict[str, Any]:
    """``GET /v1/models/{model_id}``: one model card of :func:`list_models` (404 for any other id)."""
    model_id = request.path_params["model_id"]
    for card in (await list_models(request))["data"]:
        if card.get("id") == model_id:
            return dict(card)
    raise GatewayError("model_not_found", f"The model `{model_id}` does not exist.", param="model")


async def _models(pipeline: Pipeline) -> dict[str, Any]:
    response = await pipeline.backends.first_up().upstream.open("GET", "/v1/models")
    try:
        listing = await response.read()
    finally:
        response.close()
    data = json_codec.loads(listing)
    return data if isinstance(data, dict) else {"object": "list", "data": []}
