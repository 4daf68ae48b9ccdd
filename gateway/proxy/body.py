"""Reading a request's JSON body: bounded in size, in shape (:mod:`gateway.json_limits`) and in the
time between its pieces.

Only called after authentication (a FastAPI body parameter would be read and parsed before the
route's dependencies, letting anyone make the gateway read bodies): the inference exchange and the
admin handlers read their bodies here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import ClientDisconnect, Request

from gateway.errors import ClientDisconnectedError, GatewayError
from gateway.json_limits import JsonLimits, ShapeScanner, parse_object


async def read_json(
    request: Request, max_bytes: int, idle_timeout_s: float, limits: JsonLimits
) -> tuple[dict[str, Any], int]:
    """The body parsed (a JSON object) and its size in bytes.

    Raises :class:`GatewayError` 413 ``request_too_large`` as soon as it passes ``max_bytes``, 413
    ``request_too_complex`` / 400 as soon as its shape passes ``limits``, 408 ``request_timeout`` when
    no piece arrives for ``idle_timeout_s`` seconds (a slow upload that keeps sending is fine), 400
    when it is not a JSON object; :class:`~gateway.errors.ClientDisconnectedError` when the client
    leaves before it arrived.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    scanner = ShapeScanner(limits)
    parts, size = [], 0
    pieces = request.stream().__aiter__()
    try:
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    part = await anext(pieces)
            except StopAsyncIteration:
                break
            except TimeoutError:
                message = f"No part of the request body arrived for {idle_timeout_s:g} s."
                raise GatewayError("request_timeout", message) from None
            size += len(part)
            if size > max_bytes:
                raise _too_large(max_bytes)
            scanner.feed(part)
            parts.append(part)
    except ClientDisconnect:
        raise ClientDisconnectedError() from None
    return parse_object(b"".join(parts)), size


def _too_large(limit: int) -> GatewayError:
    return GatewayError("request_too_large", f"The request body is larger than {limit} bytes.")
