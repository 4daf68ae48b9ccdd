"""Streaming relay: upstream SSE events to the client as they arrive.

Events go through the dialect's translator as soon as each is complete (unchanged ones byte for
byte); what one upstream read completes goes to the client in one write. A stream must end with its
API's last event (OpenAI's ``data: [DONE]``, Anthropic's ``message_stop``, the Responses API's
``response.completed``: the translator's ``ends``); if upstream breaks or ends without it, the client
gets one error event in its dialect and the stream ends — never a silent clean end that looks
complete. A sequence whose per-step usage passes the output cap it was sent (an upstream that
ignores it: vLLM honours it) is cut after the event that passed it, with 502
``upstream_overran_cap``: its reservation was made for no more. When the last event arrives, before
it is rewritten, an item with ``sequence_end`` is yielded: the backend has finished the sequence,
and the caller may hand the slot on (and hand the last event's step the client's telemetry object,
:attr:`RelayOutcome.telemetry`).

What the translator saw on the way (its :class:`~gateway.dialects.base.Step` values) goes up with
each item, in order, for the request's owner to record: the relay records nothing itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from typing import Any

from gateway.backends.upstream import UpstreamResponse
from gateway.dialects.base import Step, Translator
from gateway.dialects.sse import MAX_EVENT_BYTES, EventTooLargeError, SSEDecoder
from gateway.errors import GatewayError, MalformedResponseError


@dataclass(slots=True)
class Relayed:
    """One item of :func:`relay_events`: ``data`` for the client (b"": none), the translator's
    ``steps`` since the last item (in order), and ``sequence_end``: the backend's
    last event has arrived, not rewritten yet."""

    data: bytes
    steps: list[Step]
    sequence_end: bool = False


def _broken(detail: str) -> GatewayError:
    return GatewayError("upstream_stream_error", f"The model server stream broke: {detail}")


def _overran(tokens: int, cap: int) -> GatewayError:
    message = f"The model server generated {tokens} tokens past the cap of {cap} it was sent; cut there."
    return GatewayError("upstream_overran_cap", message)


def _past(step: Step, cap: int | None) -> int | None:
    """The completion tokens a step's per-step usage counts (of its sequence: vLLM counts each
    choice's own) when they pass ``cap``, else None."""
    seen = step.seen
    if cap is None or seen is None or seen.usage is None or seen.final:
        return None
    tokens = seen.usage.get("completion_tokens")
    return tokens if type(tokens) is int and tokens > cap else None


@dataclass(slots=True)
class RelayOutcome:
    """How the relay ended: ``done`` once the upstream's last event arrived, ``delivered`` once it went
    to the client (a client may hang up right after it: that is a complete response); ``error`` is
    the error sent instead of ``[DONE]``, if any (the stream ended before ``done``: the caller closes
    the upstream). ``telemetry``: the client's telemetry object, given by the caller at the sequence's
    end (when the client asked for it) for the last event's step."""

    done: bool = False
    delivered: bool = False
    error: GatewayError | None = None
    telemetry: dict[str, Any] | None = field(default=None, repr=False)


class EventPipe:
    """Upstream body bytes in, the bytes for the client out: whole SSE events through the
    ``translator``, the events one upstream read completes joined for one write.

    :meth:`feed` yields a ``sequence_end`` item when the last event arrives (the upstream has
    finished the sequence), before it is rewritten. It raises :class:`MalformedResponseError` or
    :class:`EventTooLargeError`; the events completed before the failure stay in :attr:`ready` (they
    go on before the error event), what they saw in :attr:`steps`. An event whose usage passes
    ``cap`` (output tokens a sequence) before the last one sets :attr:`overran` and ends the feeding:
    what came after it is dropped.
    """

    def __init__(
        self, translator: Translator, outcome: RelayOutcome, max_event_bytes: int, cap: int | None = None
    ) -> None:
        self._decoder = SSEDecoder(max_event_bytes)
        self._ends = translator.ends
        self._rewrite = translator.step
        self._outcome = outcome
        self._cap = cap
        self.ready: list[bytes] = []
        self.steps: list[Step] = []
        self.overran: GatewayError | None = None

    def feed(self, data: bytes) -> Iterator[Relayed]:
        """Decode and rewrite ``data`` into :attr:`ready` (and what it saw into :attr:`steps`), yielding
        a ``sequence_end`` item with the steps so far before the last event is rewritten."""
        ready, rewrite, outcome = self.ready, self._rewrite, self._outcome
        for event, payload in self._decoder.feed_payloads(data):
            if self._ends(event, payload):
                outcome.done = True  # the pieces after it are final (StreamBuffer.put)
                steps, self.steps = self.steps, []
                yield Relayed(b"", steps, sequence_end=True)
                step = rewrite(event, payload, outcome.telemetry)
            else:
                step = rewrite(event, payload)
            ready += step.events
            self.steps.append(step)
            if not outcome.done and (tokens := _past(step, self._cap)) is not None:
                assert self._cap is not None
                self.overran = _overran(tokens, self._cap)
                return

    def take(self) -> Relayed:
        """What is ready for the client, in one piece, and what was seen on the way (then empty)."""
        ready = self.ready
        out = ready[0] if len(ready) == 1 else b"".join(ready)
        ready.clear()
        steps, self.steps = self.steps, []
        return Relayed(out, steps)

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
    cap: int | None = None,
) -> AsyncGenerator[Relayed, None]:
    """Yield the upstream's SSE events through the ``translator``, the events one upstream read completes
    joined in one item (one write to the client, not one per event: at saturation a read holds
    several), with what the translator saw of them. A broken or truncated stream ends with its error
    in ``outcome`` (for the caller to send in the client's dialect): 504 ``upstream_timeout`` when the
    read timeout ran out, else 502 ``upstream_stream_error`` (reset, malformed chunk, an event over
    ``max_event_bytes``, or an end before the last event), or 502 ``upstream_overran_cap`` after the
    event whose usage passed ``cap`` (:class:`EventPipe`); events completed before the failure are
    still yielded, and a failure after the last event is none. A ``sequence_end`` item is yielded
    when the last event arrives, before it is rewritten (the caller hands the slot on then). Pure
    asyncio: the caller sends and records what it yields.
    """
    pipe = EventPipe(translator, outcome, max_event_bytes, cap)
    try:
        async for chunk in response.chunks():
            for end in pipe.feed(chunk):
                yield end
            if pipe.overran is not None:
                raise pipe.overran
            if pipe.ready or pipe.steps:
                yield pipe.take()
    except GatewayError as exc:  # the upstream timed out or broke (see UpstreamResponse.chunks)
        outcome.error = exc
    except (MalformedResponseError, EventTooLargeError) as exc:
        outcome.error = pipe.failed(exc)
    else:
        outcome.error = pipe.ended(None)
    if outcome.done:  # the backend finished the answer: what broke after its end is not the client's business
        outcome.error = None
    if pipe.ready or pipe.steps:
        yield pipe.take()
