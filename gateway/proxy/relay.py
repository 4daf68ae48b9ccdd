"""Streaming relay: upstream SSE events to the client as they arrive.

Events go through the dialect's translator as soon as each is complete (unchanged ones byte for
byte); what one upstream read completes goes to the client in one write. A stream must end with its
API's last event (OpenAI's ``data: [DONE]``, Anthropic's ``message_stop``, the Responses API's
``response.completed``: the translator's ``ends``); if upstream breaks or ends without it, the client
gets one error event in its dialect and the stream ends — never a silent clean end that looks
complete.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from gateway.dialects.base import Translator
from gateway.dialects.sse import MAX_EVENT_BYTES, EventTooLargeError, SSEDecoder
from gateway.errors import GatewayError, MalformedResponseError
from gateway.proxy.upstream import UpstreamResponse

#: Event-loop steps a releasing request yields so the next one reaches the backend first
#: (:func:`let_waiter_send`). In the first, the granted waiter runs up to aiohttp's body write;
#: aiohttp (``ClientRequest.send``) writes the body in a task of its own, started eagerly on Python
#: 3.12+ (in that same step) but only scheduled on 3.11, where it needs a second step. Timestamps in
#: the gateway joined with the simulator's trace (``queue_scale``, 5,000 clients, Python 3.11): with
#: one step the request went out 0.38 ms (p50) after the waiter resumed, behind the whole rewriting
#: and sending of the answer before it; with two, 0.14 ms, and the slot idle gap p50 1.04 -> 0.85 ms.
HANDOFF_STEPS = 1 if sys.version_info >= (3, 12) else 2


def _broken(detail: str) -> GatewayError:
    return GatewayError("upstream_stream_error", f"The model server stream broke: {detail}")


@dataclass(slots=True)
class RelayOutcome:
    """How the relay ended: ``done`` once the upstream's last event arrived, ``delivered`` once it went
    to the client (a client may hang up right after it: that is a complete response); ``error`` is
    the error sent instead of ``[DONE]``, if any."""

    done: bool = False
    delivered: bool = False
    error: GatewayError | None = None


class EventPipe:
    """Upstream body bytes in, the bytes for the client out: whole SSE events through the
    ``translator``, the events one upstream read completes joined for one write.

    ``release`` is called when the last event arrives (the upstream has finished the sequence),
    before it is rewritten; it returns whether the slot went to a waiting request. :meth:`feed` raises
    :class:`MalformedResponseError` or :class:`EventTooLargeError`; the events completed before the
    failure stay in :attr:`ready` (they go on before the error event).
    """

    def __init__(
        self,
        translator: Translator,
        outcome: RelayOutcome,
        max_event_bytes: int,
        release: Callable[[], bool],
    ) -> None:
        self._decoder = SSEDecoder(max_event_bytes)
        self._ends = translator.ends
        self._rewrite = translator.step
        self._outcome = outcome
        self._release = release
        self.ready: list[bytes] = []

    def feed(self, data: bytes) -> bool:
        """Decode and rewrite ``data``; True if the slot went to a waiting request meanwhile."""
        handed_on = False
        ready = self.ready
        for event, payload in self._decoder.feed_payloads(data):
            if self._ends(event, payload):
                self._outcome.done = True  # the pieces after it are final (StreamBuffer.put)
                handed_on = self._release()
            ready += self._rewrite(event, payload)
        return handed_on

    def take(self) -> bytes:
        """What is ready for the client, in one piece (then empty)."""
        ready = self.ready
        out = ready[0] if len(ready) == 1 else b"".join(ready)
        ready.clear()
        return out

    def failed(self, exc: MalformedResponseError | EventTooLargeError) -> GatewayError:
        """The error event's error for a failure :meth:`feed` raised."""
        if isinstance(exc, MalformedResponseError):
            return _broken(f"malformed chunk ({exc})")
        return _broken(str(exc))

    def ended(self, error: GatewayError | None) -> GatewayError | None:
        """The stream's error when the upstream body ended (``error``: how it broke, else None): an end
        before the last event is one too."""
        if error is None and not self._outcome.done:
            return _broken("ended before its last event")
        return error


async def let_waiter_send() -> None:
    """Yield :data:`HANDOFF_STEPS` loop steps: a request just granted a slot, sending over a pooled
    upstream connection, has written its request when this returns."""
    for _ in range(HANDOFF_STEPS):
        await asyncio.sleep(0)


async def relay_events(
    response: UpstreamResponse,
    translator: Translator,
    outcome: RelayOutcome,
    max_event_bytes: int = MAX_EVENT_BYTES,
    release: Callable[[], bool] = lambda: False,
) -> AsyncGenerator[bytes, None]:
    """Yield the upstream's SSE events through the ``translator``, the events one upstream read completes
    joined in one item (one write to the client, not one per event: at saturation a read holds
    several). A broken or truncated stream ends with its error in ``outcome`` (for the caller to send
    in the client's dialect): 504 ``upstream_timeout`` when the read timeout ran out, else 502
    ``upstream_stream_error`` (reset, malformed chunk, an event over ``max_event_bytes``, or an end
    before the last event); events completed before the failure are still yielded, and a failure
    after the last event is none. ``release`` is called when the last event arrives (see
    :class:`EventPipe`); if a waiting request got the slot, it is let send its request before this
    one's last event goes on. Pure asyncio: the caller sends what it yields.
    """
    pipe = EventPipe(translator, outcome, max_event_bytes, release)
    try:
        async for chunk in response.chunks():
            if pipe.feed(chunk):
                await let_waiter_send()
            if pipe.ready:
                yield pipe.take()
    except GatewayError as exc:  # the upstream timed out or broke (see UpstreamResponse.chunks)
        outcome.error = exc
    except (MalformedResponseError, EventTooLargeError) as exc:
        outcome.error = pipe.failed(exc)
    else:
        outcome.error = pipe.ended(None)
    if outcome.done:  # the backend finished the answer: what broke after its end is not the client's business
        outcome.error = None
    if pipe.ready:
        yield pipe.take()
