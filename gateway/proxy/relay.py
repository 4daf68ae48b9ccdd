"""Streaming relay: upstream SSE events to the client as they arrive.

Events go through a rewriter as soon as each is complete (unchanged ones byte for byte); what one
upstream read completes goes to the client in one write. A stream must end with ``data: [DONE]``; if
upstream breaks or ends without it, the client gets one OpenAI-shaped ``data: {"error": ...}`` event
and the stream ends — never a silent clean end that looks complete.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.proxy.rewrite import MalformedChunkError
from gateway.proxy.sse import DONE, MAX_EVENT_BYTES, EventTooLargeError, SSEDecoder, event_data
from gateway.proxy.upstream import UpstreamResponse

#: Headers of every relayed stream. ``X-Accel-Buffering: no`` keeps nginx-style proxies from buffering.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

#: The SSE comment sent after ``GATEWAY_KEEP_ALIVE_S`` seconds without a byte to the client.
KEEP_ALIVE = b": keep-alive\n\n"

#: One whole upstream SSE event and its ``data`` payload (None if it has none) in, the events to send
#: the client out (see ``StreamRewriter.step``).
Rewrite = Callable[[bytes, bytes | None], list[bytes]]


def _broken(detail: str) -> GatewayError:
    return GatewayError(502, f"The model server stream broke: {detail}", code="upstream_stream_error")


@dataclass(slots=True)
class RelayOutcome:
    """How the relay ended: ``done`` once ``[DONE]`` went to the client (a client may hang up right after
    it: that is a complete response); ``error`` is the error sent instead of ``[DONE]``, if any."""

    done: bool = False
    error: GatewayError | None = None


async def relay_events(
    response: UpstreamResponse,
    rewrite: Rewrite,
    outcome: RelayOutcome,
    max_event_bytes: int = MAX_EVENT_BYTES,
    on_done: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """Yield the upstream's SSE events through ``rewrite``, the events one upstream read completes
    joined in one item (one write to the client, not one per event: at saturation a read holds
    several). On a broken or truncated stream, end with an error event (recorded in ``outcome``): 504
    ``upstream_timeout`` when the read timeout ran out, else 502 ``upstream_stream_error`` (reset,
    malformed chunk, an event over ``max_event_bytes``, or an end without ``[DONE]``); events before
    the failure are still sent. ``on_done`` is awaited when ``[DONE]`` arrives (the upstream has
    finished the sequence), before it is relayed."""
    decoder = SSEDecoder(max_event_bytes)
    ready: list[bytes] = []
    try:
        async for chunk in response.chunks():
            for event in decoder.feed(chunk):
                data = event_data(event)
                if data == DONE:
                    outcome.done = True  # set before the yield: a client may hang up as soon as it has it
                    if on_done is not None:
                        await on_done()
                ready += rewrite(event, data)
            if ready:
                out = ready[0] if len(ready) == 1 else b"".join(ready)
                ready.clear()
                yield out
    except GatewayError as exc:  # the upstream timed out or broke (see UpstreamResponse.chunks)
        outcome.error = exc
    except MalformedChunkError as exc:
        outcome.error = _broken(f"malformed chunk ({exc})")
    except EventTooLargeError as exc:
        outcome.error = _broken(str(exc))
    else:
        if not outcome.done:
            outcome.error = _broken("ended without [DONE]")
    if outcome.error is not None:
        yield b"".join(ready) + outcome.error.sse_event()
