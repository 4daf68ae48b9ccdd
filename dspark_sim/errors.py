"""The simulator's one error type and its OpenAI/vLLM-shaped JSON body.

vLLM (>= 0.11) answers errors as ``{"error": {"message", "type", "param", "code"}}`` with ``type`` a
class-like name (``BadRequestError``, ``NotFoundError`` ...) and ``code`` the HTTP status.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    413: "RequestEntityTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    501: "NotImplementedError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class SimError(Exception):
    """A request the simulator refuses; rendered by :func:`sim_error_handler`."""

    def __init__(self, status: int, message: str, *, param: str | None = None, type_: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_ or _TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")

    def body(self) -> dict[str, Any]:
        """The JSON body vLLM would send for this error."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        return {"error": error}


class SimulatedCrash(Exception):
    """Raised inside a stream to cut the connection (``#sim:die_after``); never rendered."""


async def sim_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """Starlette exception handler: ``SimError`` -> its status and JSON body."""
    assert isinstance(exc, SimError)
    return JSONResponse(exc.body(), status_code=exc.status)
