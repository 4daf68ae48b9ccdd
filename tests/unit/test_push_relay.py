"""The two stream relays (gateway/proxy/relay.py) side by side, each behind a real uvicorn server with the
gateway's HTTP protocol and in front of a raw-socket upstream: the push relay (upstream parser callback
-> the server's direct body writes) sends exactly the bytes the pull relay (ASGI ``send``) sends, on a
clean stream and on every kind of broken one; both push back on the upstream while the client does
not read; a client that leaves closes the upstream connection and leaves no tap behind."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.asgi import ClosingStreamingResponse
from gateway.http_protocol import DIRECT_BODY, GatewayHttpProtocol
from gateway.proxy import upstream as upstream_module
from gateway.proxy.relay import RelayOutcome, push_events, relay_events
from gateway.proxy.rewrite import MalformedChunkError
from gateway.proxy.upstream import Upstream, build_session
from tests.support.raw_http import Handler, chunked, head, read_request, server

pytestmark = pytest.mark.uvloop_too

PATHS = ("push", "pull")
HEAD = head("200 OK", None, "text/event-stream")


def event(n: int) -> bytes:
    return b'data: {"n": %d}\n\n' % n


def rewrite(raw: bytes, data: bytes | None) -> list[bytes]:
    """Events unchanged, except that a ``"bad"`` payload is malformed (as the gateway's rewriter says)."""
    if data == b'"bad"':
        raise MalformedChunkError("a data line is not a JSON object")
    return [raw]


@contextlib.asynccontextmanager
async def relay(upstream_url: str, path: str) -> AsyncIterator[tuple[str, list[RelayOutcome]]]:
    """uvicorn with :class:`GatewayHttpProtocol` serving an app that relays one upstream stream per request
    by ``path`` ("push" or "pull"); yields (URL, each request's outcome)."""
    session = build_session(2.0, 5.0, 8)
    outcomes: list[RelayOutcome] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await Upstream(upstream_url, session).open("POST", "/v1/chat/completions", b"{}")
        outcome = RelayOutcome()
        outcomes.append(outcome)
        direct = scope["extensions"][DIRECT_BODY]  # the gateway's protocol always offers it

        async def events() -> AsyncIterator[bytes]:
            if path == "push":
                assert direct.usable, "the response has started, chunked"
                source = push_events(response, rewrite, outcome, direct)
            else:
                source = relay_events(response, rewrite, outcome)
            async for out in source:
                yield out

        async def on_close(_: bool) -> None:
            response.close()

        await ClosingStreamingResponse(events(), on_close=on_close, media_type="text/event-stream")(
            scope, receive, send
        )

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_level="warning", http=GatewayHttpProtocol
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110 (uvicorn offers a flag, no event)
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/", outcomes
    finally:
        server.should_exit = True
        await serving
        await session.close()
    assert not upstream_module._SINKS, "a tapped body was left attached"


async def body_through(path: str, handler: Handler) -> tuple[bytes, RelayOutcome]:
    async with (
        server(handler) as url,
        relay(url, path) as (relay_url, outcomes),
        httpx.AsyncClient(timeout=10) as client,
    ):
        response = await client.post(relay_url, content=b"{}")
        assert response.status_code == 200
        return response.content, outcomes[0]


async def clean(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + chunked(event(1)) + chunked(event(2) + event(3)))
    await writer.drain()
    await asyncio.sleep(0.05)  # a second read
    writer.write(chunked(event(4)) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.2)


async def reset_mid_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + chunked(event(1) + event(2)))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.transport.abort()


