"""Request-header sanity, checked before routing and authentication (pure ASGI middleware).

uvicorn's default HTTP parser (httptools) puts no limit on header size and passes duplicated fields
through, so the gateway refuses, in OpenAI error shape:

- headers larger than :data:`MAX_HEADER_BYTES` in total -> 431 ``request_headers_too_large`` (32 KiB,
  nginx's default total; a large identity-provider JWT is a few KiB);
- an HTTP/1.1 request without ``Host``, or with more than one -> 400 (RFC 9112 section 3.2 says a
  server MUST refuse both);
- more than one ``Authorization`` -> 400: which one counts would depend on who reads it (a proxy in
  front may take the last, Starlette takes the first).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import GatewayError, error_response

MAX_HEADER_BYTES = 32 * 1024


class HeaderGuardMiddleware:
    """Refuses requests whose headers are oversized or ambiguous, before anything reads them."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_HEADER_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (error := self.check(scope)) is not None:
            await error_response(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> GatewayError | None:
        """The error to answer ``scope``'s request with, or None if its headers are acceptable."""
        size = hosts = authorizations = 0
        for name, value in scope["headers"]:  # one pass: this runs on every request
            size += len(name) + len(value) + 4
            if name == b"host":
                hosts += 1
            elif name == b"authorization":
                authorizations += 1
        if size > self.max_bytes:
            message = f"The request headers are larger than {self.max_bytes} bytes."
            return GatewayError(431, message, code="request_headers_too_large")
        if hosts > 1 or (hosts == 0 and scope.get("http_version") == "1.1"):
            return GatewayError(400, "Exactly one Host header is required.", code="invalid_request")
        if authorizations > 1:
            return GatewayError(400, "More than one Authorization header.", code="invalid_request")
        return None
