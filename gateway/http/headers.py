"""Request-header sanity, checked before routing and authentication.

uvicorn's default HTTP parser (httptools) puts no limit on header size and passes duplicated fields
through, so the gateway refuses:

- headers larger than :data:`MAX_HEADER_BYTES` in total -> 431 ``request_headers_too_large`` (32 KiB,
  nginx's default total; a large identity-provider JWT is a few KiB);
- an HTTP/1.1 request without ``Host``, or with more than one -> 400 (RFC 9112 section 3.2 says a
  server MUST refuse both);
- more than one ``Authorization`` or ``x-api-key`` -> 400: which one counts would depend on who reads
  it (a proxy in front may take the last, Starlette takes the first); likewise more than one of the
  headers that ask for a request's handling (:data:`SINGLE`: ``x-priority``, ``x-max-wait-s``,
  ``x-session-affinity``, ``x-gateway-telemetry``).
"""

from __future__ import annotations

from starlette.types import Scope

from gateway.errors import GatewayError

MAX_HEADER_BYTES = 32 * 1024
#: Headers a request may carry once (beside ``Host``): credentials, and what asks for its handling.
SINGLE = frozenset(
    {
        b"authorization",
        b"x-api-key",
        b"x-priority",
        b"x-max-wait-s",
        b"x-session-affinity",
        b"x-gateway-telemetry",
    }
)


def check_headers(scope: Scope, max_bytes: int = MAX_HEADER_BYTES) -> GatewayError | None:
    """The error to answer ``scope``'s request with, or None if its headers are acceptable."""
    size = hosts = 0
    seen: set[bytes] = set()
    repeated: bytes | None = None
    for name, value in scope["headers"]:  # one pass: this runs on every request
        size += len(name) + len(value) + 4
        if name == b"host":
            hosts += 1
        elif name in SINGLE:
            if name in seen:
                repeated = name
            seen.add(name)
    if size > max_bytes:
        return GatewayError(
            "request_headers_too_large", f"The request headers are larger than {max_bytes} bytes."
        )
    if hosts > 1 or (hosts == 0 and scope.get("http_version") == "1.1"):
        return GatewayError("invalid_request", "Exactly one Host header is required.")
    if repeated is not None:
        return GatewayError("invalid_request", f"More than one {repeated.decode()} header.")
    return None
