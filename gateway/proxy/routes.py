"""The OpenAI routes the gateway serves (all authenticated). Thin: hand the request to the Forwarder.

The two inference endpoints are registered here (so ``/openapi.json`` documents them) and called by
:class:`~gateway.proxy.fast_path.InferenceFastPath` through :data:`INFERENCE_ENDPOINTS`, which answers
``POST`` on their paths before FastAPI's router.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from gateway.auth import Principal
from gateway.auth.dependency import require_principal
from gateway.openai_api import ChatCompletionRequest, CompletionRequest, InferenceRequest
from gateway.proxy.forward import Forwarder

router = APIRouter(prefix="/v1", dependencies=[Depends(require_principal)], tags=["openai"])
PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _forwarder(request: Request) -> Forwarder:
    forwarder: Forwarder = request.app.state.forwarder
    return forwarder


def request_schema(model: type[InferenceRequest]) -> dict[str, Any]:
    """``model``'s JSON schema (``model_json_schema``), self-contained: pydantic's ``#/$defs/...`` refs
    would resolve against the OpenAPI document's root, so the definitions are inlined (these request
    models are not recursive)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined


def _documented(model: type[InferenceRequest]) -> dict[str, Any]:
    """OpenAPI for a route whose body the forwarder parses itself (:mod:`gateway.proxy.body`): the
    request body's schema, generated from the same pydantic model, for ``/docs`` and schema-driven
    clients and fuzzers; a 200 is JSON, or server-sent events when the body asks for ``stream``."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_schema(model)}},
        },
        "responses": {
            "200": {
                "description": "The completion, or with `stream: true` server-sent events",
                "content": {"application/json": {}, "text/event-stream": {}},
            }
        },
    }


@router.post(
    "/chat/completions",
    summary="Create a chat completion (OpenAI-compatible)",
    openapi_extra=_documented(ChatCompletionRequest),
)
async def chat_completions(request: Request, principal: PrincipalDep) -> Response:
    forwarder = _forwarder(request)
    return await forwarder.forward(request, principal, "/v1/chat/completions", ChatCompletionRequest)


@router.post(
    "/completions",
    summary="Create a text completion (OpenAI-compatible)",
    openapi_extra=_documented(CompletionRequest),
)
async def completions(request: Request, principal: PrincipalDep) -> Response:
    return await _forwarder(request).forward(request, principal, "/v1/completions", CompletionRequest)


#: Route path -> endpoint of the ``POST`` routes above (:class:`~gateway.proxy.fast_path.InferenceFastPath`).
INFERENCE_ENDPOINTS = {
    route.path: route.endpoint
    for route in router.routes
    if isinstance(route, APIRoute) and "POST" in (route.methods or ())
}


@router.get("/models", summary="List the models this key may use")
async def models(request: Request, principal: PrincipalDep) -> dict[str, Any]:
    forwarder = _forwarder(request)
    response = await forwarder.upstream.open("GET", "/v1/models")
    try:
        listing = await response.read()
    finally:
        response.close()
    data = json.loads(listing)
    data["data"] = [m for m in data.get("data", []) if principal.may_use(m.get("id", ""))]
    return data
