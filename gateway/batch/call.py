"""One batch line run through the gateway's own request path, in process: the same exchange an HTTP
request of its key runs (:class:`~gateway.proxy.respond.ExchangeResponse`: model allow-list, limits,
quota, admission, the reasoning split, telemetry and the ledger), called as the ASGI app it is, with
the key's principal (the key is looked up again for every batch, so a revoked key's batch stops)
instead of a secret, and ``x-priority: batch``. No socket, no secret: nothing here is reachable from
outside.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message

from dspark_common import json_codec
from gateway.auth.principal import Principal
from gateway.dialects.base import Dialect
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.respond import ExchangeResponse


@dataclass(frozen=True, slots=True)
class Answer:
    """What the exchange answered: HTTP ``status``, ``body`` (JSON, or None when it was not JSON),
    ``retry_after_s`` (its ``Retry-After``, None without)."""

    status: int
    body: Any
    retry_after_s: float | None


@dataclass(frozen=True, slots=True)
class Line:
    """One batch line to send: ``body`` (JSON) as request ``request_id``, line ``custom_id`` of
    ``batch_id`` (the ledger row's ``client_request_id`` and ``batch_id``)."""

    body: bytes
    request_id: str
    custom_id: str
    batch_id: str


async def call(
    app: ASGIApp, pipeline: Pipeline, dialect: Dialect, principal: Principal, line: Line
) -> Answer:
    """``line`` sent to ``dialect``'s route as ``principal``'s batch request; its answer. ``app`` is
    the gateway's (``request.app`` in the exchange)."""
    body = line.body
    done = asyncio.Event()
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client never leaves before the answer: disconnected only after it
        return {"type": "http.disconnect"}

    status, headers, parts = 500, dict[bytes, bytes](), list[bytes]()

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], dict(message.get("headers", []))
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": dialect.route,
        "raw_path": dialect.route.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-priority", b"batch"),
        ],
        "client": None,
        "server": None,
        "app": app,
        "state": {
            "request_id": line.request_id,
            "client_request_id": line.custom_id,
            "batch_id": line.batch_id,
            "principal": principal,
        },
    }
    try:
        await ExchangeResponse(pipeline, dialect, principal)(scope, receive, send)
    finally:
        done.set()
    raw = b"".join(parts)
    try:
        parsed = json_codec.loads(raw) if raw.strip() else None
    except ValueError:
        parsed = None
    retry = headers.get(b"retry-after", b"")
    return Answer(status, parsed, float(retry) if retry.isdigit() else None)
