"""Reading a request's JSON body: bounded in size, in shape (:mod:`gateway.body.json_limits`) and in the
time between its pieces.

Only called after authentication (a FastAPI body parameter would be read and parsed before the
route's dependencies, letting anyone make the gateway read bodies): the inference exchange and the
admin handlers read their bodies here, and uploads their pieces (:func:`body_pieces`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from dspark_common.asgi import ClientDisconnectedError
from dspark_common.turns import Turns
from gateway.body.json_limits import JsonLimits, ShapeScanner, parse_object
from gateway.config import Settings
from gateway.errors import GatewayError


@dataclass(frozen=True, slots=True)
class BodyBounds:
    """How much of a body, in what shape, how fast: ``max_bytes``; ``limits`` (its JSON shape; None for
    a body that is not JSON, an upload: :func:`body_pieces` reads it); at most
    ``idle_timeout_s`` between two pieces; and, once it has taken that long, at least
    ``min_rate_bytes_s`` on average (a client dripping a byte every few seconds would otherwise hold
    a connection and its buffers for hours)."""

    max_bytes: int
    limits: JsonLimits | None
    idle_timeout_s: float
    min_rate_bytes_s: float


async def read_json(request: Request, bounds: BodyBounds) -> tuple[dict[str, Any], int]:
    """The body parsed (a JSON object) and its size in bytes.

    Raises what :func:`body_pieces` raises, 413 ``request_too_complex`` / 400 as soon as its shape
    passes ``limits``, 400 when it is not a JSON object.
    """
    scanner = ShapeScanner(bounds.limits) if bounds.limits is not None else None
    parts: list[bytes] = []
    size, turns = 0, Turns()
    async for part in body_pieces(request, bounds):
        if parts:
            await turns.pause()  # a 4 MB body's pieces come at once, each one measured: take turns
        size += len(part)
        if scanner is not None:
            scanner.feed(part)
        parts.append(part)
    return parse_object(b"".join(parts)), size


async def body_pieces(request: Request, bounds: BodyBounds) -> AsyncIterator[bytes]:
    """The body's pieces as they arrive, within ``bounds`` (its shape is the caller's to check).

    Raises :class:`GatewayError` 413 ``request_too_large`` as soon as it passes ``max_bytes`` (or
    declares more), 408 ``request_timeout`` when it stalls or trickles (:class:`BodyBounds`);
    :class:`~dspark_common.asgi.ClientDisconnectedError` when the client leaves before it arrived.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > bounds.max_bytes:
        raise _too_large(bounds.max_bytes)
    size = 0
    pieces = request.stream().__aiter__()
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        while True:
            try:
                async with asyncio.timeout(bounds.idle_timeout_s):
                    part = await anext(pieces)
            except StopAsyncIteration:
                return
            except TimeoutError:
                message = f"No part of the request body arrived for {bounds.idle_timeout_s:g} s."
                raise GatewayError("request_timeout", message) from None
            size += len(part)
            if size > bounds.max_bytes:
                raise _too_large(bounds.max_bytes)
            elapsed = loop.time() - started
            if elapsed > bounds.idle_timeout_s and size < bounds.min_rate_bytes_s * elapsed:
                message = f"The request body arrives slower than {bounds.min_rate_bytes_s:g} bytes/s."
                raise GatewayError("request_timeout", message)
            yield part
    except ClientDisconnect:
        raise ClientDisconnectedError() from None


def body_bounds(settings: Settings, max_bytes: int, limits: JsonLimits | None) -> BodyBounds:
    """The :class:`BodyBounds` of a route's bodies: its size and shape bounds, the settings' pace."""
    return BodyBounds(max_bytes, limits, settings.body_idle_timeout_s, settings.body_min_rate_bytes_s)


def _too_large(limit: int) -> GatewayError:
    return GatewayError("request_too_large", f"The request body is larger than {limit} bytes.")
