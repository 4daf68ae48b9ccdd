"""FastAPI dependency that authenticates a request; attach it to a router, not to single routes."""

from __future__ import annotations

from starlette.requests import Request

from gateway.auth.authenticator import Authenticator
from gateway.auth.principal import Principal


async def require_principal(request: Request) -> Principal:
    """Resolve ``Authorization`` to a :class:`Principal` (raises 401 ``GatewayError`` otherwise)."""
    authenticator: Authenticator = request.app.state.authenticator
    principal = await authenticator.authenticate(request.headers.get("authorization"))
    request.state.principal = principal
    return principal
