"""Streaming relay: upstream SSE events to the client as they arrive, and the response that owns them.

Events go through a rewriter as soon as each is complete (unchanged ones byte for byte). A stream
must end with ``data: [DONE]``; if upstream breaks or ends without it, the client gets one OpenAI-shaped
``data: {"error": ...}`` event and the stream ends — never a silent clean end that looks complete.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import httpx2
from starlette.responses import StreamingResponse

from gateway.asgi import ClosingStreamingResponse
from gateway.errors import GatewayError
from gateway.proxy.rewrite import MalformedChunkError
from gateway.proxy.sse import DONE, MAX_EVENT_BYTES, EventTooLargeError, SSEDecoder, event_data
from gateway.proxy.upstream import timed_out

#: Headers of every relayed stream. ``X-Accel-Buffering: no`` keeps nginx-style proxies from buffering.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

#: One whole upstream SSE event in, the events to send the client out (see ``StreamRewriter.step``).
Rewrite = Callable[[bytes], list[bytes]]


def _broken(detail: str) -> GatewayError:
    return GatewayError(502, f"The model server stream broke: {detail}", code="upstream_stream_error")


@dataclass(slots=True)
class RelayOutcome:
    """How the relay ended: ``done`` once ``[DONE]`` went to the client (a client may hang up right after
    it: that is a complete response); ``error`` is the error sent instead of ``[DONE]``, if any."""

    done: bool = False
    error: GatewayError | None = None


KEEP_ALIVE = b": keep-alive\n\n"


async def with_keep_alive(chunks: AsyncIterator[bytes], every_s: float) -> AsyncGenerator[bytes | None, None]:
    """``chunks``, plus a ``None`` each time ``every_s`` seconds pass without one (a long prefill: a
    1M-token prompt takes ~18 minutes before its first token). The pending read is never cancelled."""
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(chunks))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield chunk
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with anyio.CancelScope(shield=True):  # let the read finish cancelling before the response closes
                await asyncio.wait({pending})


async def relay_events(
    response: httpx2.Response,
    rewrite: Rewrite,
    outcome: RelayOutcome,
    keep_alive_s: float = 15.0,
    max_event_bytes: int = MAX_EVENT_BYTES,
) -> AsyncIterator[bytes]:
    """Yield the upstream's SSE events through ``rewrite``; an SSE comment ``: keep-alive`` after every
    ``keep_alive_s`` seconds of upstream silence (so idle-timeout proxies don't cut a long prefill); on a
    broken or truncated stream, end with an error event (recorded in ``outcome``): 504
    ``upstream_timeout`` when the read timeout ran out, else 502 ``upstream_stream_error`` (reset,
    malformed chunk, an event over ``max_event_bytes``, or an end without ``[DONE]``)."""
    decoder = SSEDecoder(max_event_bytes)
    try:
        # aclosing: when the client goes, the pending upstream read is cancelled before the response closes
        async with contextlib.aclosing(with_keep_alive(response.aiter_raw(), keep_alive_s)) as chunks:
            async for chunk in chunks:
                if chunk is None:
                    yield KEEP_ALIVE
                    continue
                for event in decoder.feed(chunk):
                    if event_data(event) == DONE:
                        outcome.done = True  # set before the yield: a client may hang up as soon as it has it
                    for out in rewrite(event):
                        yield out
    except httpx2.TimeoutException as exc:
        outcome.error = timed_out(f"no bytes mid-stream ({type(exc).__name__})")
    except httpx2.HTTPError as exc:
        outcome.error = _broken(type(exc).__name__)
    except MalformedChunkError as exc:
        outcome.error = _broken(f"malformed chunk ({exc})")
    except EventTooLargeError as exc:
        outcome.error = _broken(str(exc))
    else:
        if not outcome.done:
            outcome.error = _broken("ended without [DONE]")
    if outcome.error is not None:
        yield outcome.error.sse_event()


def relay_response(
    response: httpx2.Response,
    rewrite: Rewrite,
    outcome: RelayOutcome,
    on_close: Callable[[bool], Awaitable[None]],
) -> StreamingResponse:
    """The client's ``text/event-stream`` response relaying ``response``; ``on_close(client_gone)`` runs
    exactly once, however the stream ends."""
    return ClosingStreamingResponse(
        relay_events(response, rewrite, outcome),
        on_close=on_close,
        media_type="text/event-stream",
        headers=STREAM_HEADERS,
    )
