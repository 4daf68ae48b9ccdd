"""One request's life after it was parsed: admit, open upstream, relay or buffer, record — once.

:class:`Exchange` owns the request's slot lease, rate-limit ticket, upstream response and telemetry
recorder, and :meth:`Exchange.close` gives them all back exactly once, whatever path the request leaves
by. Three paths:

- non-stream: admit and open (cancelled if the client leaves), read the body, answer;
- stream admitted at once: admit and open before any byte, so a down upstream is still a 503;
- stream that has to queue: answer 200 at once and send ``: queued N`` SSE comments while it waits
  (so idle-timeout proxies don't cut it and the client sees its place), then relay; a failure after
  that point is an SSE error event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.responses import Response, StreamingResponse

from gateway import json_codec
from gateway.admission import Lease, Waiter
from gateway.asgi import ClosingStreamingResponse
from gateway.errors import GatewayError
from gateway.http_protocol import DirectBody
from gateway.limits import Ticket
from gateway.proxy.client_view import ClientView
from gateway.proxy.relay import (
    KEEP_ALIVE,
    STREAM_HEADERS,
    RelayOutcome,
    let_waiter_send,
    push_events,
    relay_events,
)
from gateway.proxy.rewrite import MalformedChunkError, StreamRewriter, rewrite_body
from gateway.proxy.upstream import UpstreamResponse
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.spec import COUNTERS

if TYPE_CHECKING:
    from gateway.proxy.forward import Forwarder, Prepared

#: Seconds between ``: queued N`` comments to a waiting stream.
QUEUE_COMMENT_INTERVAL_S = 5.0


@dataclass(slots=True)
class Exchange:
    """One request in flight. Build it, then call :meth:`respond`."""

    forwarder: Forwarder
    path: str
    prepared: Prepared
    recorder: RequestRecorder
    ticket: Ticket
    view: ClientView
    stream: bool
    direct: DirectBody | None = None  # the server's direct body writes, if it offers them
    lease: Lease | None = None
    upstream: UpstreamResponse | None = None
    _before: dict[str, float] | None = None
    _closed: bool = False
    _recording: asyncio.Task[None] | None = None

    async def admit_and_open(self, entry: Lease | Waiter) -> None:
        """Wait for the slot (if queued), then send the request upstream (:meth:`close` releases both)."""
        self.lease = entry if isinstance(entry, Lease) else await self.forwarder.admission.wait(entry)
        self.recorder.admitted(self.lease.queue_wait_s)
        if self.forwarder.wants_counters():  # one loopback scrape (ms) before the request decodes
            self._before = await self.forwarder.monitor.scrape(COUNTERS, timeout_s=1.0)
        self.upstream = await self.forwarder.upstream.open(
            "POST", self.path, self.prepared.body, {"x-request-id": self.recorder.record.request_id}
        )

    def stream_response(self, events: AsyncIterator[bytes], outcome: RelayOutcome) -> StreamingResponse:
        """The client's event stream; its end (any end) closes the exchange."""

        async def on_close(client_gone: bool) -> None:
            gone = client_gone and not outcome.done
            status = outcome.error.status if outcome.error is not None else (499 if gone else 200)
            await self.close(status, gone)

        return ClosingStreamingResponse(
            events,
            on_close=on_close,
            keep_alive=(self.forwarder.settings.keep_alive_s, KEEP_ALIVE),
            media_type="text/event-stream",
            headers={**STREAM_HEADERS, **self.ticket.headers},
        )

    async def relay(self, outcome: RelayOutcome) -> AsyncIterator[bytes]:
        """Upstream events through the rewriter (reasoning split, client view, telemetry): pushed to the
        client from the upstream's parser callback when the server offers direct body writes
        (:func:`push_events`), else pulled through ASGI ``send`` (:func:`relay_events`); the same
        bytes either way. Iterate it once the response has started.

        One event may be at most twice ``max_body_bytes``: it can echo the whole prompt (``echo``).
        """
        assert self.upstream is not None
        rewriter = StreamRewriter(
            self.prepared.policy, self.forwarder.traits, self.view, self.recorder.observe_chunk
        )
        limit = 2 * self.forwarder.settings.max_body_bytes
        if self.direct is not None and self.direct.usable:
            events = push_events(
                self.upstream, rewriter.step, outcome, self.direct, limit, self.release_early
            )
        else:
            events = relay_events(self.upstream, rewriter.step, outcome, limit, self.release_early)
        async for event in events:
            yield event

    def release_early(self) -> bool:
        """Hand the slot on as soon as the upstream has finished the sequence (its ``[DONE]``, or the
        whole non-stream body read): the backend already runs the next one while this response is
        rewritten and sent. :meth:`close` releases it anyway, once. Not while a spec-counter delta is
        being taken (``GATEWAY_SPEC_COUNTERS``): the next sequence's steps would count as this one's.

        Returns True when the release granted the slot to a waiting request: the caller then lets it
        send (:func:`~gateway.proxy.relay.let_waiter_send`) before rewriting and sending its own
        answer (the queue benchmark's idle gap p50 went 1.33 -> 0.9 ms with that, and the shield in
        ``Admission.wait`` gone: ``wait`` resumes on the grant itself).
        """
        if self.lease is not None and self._before is None and not self.lease.released:
            return self.lease.release()
        return False

    async def queued_events(self, waiter: Waiter, outcome: RelayOutcome) -> AsyncIterator[bytes]:
        """For a stream that must wait: ``: queued N`` comments, then the relay; failures as SSE errors."""
        admission = self.forwarder.admission
        opening = asyncio.ensure_future(self.admit_and_open(waiter))
        try:
            while not opening.done():
                yield f": queued {admission.position(waiter)}\n\n".encode()
                await asyncio.wait({opening}, timeout=QUEUE_COMMENT_INTERVAL_S)
            opening.result()
        except GatewayError as error:
            outcome.error = error
            yield error.sse_event()
            return
        finally:
            if not opening.done():
                opening.cancel()
                with contextlib.suppress(BaseException):
                    await opening
        async for event in self.relay(outcome):
            yield event

    async def answer(self, entry: Lease | Waiter) -> Response:
        """Non-stream: admit and open, then the whole upstream body, rewritten, with telemetry recorded
        (the caller watches for a disconnect once around all of it)."""
        await self.admit_and_open(entry)
        assert self.upstream is not None
        content = await self.upstream.read()
        if self.release_early():
            await let_waiter_send()
        status = self.upstream.status
        try:
            body = json_codec.loads(content)
            if not isinstance(body, dict):
                raise MalformedChunkError("the response is not a JSON object")
            reasoning_chars, content_chars = rewrite_body(body, self.prepared.policy, self.forwarder.traits)
        except ValueError as exc:  # not JSON, or not OpenAI-shaped (MalformedChunkError)
            raise GatewayError(
                502, f"The model server sent a malformed response: {exc}", code="upstream_error"
            ) from exc
        self.recorder.observe_body(body, reasoning_chars, content_chars)
        await self.close(status, client_gone=False)
        self.view.apply_body(body)  # after close: the telemetry object is complete
        return Response(
            json_codec.dumps(body),
            status_code=status,
            media_type="application/json",
            headers=self.ticket.headers,
        )

    async def _counters(self) -> tuple[dict[str, float], dict[str, float], bool] | None:
        if self._before is None or self.lease is None:
            return None
        after = await self.forwarder.monitor.scrape(COUNTERS, timeout_s=1.0)
        if after is None:
            return None
        before = {n: self._before[n] for n in COUNTERS if n in self._before}
        return before, {n: after[n] for n in COUNTERS if n in after}, not self.lease.overlapped

    async def close(self, status: int, client_gone: bool) -> None:
        """Release the upstream and the slot now; record in the background (a counter scrape and a
        rate-limit settlement must not delay the answer). Idempotent: only the first call counts."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.upstream is not None:
                self.upstream.close()
        finally:
            if self.lease is not None:
                self.lease.release()
        self._recording = self.forwarder.in_background(self._record(status, client_gone))

    async def recorded(self) -> None:
        """Wait until this exchange's record is published (only this one, not other requests')."""
        if self._recording is not None:
            await asyncio.wait({self._recording})

    async def _record(self, status: int, client_gone: bool) -> None:
        forwarder = self.forwarder
        record = self.recorder.finish(status, client_gone, await self._counters())
        if self.recorder.saw_backend_metrics:
            forwarder.traits.per_request_metrics = True
        forwarder.sinks.publish(record)
        await forwarder.limits.settle(self.ticket, record.prompt_tokens + record.completion_tokens)


def telemetry_fn(recorder: RequestRecorder) -> Callable[[], dict[str, Any]]:
    """The client ``telemetry`` object, built when it is due."""
    return lambda: recorder.snapshot().client_view()
