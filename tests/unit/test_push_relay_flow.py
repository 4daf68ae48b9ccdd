"""The push relay's flow control and its start (gateway/proxy/relay.py ``push_events``,
gateway/proxy/upstream.py ``UpstreamResponse.tap``), each case found by an adversarial review of the
first version, where it stalled a stream, lost events or left a tap behind.

The relays run against a raw-socket upstream through the real aiohttp client (its C parser); the
client side is :class:`Client`, uvicorn's flow control over the client socket as ``DirectBody``
exposes it (write / paused / drain), so that when the client's buffer drains can be chosen exactly.
tests/unit/test_push_relay.py runs both relays behind a real uvicorn server.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import pytest

from gateway.proxy import upstream as upstream_module
from gateway.proxy.relay import RelayOutcome, push_events, relay_events
from gateway.proxy.upstream import Upstream, UpstreamResponse, build_session
from tests.support.raw_http import chunked, head, read_request, server

pytestmark = pytest.mark.uvloop_too

HEAD = head("200 OK", None, "text/event-stream")
DONE = chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"


async def linger() -> None:
    """Keep the upstream connection open (quietly cancelled at the test's end)."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(30)


def event(n: int, pad: int = 0) -> bytes:
    return b'data: {"n": %d%s}\n\n' % (n, (b', "p": "%s"' % (b"x" * pad)) if pad else b"")


def numbers(body: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb'data: \{"n": (\d+)', body)]


def same(raw: bytes, data: bytes | None) -> list[bytes]:
    return [raw]


class Client:
    """uvicorn's FlowControl over the client socket, as DirectBody exposes it (high-water 64 KiB).

    ``flush``: how the client's socket turns writable again once the buffer went over the mark:
    "same batch" -- its write-ready callback is already queued in this loop iteration (the client's
    ACKs arrived in the same select()/epoll batch as the upstream read, after it), so the event loop
    runs it before the relay task's wake-up; ("later", s) -- it drains that many seconds later.
    """

    HIGH = 64 * 1024

    def __init__(self, flush: object = ("later", 0.01), paused_from_start: bool = False) -> None:
        self.flush = flush
        self.received = bytearray()
        self.buffered = self.HIGH + 1 if paused_from_start else 0
        self.paused = False
        self.pauses = 0
        self.last_write = 0.0
        self._writable = asyncio.Event()
        self._writable.set()

    def write(self, data: bytes) -> None:
        self.received += data
        self.buffered += len(data)
        if self.buffered > self.HIGH and not self.paused:
            self.paused = True  # transport.write -> protocol.pause_writing()
            self.pauses += 1
            self._writable.clear()
            loop = asyncio.get_running_loop()
            if self.flush == "same batch":
                loop.call_soon(self._write_ready)
            else:
                loop.call_later(self.flush[1], self._write_ready)  # type: ignore[index]

    def _write_ready(self) -> None:  # transport._write_ready -> protocol.resume_writing()
        self.buffered = 0
        self.paused = False
        self._writable.set()

    async def drain(self) -> None:
        await self._writable.wait()


async def drive(events: AsyncIterator[bytes], client: Client) -> None:
    async for out in events:  # the error event, if any (what ClosingStreamingResponse would send)
        client.received += out


def steady_upstream(events: int, pad: int, per_write: int, gap_s: float):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for start in range(0, events, per_write):
            part = range(start, min(events, start + per_write))
            writer.write(b"".join(chunked(event(n, pad)) for n in part))
            await writer.drain()
            await asyncio.sleep(gap_s)
        writer.write(DONE)
        await writer.drain()
        await linger()

    return handler


