"""The gateway's one middleware: everything every HTTP request goes through, with one ``send`` wrapper.

In order, for each request:

1. header sanity (:func:`~gateway.http.headers.check_headers`): 431/400 before anything reads them;
2. its request id (:mod:`gateway.http.request_id`), into the scope and onto the response's headers,
   with ``X-Content-Type-Options: nosniff`` (no browser may guess a type the gateway did not send:
   a JSON error echoing input must never run as HTML), and the caller's ``x-ratelimit-*`` headers
   when the answer has none (:mod:`gateway.http.rate_headers`);
3. the drain (:mod:`gateway.http.drain`): 503 ``draining`` while the gateway shuts down, else the
   request counts as in flight until its last byte;
4. the app;
5. HTTP metrics (:mod:`gateway.http.http_metrics`) and the access line (:mod:`gateway.http.access_log`)
   once the app has returned: the status is the one the response started with (a client that left
   before its answer is a 499), 500 for a request that raised before any response (the status
   Starlette's error middleware, outside this one, answers it with).

Pure ASGI (no ``BaseHTTPMiddleware``: it would buffer streams and break disconnect handling). Refusals
are rendered by ``render`` (the app's error rendering, in the route's dialect).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import GatewayError
from gateway.http.access_log import log_access
from gateway.http.drain import EXEMPT_PATHS, Drain, draining_error
from gateway.http.headers import check_headers
from gateway.http.http_metrics import HttpMetrics
from gateway.http.request_id import HEADER, client_request_id, new_request_id

NOSNIFF = (b"x-content-type-options", b"nosniff")
#: Renders a refusal for the request at a path.
Render = Callable[[GatewayError, str], Response]
#: The ``x-ratelimit-*`` headers an answer lacks (:func:`gateway.http.rate_headers.rate_headers`).
LimitHeaders = Callable[[Scope, list[tuple[bytes, bytes]]], Awaitable[list[tuple[bytes, bytes]]]]


class EdgeMiddleware:
    """Header guard, request id, drain, HTTP metrics and access log (see the module doc)."""

    def __init__(
        self,
        app: ASGIApp,
        drain: Drain,
        metrics: HttpMetrics,
        render: Render,
        limit_headers: LimitHeaders | None = None,
    ) -> None:
        self.app = app
        self.drain = drain
        self.metrics = metrics
        self.render = render
        self.limit_headers = limit_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        rid = new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"], state["client_request_id"] = rid, client_request_id(scope["headers"])
        added = [(HEADER, rid.encode()), NOSNIFF]
        status = 0

        async def edge_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                present = message.get("headers", [])
                limits = await self.limit_headers(scope, present) if self.limit_headers else []
                message["headers"] = [*present, *added, *limits]
            await send(message)

        refusal = check_headers(scope)
        if refusal is None and self.drain.draining and scope["path"] not in EXEMPT_PATHS:
            refusal = draining_error()
        try:
            if refusal is not None:
                await self.render(refusal, scope["path"])(scope, receive, edge_send)
            elif scope["path"] in EXEMPT_PATHS:
                await self.app(scope, receive, edge_send)
            else:
                with self.drain.track():
                    await self.app(scope, receive, edge_send)
        except Exception:
            status = status or 500
            raise
        finally:
            if status:
                self.metrics.observe(scope, status, time.perf_counter() - started)
                log_access(scope, status)
