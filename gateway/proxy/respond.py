"""One inference request, answered: the response a route handler returns runs the whole exchange.

:class:`ExchangeResponse` is the ASGI response of every inference route. Its call enters an
:class:`~gateway.proxy.exchange.Exchange` (which gives everything back on the way out) and goes
through the request's life in order, answering through one :class:`~gateway.proxy.reply.Reply`:

1. count the request against its key's requests per minute (429), read the body (413 past
   ``GATEWAY_MAX_BODY_BYTES``, 408 when it stalls), parse and normalise it in the route's dialect
   (400, 404/403 model);
2. size its prompt (the backend's ``/tokenize`` for a large body; 400 when no KV pool could hold it),
   reserve its tokens per minute (429), then be admitted or take a place in the key's queue (429
   ``queue_full``);
3. non-stream, or a stream admitted at once: wait for the slot and open the upstream before any byte,
   so an upstream error is still a status; a stream that has to wait is answered 200 at once with
   ``: queued N REASON`` comments while it waits (so idle-timeout proxies don't cut it and the client sees
   its place), and a failure after that point is an error event. A backend that can't be reached (a
   restart, an open circuit) holds the request up to ``GATEWAY_UPSTREAM_RESTART_HOLD_S`` (a stream
   started and told ``: queued 0 backend``), then 503;
4. relay the stream (:func:`~gateway.proxy.relay.relay_events`) or answer the whole body.

From the body read on, the work races the client's ``http.disconnect``
(:func:`~dspark_common.asgi.unless_disconnected`): a client that leaves cancels it at once, whatever phase
it is in (queued, waiting for headers, mid-stream), and the exchange's exit aborts the upstream and
frees the slot. Errors are answered in the route's dialect from here only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from dspark_common.asgi import ClientDisconnectedError, unless_disconnected
from gateway.auth.principal import Principal
from gateway.backends.upstream import Unreachable
from gateway.body.json_limits import JsonLimits
from gateway.body.read import body_bounds, read_json
from gateway.dialects.base import Dialect, Prepared
from gateway.errors import (
    ClientTooSlowError,
    GatewayError,
    MalformedResponseError,
    internal_error,
)
from gateway.proxy.asks import Asked
from gateway.proxy.delivery import Delivery
from gateway.proxy.exchange import Exchange
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.relay import Relayed, RelayOutcome, relay_events
from gateway.proxy.reply import Reply
from gateway.proxy.stream_buffer import StreamBuffer

log = logging.getLogger("gateway.errors")
T = TypeVar("T")
#: The shape bounds of an inference body.
INFERENCE = JsonLimits()
#: Seconds between ``: queued N`` comments to a waiting stream.
QUEUE_COMMENT_INTERVAL_S = 5.0


class ExchangeResponse(Response):
    """The response of one inference request in ``dialect`` from ``principal`` (already authenticated)."""

    def __init__(self, pipeline: Pipeline, dialect: Dialect, principal: Principal) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.dialect = dialect
        self.principal = principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        pipeline, settings = self.pipeline, self.pipeline.settings
        reply = Reply(send, self.dialect, settings.keep_alive_s)
        telemetry = request.headers.get("x-gateway-telemetry") == "1"
        request_id = scope["state"]["request_id"]
        try:
            pipeline.sink.check()  # refused unrecorded, as it would be served unrecorded
        except GatewayError as error:
            log.log(error.kind.log_level, "request %s: %d %s", request_id, error.status, error.code)
            await reply.fail(error, [])
            return
        asked = Asked(
            request.headers.get("x-session-affinity"),
            request.headers.get("x-max-wait-s"),
            request.headers.get("x-priority"),
        )
        async with Exchange(
            pipeline,
            self.dialect,
            self.principal,
            request_id,
            scope["state"].get("client_request_id"),
            telemetry,
            request.headers,
            asked,
            scope["state"].get("batch_id"),
        ) as exchange:
            try:
                try:
                    await exchange.billing.count()
                    body, size = await read_json(
                        request, body_bounds(settings, settings.max_body_bytes, INFERENCE)
                    )
                    prepared = await exchange.prepare(body, size)
                    del body  # a waiting request holds its bytes to send, not the parsed tree
                    await unless_disconnected(receive, lambda: _serve(exchange, prepared, reply))
                except MalformedResponseError as exc:
                    message = f"The model server sent a malformed response: {exc}"
                    raise GatewayError("upstream_error", message, status=502) from exc
            except GatewayError as error:
                log.log(error.kind.log_level, "request %s: %d %s", request_id, error.status, error.code)
                exchange.failed(error.status)
                # the key's x-ratelimit-* on a refusal (429) as on an answer
                error.headers = {**await exchange.billing.headers(), **error.headers}
                await _fail(exchange, reply, error)
            except ClientDisconnectedError:
                exchange.left()
                await reply.left()
            except ClientTooSlowError as slow:
                log.warning("request %s: cut: %s", request_id, slow)
                exchange.left(end="client_slow")
            except OSError:  # the server's send failed: the connection is gone, nothing more can be sent
                exchange.left()
            except asyncio.CancelledError:  # a server shutdown: the exchange still gives everything back
                exchange.left()
                raise
            except Exception:
                log.exception("request %s failed", request_id)
                exchange.failed(500)
                await _fail(exchange, reply, internal_error())
            finally:
                reply.stop_keep_alive()


async def _fail(exchange: Exchange, reply: Reply, error: GatewayError) -> None:
    """``error`` answered in the dialect: a status and JSON body before the stream started, else the
    translator's closing events (:meth:`~gateway.proxy.exchange.Exchange.closing`)."""
    await reply.fail(error, exchange.closing(error) if reply.streaming else [])