@pytest.mark.parametrize("flush", ["same batch", ("later", 0.01)], ids=["same-batch-flush", "control"])
async def test_a_client_that_drains_before_the_relay_wakes_does_not_stall_the_stream(flush: object) -> None:
    """The sink paused the upstream for a full client buffer, and the buffer drained before the relay
    task woke ("same batch"): the task still resumes the upstream (it remembers the pause, it does
    not re-check the client), so the stream neither stalls nor keeps its slot."""
    async with server(steady_upstream(events=400, pad=1000, per_write=20, gap_s=0.005)) as url:
        session = build_session(2.0, None, 4)  # the default read timeout: None
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            client, outcome = Client(flush), RelayOutcome()
            try:
                await asyncio.wait_for(drive(push_events(response, same, outcome, client), client), 5)  # type: ignore[arg-type]
            except TimeoutError:
                protocol = response._response.connection.protocol  # type: ignore[union-attr]
                pytest.fail(
                    f"stream stalled after {len(numbers(bytes(client.received)))}/400 events, "
                    f"{client.pauses} client pauses; upstream reading paused: {protocol._reading_paused}"
                )
            finally:
                response.close()
        finally:
            await session.close()
    assert numbers(bytes(client.received)) == list(range(400)) and outcome.done and outcome.error is None
    assert not upstream_module._SINKS


async def burst(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + b"".join(chunked(event(n)) for n in range(20000)) + DONE)
    await writer.drain()
    await linger()


@pytest.mark.parametrize("path", ["push", "pull"])
async def test_everything_buffered_before_the_tap_is_relayed(path: str) -> None:
    """A late tap, after the reader had paused itself (over 512 KiB buffered): taking the buffer
    resumes the reader, and what the parser held then lands in the buffer too; all of it is relayed."""
    async with server(burst) as url:
        session = build_session(2.0, None, 4)
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            await asyncio.sleep(0.3)  # the relay starts late: the response start waited for the client
            client, outcome = Client(), RelayOutcome()
            if path == "push":
                events = push_events(response, same, outcome, client)  # type: ignore[arg-type]
            else:
                events = relay_events(response, same, outcome)
            async with asyncio.timeout(5):
                if path == "push":
                    await drive(events, client)
                else:
                    async for out in events:
                        client.received += out
            response.close()
        finally:
            await session.close()
    got = numbers(bytes(client.received))
    missing = sorted(set(range(20000)) - set(got))
    assert not missing, (
        f"{path}: {len(missing)} events lost ({missing[0]}..{missing[-1]}); "
        f"done={outcome.done} error={outcome.error and outcome.error.message}"
    )
    assert outcome.done and outcome.error is None


async def two_parts(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + b"".join(chunked(event(n, 200)) for n in range(200)))  # ~45 KB: no reader pause
    await writer.drain()
    await asyncio.sleep(0.6)
    writer.write(b"".join(chunked(event(n)) for n in range(200, 210)) + DONE)  # the last read
    await writer.drain()
    await linger()


async def test_a_slow_client_at_tap_time_does_not_stall_the_end_of_the_stream() -> None:
    """The bytes buffered before the tap find the client's buffer full: the upstream is not paused
    from outside aiohttp's parser callback (its C parser would keep a pause flag that stalls the
    last read), and the stream reaches [DONE]."""
    async with server(two_parts) as url:
        session = build_session(2.0, None, 4)
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            await asyncio.sleep(0.3)  # the first part is buffered when the relay taps
            client, outcome = Client(("later", 0.05), paused_from_start=True), RelayOutcome()
            try:
                await asyncio.wait_for(drive(push_events(response, same, outcome, client), client), 3)  # type: ignore[arg-type]
            except TimeoutError:
                pytest.fail(f"stream stalled at {len(numbers(bytes(client.received)))}/210 events, no [DONE]")
            finally:
                response.close()
        finally:
            await session.close()
    assert numbers(bytes(client.received)) == list(range(210)) and outcome.done


async def then_reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + b"".join(chunked(event(n, 100)) for n in range(50)))
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.transport.abort()


