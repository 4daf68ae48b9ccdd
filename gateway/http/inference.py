"""The inference routes' handlers: each dialect's route runs its exchange
(:class:`InferenceRoute`: :class:`~gateway.proxy.respond.ExchangeResponse`); Anthropic's
``count_tokens``; the model list.

No handler takes a body parameter: the exchange reads and parses the body itself, after
authentication (FastAPI would parse a body parameter before the route's dependencies). Their OpenAPI
request body is generated from the dialect's request model (:func:`gateway.http.openapi.documented`).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from dspark_common import json_codec
from gateway.backends.upstream import Upstream
from gateway.body.read import body_bounds, read_json
from gateway.dialects.base import Dialect
from gateway.dialects.messages import COUNT_TOKENS
from gateway.errors import GatewayError
from gateway.http.auth import authenticate
from gateway.http.errors import refusal
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.preparation import check_model, resolve_model
from gateway.proxy.respond import INFERENCE, ExchangeResponse


class InferenceRoute:
    """The ASGI app of ``dialect``'s inference route: authenticates the caller in the dialect (401,
    throttled like every route: :func:`~gateway.http.auth.authenticate`), then runs the exchange
    (:class:`~gateway.proxy.respond.ExchangeResponse`, which answers its own errors).

    Plain ASGI rather than a FastAPI endpoint: the request path every token of every stream takes skips
    the per-request dependency solving, ``Request`` wrappers and exit stacks FastAPI builds around an
    endpoint, which the exchange has no use for (it reads its own body, after authentication). The
    route table documents these routes with FastAPI all the same (:func:`documented_only`).
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.path = dialect.route  # the HTTP metrics' handler label (gateway.http.http_metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        dialect = self.dialect
        try:
            principal = await authenticate(request, lambda: dialect.credentials(request.headers))
        except GatewayError as error:
            await refusal(request, error, dialect)(scope, receive, send)
            return
        request.state.principal = principal  # the edge's x-ratelimit-* headers are the principal's
        await ExchangeResponse(request.app.state.pipeline, dialect, principal)(scope, receive, send)


# The handler FastAPI documents an inference route from (its summary, body schema and tags come from the
# route table). The route is served by its InferenceRoute, installed before this one on the same path
# and method, so no request reaches it. No docstring: FastAPI would publish it as the route's description.
async def documented_only(request: Request) -> Response:  # pragma: no cover - never routed to
    raise AssertionError(f"{request.url.path} is served by its InferenceRoute")


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
    requested = resolve_model(pipeline.aliases, principal, body)
    parsed = COUNT_TOKENS.parse(body)
    check_model(settings, principal, parsed.model, requested)
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
