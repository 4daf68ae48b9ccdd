"""The client's side of one exchange, over ASGI ``send``: the one place a response is written.

Before anything was sent, a request can still be answered with any status (a JSON answer or an
error in the client's dialect); once an event stream has started, failures become an error event in
that dialect and the stream ends. While a stream is open and nothing else is sent, the dialect's
keep-alive (a ``: keep-alive`` comment; Anthropic's ``ping`` event) goes out every ``keep_alive_s``
seconds (a 1M-token prefill takes ~18 minutes before its first token; idle-timeout proxies would
cut it): a watchdog task beside the stream sends them, so a relayed chunk costs one clock read, not
a timer. Every message goes under one lock, so a keep-alive never lands inside or after the last
message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from starlette.types import Send

from dspark_common import json_codec
from gateway.dialects.base import Dialect
from gateway.errors import GatewayError

#: The most bytes of a stream one ``send`` writes: a slow client shows progress at least this often
#: (:attr:`Reply.sent`; a whole buffer in one send would look stuck for as long as it takes to read).
SEND_BYTES = 64 * 1024
#: Headers of every relayed stream. ``X-Accel-Buffering: no`` keeps nginx-style proxies from buffering.
STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def _headers(
    media_type: str, extra: Mapping[str, str], length: int | None = None
) -> list[tuple[bytes, bytes]]:
    raw = [(b"content-type", media_type.encode())]
    if length is not None:
        raw.append((b"content-length", str(length).encode()))
    raw.extend((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in extra.items())
    return raw


class Reply:
    """Writes one response through ``send``. ``status`` is the status it started with (None before)."""

    __slots__ = (
        "_send",
        "_dialect",
        "_keep_alive_s",
        "_lock",
        "_loop",
        "_last_sent",
        "_watchdog",
        "status",
        "ended",
        "sent",
    )

    def __init__(self, send: Send, dialect: Dialect, keep_alive_s: float) -> None:
        self._send = send
        self._dialect = dialect
        self._keep_alive_s = keep_alive_s
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._last_sent = 0.0  # loop time of the last message, s
        self._watchdog: asyncio.Task[None] | None = None
        self.status: int | None = None
        self.ended = False
        self.sent = 0

    @property
    def streaming(self) -> bool:
        """True once an event stream has started (failures are then error events)."""
        return self._watchdog is not None

    async def json(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        """A whole JSON answer."""
        self.status = status
        start = _headers("application/json", headers, len(body))
        async with self._lock:
            await self._send({"type": "http.response.start", "status": status, "headers": start})
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
            self.ended = True

    async def fail(self, error: GatewayError, closing: list[bytes]) -> None:
        """``error`` in the dialect's shape: its status and JSON body if nothing was sent yet, else the
        ``closing`` events (the translator's error event) that end the stream. Nothing once the
        response has ended."""
        if self.ended:
            return
        if not self.streaming:
            body = json_codec.dumps(self._dialect.error_body(error))
            await self.json(error.status, body, error.headers)
            return
        await self.events(b"".join(closing))
        await self.end()

    async def left(self) -> None:
        """The client has gone: a bare 499 (nginx's code) if nothing was sent yet — nobody reads it, but
        the access log and the HTTP metrics show how the request ended."""
        if self.status is None:
            await self.json(499, b"", {})

    async def start_stream(self, headers: Mapping[str, str]) -> None:
        """Start a 200 event stream (``STREAM_HEADERS`` and ``headers``) and its keep-alive watchdog."""
        self.status = 200
        start = _headers("text/event-stream; charset=utf-8", {**STREAM_HEADERS, **headers})
        async with self._lock:
            await self._send({"type": "http.response.start", "status": 200, "headers": start})
            self._last_sent = self._loop.time()
        self._watchdog = asyncio.create_task(self._keep_alive())

    async def events(self, data: bytes) -> None:
        """Send ``data`` (whole SSE events or comments) on the started stream, in sends of whole events
        of at most :data:`SEND_BYTES` (but for one event larger than that, cut) under one lock (no
        keep-alive lands between two of them); :attr:`sent` counts the sends done, the client's
        progress."""
        async with self._lock:
            start = 0
            while start < len(data):
                end = len(data)
                if end - start > SEND_BYTES:
                    cut = data.rfind(b"\n\n", start, start + SEND_BYTES)
                    end = cut + 2 if cut >= 0 else start + SEND_BYTES
                body = data if start == 0 and end == len(data) else data[start:end]
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
                self._last_sent = self._loop.time()
                self.sent += 1
                start = end

    async def end(self) -> None:
        """End the stream (idempotent)."""
        self.stop_keep_alive()
        async with self._lock:
            if not self.ended:
                self.ended = True
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    def stop_keep_alive(self) -> None:
        """Cancel the watchdog (the stream is over, whichever way)."""
        if self._watchdog is not None:
            self._watchdog.cancel()

    async def _keep_alive(self) -> None:
        every_s, loop, keep_alive = self._keep_alive_s, self._loop, self._dialect.keep_alive
        with contextlib.suppress(OSError):  # the client has gone: the exchange finds out itself
            while True:
                await asyncio.sleep(max(0.0, self._last_sent + every_s - loop.time()))
                async with self._lock:
                    if self.ended:
                        return
                    if loop.time() - self._last_sent >= every_s:
                        await self._send(
                            {"type": "http.response.body", "body": keep_alive, "more_body": True}
                        )
                        self._last_sent = loop.time()
