"""ASGI helpers shared by the gateway and the simulator: client-disconnect handling, in one place.

Two phases, one tool each:

- Before a response exists, uvicorn keeps running a handler whose client has gone. A queued request
  would still take a slot and reach the model. :func:`unless_disconnected` races the work against
  ``http.disconnect`` and cancels it (the idea of vLLM's ``with_cancellation``).
- Once a stream has started, :class:`ClosingStreamingResponse` watches for the disconnect itself:
  Starlette's ``StreamingResponse`` only listens below ASGI spec 2.4 and above that waits for ``send``
  to raise ``OSError``, which uvicorn never does, so a stream whose client left would run to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.http_protocol import DIRECT_BODY, DirectBody

T = TypeVar("T")


class ClientDisconnectedError(Exception):
    """The client closed the connection before it could be answered (logged as 499, nginx's code)."""


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the server reports ``http.disconnect`` (call after the request body is read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()`` in this task; cancel it if the client disconnects meanwhile.

    Returns what ``work`` returns. Raises :class:`ClientDisconnectedError` if the client left first:
    ``work`` saw ``CancelledError`` and must have released what it took. Cancellation from elsewhere
    (server shutdown) propagates unchanged.
    """
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        await wait_for_disconnect(receive)
        gone = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await work()
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:
            raise ClientDisconnectedError from None
        raise
    finally:
        watcher.cancel()


class ClosingStreamingResponse(StreamingResponse):
    """A ``StreamingResponse`` that stops on client disconnect whatever the ASGI spec version, keeps an
    idle stream alive, and cleans up exactly once however it ends.

    ``keep_alive``: ``(seconds, bytes)``: once the response has started, ``bytes`` (an SSE comment) is
    sent whenever that many seconds pass without a byte to the client — a long prefill (a 1M-token
    prompt takes ~18 minutes before its first token) would otherwise be cut by idle-timeout proxies.
    A watchdog task does it, so a relayed chunk costs one clock read, not a timer. Bytes the body
    wrote past ``send`` (:class:`~gateway.http_protocol.DirectBody`) count too.

    On exit (stream finished, failed, or client gone — even before the first byte, when the body
    iterator never started) it closes the body iterator and then awaits ``on_close(client_gone)``,
    both shielded from cancellation.
    """

    def __init__(
        self,
        content: Any,
        *,
        on_close: Callable[[bool], Awaitable[None]] | None = None,
        keep_alive: tuple[float, bytes] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close
        self._keep_alive = keep_alive
        self._send_lock = asyncio.Lock()  # a keep-alive never lands inside or after the last message
        self._open = False  # between the start message and the last body message
        self._last_sent = 0.0  # loop time of the last message, s
        self._direct: DirectBody | None = None
        self.client_gone = False

    async def stream_response(self, send: Send) -> None:
        """Start, relay every body chunk, end; each message under the send lock."""
        loop = asyncio.get_running_loop()
        async with self._send_lock:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            self._open, self._last_sent = True, loop.time()
        async for chunk in self.body_iterator:
            if not isinstance(chunk, bytes | memoryview):
                chunk = chunk.encode(self.charset)
            async with self._send_lock:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self._last_sent = loop.time()
        async with self._send_lock:
            self._open = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _last_byte(self) -> float:
        direct = self._direct
        return self._last_sent if direct is None else max(self._last_sent, direct.last_write)

    async def _send_keep_alive(self, send: Send, every_s: float, comment: bytes) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(
                max(0.0, self._last_byte() + every_s - loop.time()) if self._open else every_s
            )
            async with self._send_lock:
                if self._open and loop.time() - self._last_byte() >= every_s:
                    await send({"type": "http.response.body", "body": comment, "more_body": True})
                    self._last_sent = loop.time()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream in this task at once (no task group: its set-up and the hop to a child task held the
        first byte ~0.17 ms at one stream), racing ``http.disconnect`` (:func:`unless_disconnected`);
        the keep-alive watchdog is a task beside it."""
        self._direct = scope.get("extensions", {}).get(DIRECT_BODY)
        keep_alive = None
        if self._keep_alive is not None:
            keep_alive = asyncio.create_task(self._send_keep_alive(send, *self._keep_alive))
        try:
            await unless_disconnected(receive, lambda: self.stream_response(send))
        except ClientDisconnectedError:
            self.client_gone = True
        finally:
            if keep_alive is not None:
                keep_alive.cancel()
            with anyio.CancelScope(shield=True):
                close = getattr(self.body_iterator, "aclose", None)
                if close is not None:
                    await close()
                if self._on_close is not None:
                    await self._on_close(self.client_gone)
        if self.background is not None:
            await self.background()
