"""Every error an HTTP route answers with, rendered in the dialect of the route it was sent to.

:class:`~gateway.errors.GatewayError` carries the kind (status, type, code, log level:
:data:`gateway.errors.CATALOGUE`); the route's dialect gives the body's shape. FastAPI's validation
errors, unknown routes (404) and wrong methods (405) become gateway errors first, so clients see
one shape per API. Inference routes answer their own errors (:mod:`gateway.proxy.respond`); these
handlers serve everything else (authentication, the admin API, health, metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from limits.errors import StorageError
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from dspark_common import json_codec
from dspark_common.asgi import ClientDisconnectedError
from gateway.dialects.base import Dialect
from gateway.errors import GatewayError, internal_error, invalid_request
from gateway.limits.rate import limits_unavailable
from gateway.storage.failures import storage_refusal

log = logging.getLogger("gateway.errors")
#: The dialect of the route at a path (the OpenAI one for any path not in the route table).
DialectFor = Callable[[str], Dialect]


def render_error(error: GatewayError, dialect: Dialect) -> Response:
    """``error`` as a JSON response in ``dialect``'s shape, with its status and headers."""
    body = json_codec.dumps(dialect.error_body(error))
    return Response(body, status_code=error.status, headers=error.headers, media_type="application/json")


def refusal(request: Request, error: GatewayError, dialect: Dialect) -> Response:
    """``error`` answered to ``request`` in ``dialect`` (:func:`render_error`), logged at its kind's level
    with the method, path, status and code (never the request's content)."""
    log.log(error.kind.log_level, "%s %s: %d %s", request.method, request.url.path, error.status, error.code)
    return render_error(error, dialect)


def renderer(dialect_for: DialectFor) -> Callable[[GatewayError, str], Response]:
    """``render(error, path)``: :func:`render_error` in the dialect of the route at ``path``."""
    return lambda error, path: render_error(error, dialect_for(path))


def install_error_handlers(app: FastAPI, dialect_for: DialectFor) -> None:
    """Make every error path of ``app`` answer as a gateway error, in its route's dialect."""

    def answer(request: Request, error: GatewayError) -> Response:
        return refusal(request, error, dialect_for(request.url.path))

    async def on_gateway_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GatewayError)
        return answer(request, exc)

    async def on_disconnect(_: Request, exc: Exception) -> Response:
        return Response(status_code=499)  # nobody reads it; the access log shows why the request ended

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return answer(request, invalid_request(list(exc.errors())))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            error = GatewayError("not_found", f"Unknown route {request.method} {request.url.path}")
        elif exc.status_code == 405:
            message = f"Method {request.method} not allowed on {request.url.path}"
            error = GatewayError("method_not_allowed", message, headers=exc.headers)
        else:
            error = GatewayError("http_error", str(exc.detail), headers=exc.headers, status=exc.status_code)
        return answer(request, error)

    async def on_store_error(request: Request, exc: Exception) -> Response:
        return answer(request, limits_unavailable())  # a key's model list, token count, own key...

    async def on_database_error(request: Request, exc: Exception) -> Response:
        # an admin write, an upload's record: the database locked, read-only, full or away
        refused = storage_refusal(exc)
        assert refused is not None
        log.error("%s %s: %s", request.method, request.url.path, refused.message)
        return render_error(refused, dialect_for(request.url.path))

    async def on_unhandled(request: Request, exc: Exception) -> Response:
        # Starlette's ServerErrorMiddleware calls this, answers, then re-raises for the server's log
        return render_error(internal_error(), dialect_for(request.url.path))

    app.add_exception_handler(Exception, on_unhandled)
    app.add_exception_handler(GatewayError, on_gateway_error)
    app.add_exception_handler(ClientDisconnectedError, on_disconnect)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(StorageError, on_store_error)
    app.add_exception_handler(OperationalError, on_database_error)
