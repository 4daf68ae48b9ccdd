"""Request ids: every response carries ``x-request-id``; a sane one sent by the client is kept.

Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer streams and break disconnect handling).
The id is put in ``scope["state"]["request_id"]`` (``request.state.request_id`` in handlers) and sent
upstream, so gateway logs, the ledger and vLLM's logs can be joined.
"""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_SANE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
HEADER = b"x-request-id"


def new_request_id() -> str:
    """A fresh id: ``req-`` + 32 hex characters."""
    return "req-" + uuid.uuid4().hex


class RequestIdMiddleware:
    """Assigns the request id and adds it to the response headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = next((value for name, value in scope["headers"] if name == HEADER), b"").decode("latin-1")
        request_id = sent if _SANE.fullmatch(sent) else new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (HEADER, request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)
