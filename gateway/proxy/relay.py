"""Streaming relay: upstream SSE events to the client as they arrive, and the response that owns them.

Events are forwarded byte for byte as soon as each is complete. A stream must end with
``data: [DONE]``; if upstream breaks or ends without it, the client gets one OpenAI-shaped
``data: {"error": ...}`` event and the stream ends — never a silent clean end that looks complete.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import httpx
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.errors import GatewayError
from gateway.proxy.sse import DONE, SSEDecoder, event_data

#: Headers of every relayed stream. ``X-Accel-Buffering: no`` keeps nginx-style proxies from buffering.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _broken(detail: str) -> GatewayError:
    return GatewayError(502, f"The model server stream broke: {detail}", code="upstream_stream_error")


async def relay_events(response: httpx.Response) -> AsyncIterator[bytes]:
    """Yield the upstream's SSE events unchanged; on a broken or truncated stream, yield an error event."""
    decoder = SSEDecoder()
    done = False
    try:
        async for chunk in response.aiter_raw():
            for event in decoder.feed(chunk):
                if event_data(event) == DONE:
                    done = True
                yield event
    except httpx.HTTPError as exc:
        yield _broken(type(exc).__name__).sse_event()
        return
    if not done:
        yield _broken("ended without [DONE]").sse_event()


class RelayResponse(StreamingResponse):
    """A ``text/event-stream`` response that runs ``on_close`` exactly once, however it ends.

    ``on_close`` (close the upstream response so vLLM aborts, release the slot) runs in a shielded
    scope after the stream finishes, fails, or is cancelled by a client disconnect — including a
    disconnect before the first byte, when the body iterator never started.
    """

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=STREAM_HEADERS)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._on_close()
