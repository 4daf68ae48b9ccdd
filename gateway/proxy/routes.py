"""The OpenAI routes the gateway serves (all authenticated). Thin: parse, then hand to the Forwarder."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from gateway.auth import Principal
from gateway.auth.dependency import require_principal
from gateway.errors import GatewayError, invalid_request
from gateway.openai_api import ChatCompletionRequest, CompletionRequest, InferenceRequest
from gateway.proxy.forward import Forwarder

router = APIRouter(prefix="/v1", dependencies=[Depends(require_principal)], tags=["openai"])
PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _forwarder(request: Request) -> Forwarder:
    forwarder: Forwarder = request.app.state.forwarder
    return forwarder


Body = TypeVar("Body", bound=InferenceRequest)


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request body, or 413 ``request_too_large`` as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
    return b"".join(parts)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"The request body is larger than {limit} bytes.", code="request_too_large")


async def parse_body(request: Request, model: type[Body]) -> Body:
    """Read (bounded by ``GATEWAY_MAX_BODY_BYTES``) and validate the JSON body — only after
    authentication (a FastAPI body parameter would be parsed before the router's auth dependency,
    letting anyone make the gateway parse bodies)."""
    raw = await read_bounded(request, request.app.state.settings.max_body_bytes)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None


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
    """OpenAPI for a route that parses its body itself (:func:`parse_body`): the request body's schema,
    generated from the same pydantic model, for ``/docs`` and schema-driven clients and fuzzers; a 200
    is JSON, or server-sent events when the body asks for ``stream``."""
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
    body = await parse_body(request, ChatCompletionRequest)
    return await _forwarder(request).forward(request, principal, "/v1/chat/completions", body)


@router.post(
    "/completions",
    summary="Create a text completion (OpenAI-compatible)",
    openapi_extra=_documented(CompletionRequest),
)
async def completions(request: Request, principal: PrincipalDep) -> Response:
    body = await parse_body(request, CompletionRequest)
    return await _forwarder(request).forward(request, principal, "/v1/completions", body)


@router.get("/models", summary="List the models this key may use")
async def models(request: Request, principal: PrincipalDep) -> dict[str, Any]:
    forwarder = _forwarder(request)
    response = await forwarder.upstream.open("GET", "/v1/models")
    try:
        listing = await response.aread()
    finally:
        await response.aclose()
    data = json.loads(listing)
    data["data"] = [m for m in data.get("data", []) if principal.may_use(m.get("id", ""))]
    return data
