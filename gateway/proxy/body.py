"""Reading a request's body, bounded in size (``GATEWAY_MAX_BODY_BYTES``).

Only called after authentication (a FastAPI body parameter would be parsed before the router's auth
dependency, letting anyone make the gateway read and parse bodies).
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

from gateway.errors import ClientDisconnectedError, GatewayError


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request body; 413 ``request_too_large`` as soon as it passes ``limit`` bytes, and
    :class:`~gateway.errors.ClientDisconnectedError` when the client leaves before it arrived."""
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
    return GatewayError("request_too_large", f"The request body is larger than {limit} bytes.")