async def test_a_body_that_broke_before_the_tap_ends_with_the_error_event_and_no_tap_left() -> None:
    """The upstream connection was lost before the tap, with events still buffered, and the client's
    buffer is full: the events, then the error event; nothing raised, no tap left behind."""
    async with server(then_reset) as url:
        session = build_session(2.0, None, 4)
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            await asyncio.sleep(0.4)  # the reset has been seen; 50 events still buffered
            client, outcome = Client(paused_from_start=True), RelayOutcome()
            try:
                await drive(push_events(response, same, outcome, client), client)  # type: ignore[arg-type]
                raised = None
            except Exception as exc:  # noqa: BLE001
                raised = exc
            leaked = dict(upstream_module._SINKS)
            upstream_module._SINKS.clear()  # don't poison other tests
            response.close()
        finally:
            await session.close()
    assert raised is None and not leaked, (
        f"push_events raised {type(raised).__name__}: {raised!r}; _SINKS entries left behind: {len(leaked)}; "
        f"reader class still {type(response._response.content).__name__}"
    )
    assert outcome.error is not None and outcome.error.code == "upstream_stream_error"


@pytest.mark.parametrize("path", ["push", "pull"])
async def test_a_stalled_client_is_not_a_read_timeout(path: str) -> None:
    """A client that stalls longer than ``GATEWAY_UPSTREAM_READ_TIMEOUT_S`` while the upstream is
    paused for it: not a 504 (the read timeout runs only while the upstream is read)."""
    async with server(steady_upstream(events=1500, pad=1000, per_write=100, gap_s=0.0)) as url:
        session = build_session(2.0, 0.5, 4)  # GATEWAY_UPSTREAM_READ_TIMEOUT_S=0.5
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            client, outcome = Client(("later", 1.5)), RelayOutcome()
            async with asyncio.timeout(30):
                if path == "push":
                    await drive(push_events(response, same, outcome, client), client)  # type: ignore[arg-type]
                else:
                    async for out in relay_events(response, same, outcome):
                        client.write(out)
                        if client.paused:
                            await client.drain()
            response.close()
        finally:
            await session.close()
    assert outcome.error is None, f"{path}: {outcome.error.message}"
    assert outcome.done


def paced(gaps_s: list[float]):
    """An upstream that sends one event, then one more after each gap in turn, then [DONE]."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + chunked(event(0)))
        for n, gap_s in enumerate(gaps_s, start=1):
            await writer.drain()
            await asyncio.sleep(gap_s)
            writer.write(chunked(event(n)))
        writer.write(DONE)
        await writer.drain()
        await linger()

    return handler


async def relay(path: str, response: UpstreamResponse, outcome: RelayOutcome, client: Client) -> None:
    if path == "push":
        await drive(push_events(response, same, outcome, client), client)  # type: ignore[arg-type]
    else:
        async for out in relay_events(response, same, outcome):
            client.write(out)


@pytest.mark.parametrize("path", ["push", "pull"])
async def test_the_read_timeout_counts_from_the_last_read(path: str) -> None:
    """Reads 0.3 s apart for 2.4 s under a 0.5 s read timeout: no timeout (it runs from the last read,
    not from the start of the stream)."""
    async with server(paced([0.3] * 8)) as url:
        session = build_session(2.0, 0.5, 4)
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            client, outcome = Client(), RelayOutcome()
            async with asyncio.timeout(10):
                await relay(path, response, outcome, client)
            response.close()
        finally:
            await session.close()
    assert outcome.error is None, f"{path}: {outcome.error.message}"
    assert numbers(bytes(client.received)) == list(range(9)) and outcome.done
    assert not upstream_module._SINKS


@pytest.mark.parametrize("path", ["push", "pull"])
async def test_silence_after_some_reads_is_a_read_timeout(path: str) -> None:
    """Two events, then 3 s of silence under a 0.5 s read timeout: the events, then a 504
    ``upstream_timeout`` error event well before the upstream speaks again."""
    async with server(paced([0.1, 3.0])) as url:
        session = build_session(2.0, 0.5, 4)
        try:
            response = await Upstream(url, session).open("POST", "/x", b"{}")
            client, outcome = Client(), RelayOutcome()
            async with asyncio.timeout(2.5):  # the upstream's third event comes at 3.1 s
                await relay(path, response, outcome, client)
            response.close()
        finally:
            await session.close()
    assert numbers(bytes(client.received)) == [0, 1]
    assert outcome.error is not None and outcome.error.code == "upstream_timeout", path
    assert b"upstream_timeout" in bytes(client.received)  # the error event
    assert not upstream_module._SINKS