async def _serve(exchange: Exchange, prepared: Prepared, reply: Reply) -> None:
    """The prompt's size and the tokens' reservation, then steps 2 to 4 of the module doc; tells the
    exchange how it ended (a failure raises)."""
    placement = exchange.placement
    await exchange.measure(prepared)
    headers = await exchange.reserve(prepared)
    admitted = await exchange.enqueue()
    if not prepared.stream:
        if not admitted:
            await placement.wait()
        upstream, body = await placement.answer(prepared)
        await placement.upstream_done()  # the slot handed on before the answer is rewritten
        answer = exchange.answer(prepared.translator.answer(body), upstream.status)
        await reply.json(upstream.status, answer, headers)
        return
    if not admitted:
        await reply.start_stream(headers)
        await _commented(reply, placement.wait(), placement.position)
    try:
        await placement.open(prepared)
    except Unreachable:  # down, perhaps restarting: held, the stream told so meanwhile
        if not exchange.pipeline.settings.upstream_restart_hold_s:
            raise
        if not reply.streaming:
            await reply.start_stream(headers)
        await _commented(reply, placement.open_when_back(prepared), _held)
    if not reply.streaming:
        await reply.start_stream(headers)
    while not await placement.first_output():  # its prefill preempted: queued again, its place kept
        if not await placement.rejoin():
            await _commented(reply, placement.wait(), placement.position)
        await placement.open(prepared)
    await _relay(exchange, prepared, reply)


def _held() -> tuple[int, str]:
    """What a stream held for its backend's restart is told: ``: queued 0 backend``."""
    return 0, "backend"


