"""The gateway's HTTP/1.1 server protocol: uvicorn's httptools protocol (``uvicorn.Config(http=...)``)
with two changes, for every server ``gateway.serve`` runs:

- no access line of its own: uvicorn writes it at the response *start* and with the query string;
  :class:`~gateway.access_log.AccessLogMiddleware` writes ours at the end, without it.
- an ASGI extension, :data:`DIRECT_BODY` in ``scope["extensions"]``: a :class:`DirectBody` through
  which a streaming response writes body parts from a plain callback. A relayed chunk through
  ASGI ``send`` costs a task switch and five nested ``send`` wrappers (Starlette's error
  middleware, the access-log, request-id and Prometheus middlewares, the response) before uvicorn
  frames it; the stream relay writes from aiohttp's parser callback instead
  (:func:`gateway.proxy.relay.push_events`). Extensions are how ASGI servers offer what the
  specification does not (``http.response.pathsend``, ``http.response.zerocopysend``); an app under
  another server finds none and uses ``send``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

#: The scope extension under which :class:`GatewayHttpProtocol` offers a request's :class:`DirectBody`.
DIRECT_BODY = "dspark.direct_body"


class DirectBody:
    """Write a started, chunked response's body without ASGI ``send`` (same framing as uvicorn's:
    one HTTP chunk per :meth:`write`).

    Only between the ``http.response.start`` message and the last ``http.response.body`` message
    (which still goes through ``send``, so the middlewares see the response end), and only for a
    response with neither ``Content-Length`` nor ``HEAD`` (:attr:`usable`). Flow control is the
    caller's: stop writing while :attr:`paused` and ``await`` :meth:`drain`, as uvicorn's ``send``
    does itself. :attr:`last_write` is the loop time (s) of the last write, for keep-alive timing.
    """

    __slots__ = ("_clock", "_cycle", "last_write")

    def __init__(self, cycle: RequestResponseCycle, clock: Callable[[], float]) -> None:
        self._cycle = cycle
        self._clock = clock
        self.last_write = 0.0

    @property
    def usable(self) -> bool:
        """True once the response has started chunked and while it has not ended."""
        cycle = self._cycle
        return bool(cycle.response_started and cycle.chunked_encoding and not cycle.response_complete)

    @property
    def paused(self) -> bool:
        """True while the client's transport buffer is over its high-water mark (and it is connected)."""
        return self._cycle.flow.write_paused and not self._cycle.disconnected

    def write(self, data: bytes) -> None:
        """Send ``data`` as one HTTP chunk; nothing if it is empty (an empty chunk would end the body),
        the client has gone or the response has ended."""
        cycle = self._cycle
        if data and not cycle.disconnected and not cycle.response_complete:
            cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            self.last_write = self._clock()

    async def drain(self) -> None:
        """Return once the client's transport takes writes again (or the client has gone)."""
        await self._cycle.flow.drain()


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol without its access line, offering :class:`DirectBody`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False  # read by each request cycle this connection starts

    def on_headers_complete(self) -> None:
        """uvicorn's, then the new request cycle's :class:`DirectBody` into its scope."""
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not None and self.cycle is not cycle:  # None: an upgrade request
            body = DirectBody(self.cycle, asyncio.get_running_loop().time)
            extensions: dict[str, Any] = self.scope.setdefault("extensions", {})  # type: ignore[assignment]
            extensions[DIRECT_BODY] = body
