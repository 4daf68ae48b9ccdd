"""The simulator's streaming response: Starlette's ``StreamingResponse`` only listens for a client's
disconnect below ASGI spec 2.4 and above that waits for ``send`` to raise ``OSError``;
:class:`ClosingStreamingResponse` races ``http.disconnect`` whatever the version
(:func:`dspark_common.asgi.unless_disconnected`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from dspark_common.asgi import ClientDisconnectedError, unless_disconnected


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