async def ends_without_done(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + chunked(event(1)) + b"0\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.2)


async def malformed_in_a_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.write(HEAD + chunked(event(1)))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.write(chunked(event(2) + b'data: "bad"\n\n' + event(3)))
    await writer.drain()
    await asyncio.sleep(0.2)


SCENARIOS = {
    "clean": (clean, event(1) + event(2) + event(3) + event(4) + b"data: [DONE]\n\n", None),
    "reset": (reset_mid_stream, event(1) + event(2), "upstream_stream_error"),
    "no [DONE]": (ends_without_done, event(1), "upstream_stream_error"),
    "malformed": (malformed_in_a_read, event(1) + event(2), "upstream_stream_error"),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_push_and_pull_relay_the_same_bytes(scenario: str) -> None:
    """Events before a failure go on, then one error event; [DONE] only on a clean end."""
    handler, events, code = SCENARIOS[scenario]
    bodies = {}
    for path in PATHS:
        body, outcome = await body_through(path, handler)
        bodies[path] = body
        assert outcome.done == (code is None)
        assert (outcome.error.code if outcome.error else None) == code
    assert bodies["push"] == bodies["pull"]
    assert bodies["push"].startswith(events)
    if code is None:
        assert bodies["push"] == events
    else:
        assert bodies["push"][len(events) :].startswith(b'data: {"error": {')
        assert code.encode() in bodies["push"]


@pytest.mark.parametrize("path", PATHS)
async def test_each_event_reaches_the_client_before_the_upstream_sends_the_next(path: str) -> None:
    """The upstream sends its next event only once the client has the last one: a relay that held
    events back until some later read (or the end) would stall this stream."""
    client_has: list[asyncio.Event] = [asyncio.Event() for _ in range(5)]

    async def in_lockstep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD)
        for n, received in enumerate(client_has):
            writer.write(chunked(event(n)))
            await writer.drain()
            await received.wait()
        writer.write(chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)

    got = b""
    async with (
        server(in_lockstep) as url,
        relay(url, path) as (relay_url, _),
        httpx.AsyncClient(timeout=10) as client,
        client.stream("POST", relay_url, content=b"{}") as response,
    ):
        async with asyncio.timeout(5):
            async for part in response.aiter_bytes():
                got += part
                for n, received in enumerate(client_has):
                    if event(n) in got:
                        received.set()
    assert got == b"".join(event(n) for n in range(5)) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("path", PATHS)
async def test_a_client_that_does_not_read_pushes_back_on_the_upstream(path: str) -> None:
    """40 MB of events and a client that reads nothing for a while: the relay stops reading the
    upstream (what is unsent stays in the upstream's buffer, not the gateway's), then relays all of it."""
    events = 100_000
    payload = b"".join(chunked(b'data: {"n": %d, "pad": "%s"}\n\n' % (n, b"x" * 380)) for n in range(events))
    held: list[int] = []

    async def firehose(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD + payload + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await asyncio.sleep(1.0)  # the client reads nothing meanwhile
        held.append(writer.transport.get_write_buffer_size())
        await writer.drain()
        await asyncio.sleep(0.5)

    async with server(firehose) as url, relay(url, path) as (relay_url, outcomes):
        port = int(relay_url.rsplit(":", 1)[1].strip("/"))
        loop = asyncio.get_running_loop()
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            client.settimeout(10)
            received = bytearray()
            await asyncio.sleep(1.2)
            while not received.endswith(b"0\r\n\r\n"):
                part = await loop.run_in_executor(None, client.recv, 1 << 20)
                assert part, "the relay closed before the end"
                received += part
    assert held[0] > 10_000_000, f"only {held[0]} bytes held upstream: the relay kept reading"
    assert received.count(b'data: {"n": ') == events and b"data: [DONE]" in received
    assert outcomes[0].done and outcomes[0].error is None


@pytest.mark.parametrize("path", PATHS)
async def test_a_client_that_leaves_closes_the_upstream_connection(path: str) -> None:
    """The upstream sees its connection end soon after the client hangs up mid-stream."""
    upstream_gone = asyncio.Event()

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(HEAD)
        n = 0
        with contextlib.suppress(ConnectionError):
            while not reader.at_eof():
                writer.write(chunked(event(n)))
                await writer.drain()
                await asyncio.sleep(0.01)
                n += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(1), 0.001)
        upstream_gone.set()

    async with server(endless) as url, relay(url, path) as (relay_url, _):
        async with (
            httpx.AsyncClient(timeout=10) as client,
            client.stream("POST", relay_url, content=b"{}") as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith('data: {"n": 5}'):
                    break
        async with asyncio.timeout(5):
            await upstream_gone.wait()
