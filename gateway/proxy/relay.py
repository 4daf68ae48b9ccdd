"""Streaming relay: upstream SSE events to the client as they arrive.

Events go through the dialect's translator as soon as each is complete (unchanged ones byte for
byte); what one upstream read completes goes to the client in one write. A stream must end with its
API's last event (OpenAI's ``data: [DONE]``, Anthropic's ``message_stop``, the Responses API's
``response.completed``: the translator's ``ends``); if upstream breaks or ends without it, the client
gets one error event in its dialect and the stream ends — never a silent clean end that looks
complete. When the last event arrives, before it is rewritten, :data:`SEQUENCE_END` is yielded: the
backend has finished the sequence, and the caller may hand the slot on.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from gateway.backends.upstream import UpstreamResponse
from gateway.dialects.base import Translator
from gateway.dialects.sse import MAX_EVENT_BYTES, EventTooLargeError, SSEDecoder
from gateway.errors import GatewayError, MalformedResponseError


class _End(Enum):
    SEQUENCE_END = "sequence end"


#: Yielded by :func:`relay_events` when the upstream's last event arrives, before it is rewritten.
SEQUENCE_END: Literal[_End.SEQUENCE_END] = _End.SEQUENCE_END
#: What :func:`relay_events` yields: bytes for the client, or :data:`SEQUENCE_END`.
Relayed = bytes | Literal[_End.SEQUENCE_END]


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

    :meth:`feed` yields :data:`SEQUENCE_END` when the last event arrives (the upstream has
    finished the sequence), before it is rewritten. It raises :class:`MalformedResponseError` or
    :class:`EventTooLargeError`; the events completed before the failure stay in :attr:`ready` (they
    go on before the error event).
    """

    def __init__(self, translator: Translator, outcome: RelayOutcome, max_event_bytes: int) -> None:
        self._decoder = SSEDecoder(max_event_bytes)
        self._ends = translator.ends
        self._rewrite = translator.step
        self._outcome = outcome
        self.ready: list[bytes] = []

    def feed(self, data: bytes) -> Iterator[Relayed]:
        """Decode and rewrite ``data`` into :attr:`ready`, yielding :data:`SEQUENCE_END` before the
        last event is rewritten."""
        ready = self.ready
        for event, payload in self._decoder.feed_payloads(data):
            if self._ends(event, payload):
                self._outcome.done = True  # the pieces after it are final (StreamBuffer.put)
                yield SEQUENCE_END
            ready += self._rewrite(event, payload)

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


async def relay_events(
    response: UpstreamResponse,
    translator: Translator,
    outcome: RelayOutcome,
    max_event_bytes: int = MAX_EVENT_BYTES,
) -> AsyncGenerator[Relayed, None]:
    """Yield the upstream's SSE events through the ``translator``, the events one upstream read completes
    joined in one item (one write to the client, not one per event: at saturation a read holds
    several). A broken or truncated stream ends with its error in ``outcome`` (for the caller to send
    in the client's dialect): 504 ``upstream_timeout`` when the read timeout ran out, else 502
    ``upstream_stream_error`` (reset, malformed chunk, an event over ``max_event_bytes``, or an end
    before the last event); events completed before the failure are still yielded, and a failure
    after the last event is none. :data:`SEQUENCE_END` is yielded when the last event arrives, before
    it is rewritten (the caller hands the slot on then). Pure asyncio: the caller sends what it yields.
    """
    pipe = EventPipe(translator, outcome, max_event_bytes)
    try:
        async for chunk in response.chunks():
            for end in pipe.feed(chunk):
                yield end
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