async def _commented(reply: Reply, work: Awaitable[T], place: Callable[[], tuple[int, str]]) -> T:
    """Run ``work``, sending ``: queued N REASON`` (``place()``: its place and what it waits for:
    ``slot``, ``kv``, ``lane``, ..., ``backend`` while held for a restart) now and every
    :data:`QUEUE_COMMENT_INTERVAL_S` seconds it has not finished. Cancelled with the stream (a place
    in the queue given up: ``Admission.wait``; the exchange's exit makes sure)."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            number, reason = place()
            await reply.events(b": queued %d %s\n\n" % (number, reason.encode()))
            await asyncio.wait({task}, timeout=QUEUE_COMMENT_INTERVAL_S)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        elif not task.cancelled():
            task.exception()  # retrieved here too: this task may be leaving for another reason
    return task.result()


async def _relay(exchange: Exchange, prepared: Prepared, reply: Reply) -> None:
    """The upstream's events to the client; a broken stream ends with the dialect's error event. One
    event may be at most twice ``max_body_bytes``: it can echo the whole prompt (``echo``).

    Two tasks: one reads the upstream as fast as the backend produces into the stream's
    :class:`~gateway.proxy.stream_buffer.StreamBuffer` (so the slot is released when the backend
    finishes, whatever the client's pace), one writes what waits there to the client. A client that
    reads nothing for ``GATEWAY_CLIENT_WRITE_TIMEOUT_S`` is cut
    (:class:`~gateway.errors.ClientTooSlowError`): while the upstream runs, when the buffer stays
    full that long; after it, when the writer takes nothing that long (:func:`_written`). The
    exchange's exit aborts the upstream."""
    placement = exchange.placement
    assert placement.upstream is not None
    settings = exchange.pipeline.settings
    outcome = RelayOutcome()
    exchange.streaming()
    events = relay_events(
        placement.upstream, prepared.translator, outcome, 2 * settings.max_body_bytes, prepared.output_budget
    )
    buffer = StreamBuffer(settings.stream_buffer_bytes)
    timeout_s = settings.client_write_timeout_s
    sent = Delivery()
    reading = asyncio.create_task(_read(events, buffer, outcome, timeout_s, exchange, sent))
    writing = asyncio.create_task(_write(buffer, reply, outcome, sent))
    try:
        done, _ = await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # the reader's ClientTooSlowError, the writer's OSError
        await _written(reading, writing, reply, timeout_s)
    finally:
        running = [task for task in (reading, writing) if not task.done()]
        for task in running:
            task.cancel()
        try:  # a client gone now (cancelling this task) must not skip how the stream ended
            await asyncio.gather(*running, return_exceptions=True)
        finally:
            exchange.stream_ended(outcome.delivered, outcome.error, sent)
    if outcome.error is not None:
        await _fail(exchange, reply, outcome.error)
    else:
        await reply.end()


async def _written(
    reading: asyncio.Task[None], writing: asyncio.Task[None], reply: Reply, timeout_s: float
) -> None:
    """Wait for both tasks: the reader's end, then the writer's, as long as the client takes a send
    (:attr:`Reply.sent`, at most :data:`~gateway.proxy.reply.SEND_BYTES` each) at least every
    ``timeout_s`` (:class:`ClientTooSlowError` otherwise: a client that stopped reading with less
    than a full buffer waiting must not hold its connection, its usage row and a graceful shutdown
    until it closes)."""
    await reading
    sent = -1
    while not writing.done():
        if reply.sent == sent:
            raise ClientTooSlowError(timeout_s)
        sent = reply.sent
        await asyncio.wait({writing}, timeout=timeout_s)
    writing.result()


async def _read(
    events: AsyncGenerator[Relayed, None],
    buffer: StreamBuffer,
    outcome: RelayOutcome,
    timeout_s: float,
    exchange: Exchange,
    sent: Delivery,
) -> None:
    """Put the relay's output into ``buffer`` (closed at the end) and record what the translator saw
    on the way (and mark it in ``sent``); when the backend has finished the sequence, hand its last
    event the client's telemetry object and the slot on (at the latest once the upstream has
    ended); :class:`ClientTooSlowError` when there was no room for ``timeout_s``. A relay that ended
    before the sequence's end (broken, or cut past its output cap) closes the upstream first: the
    backend aborts what it still runs before the slot is handed on."""
    placement = exchange.placement
    async with contextlib.aclosing(events):
        async for item in events:
            if item.steps:
                exchange.saw(item.steps)
                sent.saw(item.steps)
            if item.sequence_end:
                outcome.telemetry = exchange.client_telemetry()
                await placement.sequence_ended()
            elif item.data:
                if not await buffer.put(item.data, timeout_s, final=outcome.done):
                    raise ClientTooSlowError(timeout_s, buffer.size)
                sent.put(len(item.data))
    if not outcome.done:
        placement.abort()
    await placement.upstream_done()
    buffer.close()


async def _write(buffer: StreamBuffer, reply: Reply, outcome: RelayOutcome, sent: Delivery) -> None:
    """Send what waits in ``buffer`` until it is closed and empty, each send told to ``sent``;
    ``outcome.delivered`` once the last event has been sent."""
    while (taken := await buffer.take()) is not None:
        data, final = taken
        await reply.events(data)
        sent.sent(len(data))
        outcome.delivered = outcome.delivered or final
