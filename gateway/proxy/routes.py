"""The OpenAI routes the gateway serves (all authenticated). Thin: parse, then hand to the Forwarder."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from gateway.auth import Principal
from gateway.auth.dependency import require_principal
from gateway.openai_api import ChatCompletionRequest, CompletionRequest
from gateway.proxy.forward import Forwarder

router = APIRouter(prefix="/v1", dependencies=[Depends(require_principal)], tags=["openai"])
PrincipalDep = Annotated[Principal, Depends(require_principal)]


def _forwarder(request: Request) -> Forwarder:
    forwarder: Forwarder = request.app.state.forwarder
    return forwarder


@router.post("/chat/completions", summary="Create a chat completion (OpenAI-compatible)")
async def chat_completions(
    body: ChatCompletionRequest, request: Request, principal: PrincipalDep
) -> Response:
    return await _forwarder(request).forward(request, principal, "/v1/chat/completions", body)


@router.post("/completions", summary="Create a text completion (OpenAI-compatible)")
async def completions(body: CompletionRequest, request: Request, principal: PrincipalDep) -> Response:
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
