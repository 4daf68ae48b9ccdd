"""The inference routes' short way in: ``POST /v1/chat/completions`` and ``POST /v1/completions`` served
by a pure ASGI middleware instead of FastAPI's router.

Per request FastAPI spends more CPU on the way to an endpoint than the endpoint itself on these routes
(a py-spy profile of short non-stream requests: of the ~1.5 ms CPU a request cost, ~0.45 ms were
routing, the exception middleware, the async exit stack, ``request_response`` and dependency
solving; see docs/performance.md). The middleware sits inside the request-id, header-guard, drain and
Prometheus middlewares (they still see every request) and outside the router: for the two routes it
authenticates, calls the same endpoint function the router has registered, and renders errors the way
the app's exception handlers do (:func:`gateway.errors.handled_response`). The routes stay registered
with FastAPI for ``/openapi.json``; any other method or path goes on to FastAPI (a ``GET`` on these
paths is its 405).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.asgi import ClientDisconnectedError
from gateway.auth import Principal
from gateway.auth.dependency import require_principal
from gateway.errors import GatewayError, handled_response

#: An inference endpoint: the authenticated request in, the response out.
Endpoint = Callable[[Request, Principal], Awaitable[Response]]


class InferenceFastPath:
    """Pure ASGI middleware: serves ``POST`` on the paths of ``endpoints`` (route path -> endpoint)."""

    def __init__(self, app: ASGIApp, endpoints: Mapping[str, Endpoint]) -> None:
        self.app = app
        self.endpoints = dict(endpoints)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = None
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.endpoints.get(get_route_path(scope))
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await endpoint(request, await require_principal(request))
        except (GatewayError, ClientDisconnectedError) as exc:
            response = handled_response(exc)
        await response(scope, receive, send)
