"""ASGI helpers shared by the gateway and the simulator: client-disconnect handling, in one place.

uvicorn keeps running a handler whose client has gone, and its ``send`` never raises then: a queued
request would still take a slot and reach the model, a stream would run to its end.
:func:`unless_disconnected` races the work against ``http.disconnect`` and cancels it (the idea of
vLLM's ``with_cancellation``): the gateway's exchanges run under it from the moment their body is
read to their last byte (:mod:`gateway.proxy.respond`). :class:`ClosingStreamingResponse` does the
same for the simulator's streams: Starlette's ``StreamingResponse`` only listens below ASGI spec 2.4
and above that waits for ``send`` to raise ``OSError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.errors import ClientDisconnectedError

T = TypeVar("T")


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
    """A ``StreamingResponse`` that stops on client disconnect whatever the ASGI spec version, and
    cleans up exactly once however it ends: on exit (stream finished, failed, or client gone — even
    before the first byte, when the body iterator never started) it closes the body iterator and then
    awaits ``on_close(client_gone)``, both shielded from cancellation."""

    def __init__(
        self, content: Any, *, on_close: Callable[[bool], Awaitable[None]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close
        self.client_gone = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream in this task, racing ``http.disconnect`` (:func:`unless_disconnected`)."""
        try:
            await unless_disconnected(receive, lambda: self.stream_response(send))
        except ClientDisconnectedError:
            self.client_gone = True
        finally:
            with anyio.CancelScope(shield=True):
                close = getattr(self.body_iterator, "aclose", None)
                if close is not None:
                    await close()
                if self._on_close is not None:
                    await self._on_close(self.client_gone)
        if self.background is not None:
            await self.background()
