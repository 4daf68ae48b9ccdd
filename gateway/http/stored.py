"""The Responses API's stored responses: ``GET`` / ``DELETE /v1/responses/{response_id}`` and
``POST /v1/responses/{response_id}/cancel``, for the key that created the response only.

Every other key gets the same 404 as for an id that never existed (it must not learn that one does).
vLLM serves ``GET`` and ``cancel`` itself; it has no ``DELETE``, so deleting forgets the owner: the
response stays in vLLM's memory (until it restarts) but no key can reach it through the gateway any
more, and the answer is OpenAI's ``{"id", "object": "response", "deleted": true}``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.backends.pool import Backend
from gateway.http.inference import forward
from gateway.proxy.pipeline import Pipeline

_PARAM = "response_id"


async def _owned(request: Request) -> tuple[Pipeline, str, Backend]:
    """The pipeline, the path's response id and the backend storing it, once the caller is known to
    own it (else 404)."""
    pipeline: Pipeline = request.app.state.pipeline
    response_id = request.path_params[_PARAM]
    return pipeline, response_id, await pipeline.stored_at(request.state.principal, response_id, _PARAM)


async def get_response(request: Request) -> Response:
    """``GET /v1/responses/{response_id}``: the stored response, from the vLLM that stores it."""
    _, response_id, backend = await _owned(request)
    return await forward(backend.upstream, "GET", f"/v1/responses/{response_id}")


async def cancel_response(request: Request) -> Response:
    """``POST /v1/responses/{response_id}/cancel``: the answer of the vLLM that stores it."""
    _, response_id, backend = await _owned(request)
    return await forward(backend.upstream, "POST", f"/v1/responses/{response_id}/cancel")


async def delete_response(request: Request) -> dict[str, Any]:
    """``DELETE /v1/responses/{response_id}``: the owner forgotten."""
    pipeline, response_id, _ = await _owned(request)
    assert pipeline.owners is not None  # _owned found the owner there
    await pipeline.owners.forget(response_id)
    return {"id": response_id, "object": "response", "deleted": True}
