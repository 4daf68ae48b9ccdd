"""Reading an inference request's body: bounded in size, validated into its pydantic model.

Only called after authentication (a FastAPI body parameter would be parsed before the router's auth
dependency, letting anyone make the gateway read and parse bodies).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request

from gateway.asgi import ClientDisconnectedError
from gateway.errors import GatewayError, invalid_request
from gateway.openai_api import InferenceRequest

Body = TypeVar("Body", bound=InferenceRequest)


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request body, or 413 ``request_too_large`` as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts, size = [], 0
    try:
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise _too_large(limit)
            parts.append(part)
    except ClientDisconnect:
        raise ClientDisconnectedError() from None
    return b"".join(parts)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"The request body is larger than {limit} bytes.", code="request_too_large")


async def parse_body(request: Request, model: type[Body]) -> Body:
    """Read (bounded by ``GATEWAY_MAX_BODY_BYTES``) and validate the JSON body into ``model``.

    Raises :class:`GatewayError` 413 (too large) or 400 (invalid), and
    :class:`~gateway.asgi.ClientDisconnectedError` when the client leaves before its body arrived.
    """
    raw = await read_bounded(request, request.app.state.settings.max_body_bytes)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None
