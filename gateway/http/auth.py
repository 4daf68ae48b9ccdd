"""Authentication as FastAPI dependencies, attached by the route table (:mod:`gateway.app.routes`) to
every route that is not public — deny by default — and the public routes' per-address limit.
An address with too many failed authentications is refused before its credentials are checked
(:mod:`gateway.http.throttle`) — unless they are ones that authenticated before, so a guesser at
the same address (an office behind one NAT) does not lock its legitimate clients out.

The route's dialect says where the caller's secret is (``Authorization: Bearer``; ``x-api-key`` for
Anthropic clients); :class:`~gateway.auth.Authenticator` resolves it to a :class:`Principal`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from starlette.requests import Request

from gateway.auth.authenticator import Authenticator
from gateway.auth.principal import Principal
from gateway.dialects.base import Dialect
from gateway.errors import GatewayError
from gateway.http.throttle import AddressThrottle

ADMIN_SCOPE = "admin"
#: A dependency resolving the request's caller.
PrincipalDependency = Callable[[Request], Awaitable[Principal]]


@functools.cache
def principal_for(dialect: Dialect) -> PrincipalDependency:
    """The dependency that authenticates a request of ``dialect`` (one per dialect, so FastAPI runs it
    once per request however many times a route names it). 401 ``invalid_api_key`` otherwise."""

    async def require_principal(request: Request) -> Principal:
        principal = await authenticate(request, lambda: dialect.credentials(request.headers))
        request.state.principal = principal
        return principal

    return require_principal


async def authenticate(request: Request, secret: Callable[[], str]) -> Principal:
    """The principal of the caller's ``secret()`` (an API key or a JWT; it may raise the dialect's
    401 for missing credentials), behind the failure throttle of the caller's address: a 401 counts
    against it, and a throttled address is refused before its secret is checked, unless that secret
    authenticated before."""
    throttle: AddressThrottle = request.app.state.throttle
    authenticator: Authenticator = request.app.state.authenticator
    address = client_address(request)
    try:
        token = secret()
        if not authenticator.vouched(token):
            await throttle.check_failures(address)
        return await authenticator.authenticate(token)
    except GatewayError as error:
        if error.status == 401:
            await throttle.failed(address)
        raise


def client_address(request: Request) -> str:
    """The client's address (the peer's, or what a trusted proxy forwarded)."""
    return request.client.host if request.client else "unknown"


async def public_limit(request: Request) -> None:
    """The per-address limit of the public routes (:class:`AddressThrottle`)."""
    throttle: AddressThrottle = request.app.state.throttle
    await throttle.public(client_address(request))


@functools.cache
def admin_for(dialect: Dialect) -> PrincipalDependency:
    """The dependency that authenticates an admin (the ``admin`` scope); 403 ``admin_required`` for
    any other caller."""
    authenticate = principal_for(dialect)

    async def require_admin(request: Request) -> Principal:
        principal = await authenticate(request)
        if ADMIN_SCOPE not in principal.scopes:
            raise GatewayError("admin_required", "This route needs an admin key.")
        return principal

    return require_admin
