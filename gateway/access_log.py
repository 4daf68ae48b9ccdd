"""The access log: uvicorn's line (logger ``uvicorn.access``, its format and configuration), written when
the response has ended rather than when it starts, and without the query string.

- When: uvicorn writes its line inside the ``http.response.start`` send, before the status line goes
  out. On a stream that is on the way to the first token: ~0.17 ms per request in a timeline of
  ``POST /v1/chat/completions`` at one stream (docs/performance.md). Written at the end, like nginx
  and Envoy do, the line costs the same CPU and delays nothing a client waits for.
- What: ``<client> - "<method> <path> HTTP/<version>" <status>``, as uvicorn prints it, so log
  configurations and parsers written for uvicorn keep working. The query string is left out: a
  client that puts its key in the URL (``?api_key=``, a habit of some SDKs) must not have it written
  to the log, and nothing the log is for needs it.

``gateway.serve`` runs every server with :class:`~gateway.http_protocol.GatewayHttpProtocol`, uvicorn's
HTTP protocol without its own line (it would carry the query string); :class:`AccessLogMiddleware`
writes ours. ``access_log=False`` in uvicorn's config still silences it (it removes the
``uvicorn.access`` handlers).
"""

from __future__ import annotations

import logging
import urllib.parse

from starlette.types import ASGIApp, Message, Receive, Scope, Send

access_logger = logging.getLogger("uvicorn.access")


class AccessLogMiddleware:
    """Pure ASGI middleware: one ``uvicorn.access`` line per HTTP request, when the app has returned
    (the response sent, the request's clean-up done).

    The status is the one the response started with: a client that left before its answer is a 499
    (``gateway.errors``; uvicorn wrote no line then). A request that raised before any response gets
    500, the status Starlette's error middleware answers it with, outside this one. Responses uvicorn
    makes itself (its 503 over ``limit_concurrency``, a 500 for an app that answered nothing) never
    reach the app and get no line.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except Exception:
            status = status or 500
            raise
        finally:
            if status and access_logger.isEnabledFor(logging.INFO):
                client = scope.get("client")
                access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    f"{client[0]}:{client[1]}" if client else "",
                    scope["method"],
                    urllib.parse.quote(scope["path"]),
                    scope["http_version"],
                    status,
                )
