"""OpenAI-format errors: one exception type, one body shape, one place that renders them.

Body shape (OpenAI API reference, "Error codes"): ``{"error": {"message", "type", "param", "code"}}``.
Every error the gateway returns — its own, FastAPI's validation errors, unknown routes and an
upstream's error bodies — goes through :func:`error_response`, so clients see one shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from gateway.asgi import ClientDisconnectedError

#: OpenAI error ``type`` for each status the gateway emits.
ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable_error",
    504: "upstream_error",
}


def error_type(status: int) -> str:
    """OpenAI error ``type`` for an HTTP status (``server_error`` for unknown 5xx)."""
    return ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


class GatewayError(Exception):
    """An error the gateway answers with, as (status, OpenAI error body, extra headers)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type or error_type(status)
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The OpenAI error object ``{"error": {...}}``."""
        return error_body(self.message, self.type, self.code, self.param)

    def sse_event(self) -> bytes:
        """The error as one SSE event (``data: {"error": ...}``), for failures after headers were sent."""
        return b"data: " + json.dumps(self.body()).encode() + b"\n\n"


def error_body(message: str, type: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """Build ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(error: GatewayError) -> JSONResponse:
    """Render a :class:`GatewayError` as a JSON response with its status and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def internal_error() -> GatewayError:
    """The 500 for a failure the gateway has no better answer for (the cause goes to the log only)."""
    return GatewayError(500, "The gateway failed to handle this request.", code="internal_error")


def handled_response(exc: Exception) -> Response:
    """The answer to a :class:`GatewayError` (its JSON error) or a :class:`ClientDisconnectedError`
    (a bare 499: nobody reads it; the access log shows why the request ended). Raises ``TypeError`` for
    any other exception."""
    if isinstance(exc, GatewayError):
        return error_response(exc)
    if isinstance(exc, ClientDisconnectedError):
        return Response(status_code=499)
    raise TypeError(f"no response for {type(exc).__name__}")


def invalid_request(errors: Sequence[Any]) -> GatewayError:
    """400 ``invalid_request`` from pydantic/FastAPI validation errors (the first one is reported)."""
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    msg = first.get("msg", "Invalid request")
    return GatewayError(400, f"{param}: {msg}" if param else msg, code="invalid_request", param=param)


def install_error_handlers(app: FastAPI) -> None:
    """Make every error path of ``app`` answer in OpenAI shape."""

    async def on_handled(_: Request, exc: Exception) -> Response:
        return handled_response(exc)

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(invalid_request(exc.errors()))

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            message = f"Unknown route {request.method} {request.url.path}"
            code = "not_found"
        elif exc.status_code == 405:
            message = f"Method {request.method} not allowed on {request.url.path}"
            code = "method_not_allowed"
        else:
            message, code = str(exc.detail), None
        return error_response(GatewayError(exc.status_code, message, code=code, headers=exc.headers))

    async def on_unhandled(_: Request, exc: Exception) -> Response:
        # Starlette's ServerErrorMiddleware calls this, answers, then re-raises for the server's log
        return error_response(internal_error())

    app.add_exception_handler(Exception, on_unhandled)
    app.add_exception_handler(GatewayError, on_handled)
    app.add_exception_handler(ClientDisconnectedError, on_handled)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
