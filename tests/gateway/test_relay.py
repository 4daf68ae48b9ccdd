"""The stream relay end to end: the gateway (uvicorn in this test's loop, asyncio's and uvloop) in
front of a raw-socket upstream. Unchanged events go through byte for byte and each one as soon as it
arrives; a broken stream ends with the events before the break and one error event; a client that
does not read pushes back on the upstream; a client that leaves closes the upstream connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.in_loop import Served, gateway_in_loop
from tests.support.raw_http import Handler, chunked, head, read_message, server

pytestmark = pytest.mark.uvloop_too

HEAD = head("200 OK", None, "text/event-stream")
CHAT = {"model": "deepseek-v4-flash-0731", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def event(n: int) -> bytes:
    """An event the gateway passes on unchanged (no choices, no usage)."""
    return b'data: {"n": %d}\n\n' % n


def posts_to(handler: Handler) -> Handler:
    """The upstream: ``handler`` answers each POST (its request already read), anything else is a 404."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (message := await read_message(reader)) is not None:
            if message[0].startswith(b"POST "):
                await handler(reader, writer)
                return
            writer.write(head("404 Not Found", 0))
            await writer.drain()

    return serve


@contextlib.asynccontextmanager
async def stack(handler: Handler, tmp_path: Path) -> AsyncIterator[Served]:
    """The gateway in front of the raw upstream ``handler``."""
    async with (
        server(posts_to(handler)) as url,
        gateway_in_loop(url, f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}") as gw,
    ):
        yield gw


async def clean(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + chunked(event(1)) + chunked(event(2) + event(3)))
    await writer.drain()
    await asyncio.sleep(0.05)  # a second read
    writer.write(chunked(event(4)) + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.2)


async def reset_mid_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + chunked(event(1) + event(2)))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.transport.abort()


async def ends_without_done(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + chunked(event(1)) + b"0\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.2)


async def malformed_in_a_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
async def test_unchanged_events_byte_for_byte_then_done_or_one_error_event(
    scenario: str, tmp_path: Path
) -> None:
    """Events before a failure go on, then one OpenAI error event; [DONE] only on a clean end."""
    handler, events, code = SCENARIOS[scenario]
    async with stack(handler, tmp_path) as gateway, httpx.AsyncClient(timeout=10) as client:
        response = await client.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=gateway.auth)
    assert response.status_code == 200
    body = response.content
    assert body.startswith(events)
    if code is None:
        assert body == events
    else:
        assert body[len(events) :].startswith(b'data: {"error":{') and code.encode() in body
        assert body.count(b"\n\ndata: ") == events.count(b"\n\ndata: ") + 1 and b"data: [DONE]" not in body


async def test_each_event_reaches_the_client_before_the_upstream_sends_the_next(tmp_path: Path) -> None:
    """The upstream sends its next event only once the client has the last one: a relay that held
    events back until some later read (or the end) would stall this stream."""
    client_has: list[asyncio.Event] = [asyncio.Event() for _ in range(5)]

    async def in_lockstep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
        stack(in_lockstep, tmp_path) as gateway,
        httpx.AsyncClient(timeout=10) as client,
        client.stream(
            "POST", gateway.url + "/v1/chat/completions", json=CHAT, headers=gateway.auth
        ) as response,
    ):
        async with asyncio.timeout(5):
            async for part in response.aiter_bytes():
                got += part
                for n, received in enumerate(client_has):
                    if event(n) in got:
                        received.set()
    assert got == b"".join(event(n) for n in range(5)) + b"data: [DONE]\n\n"


async def test_a_client_that_does_not_read_pushes_back_on_the_upstream(tmp_path: Path) -> None:
    """40 MB of events and a client that reads nothing for a while: the gateway stops reading the
    upstream (what is unsent stays in the upstream's buffer, not the gateway's), then relays all of it."""
    events = 100_000
    payload = b"".join(chunked(b'data: {"n": %d, "pad": "%s"}\n\n' % (n, b"x" * 380)) for n in range(events))
    held: list[int] = []

    async def firehose(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + payload + chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await asyncio.sleep(1.0)  # the client reads nothing meanwhile
        held.append(writer.transport.get_write_buffer_size())
        await writer.drain()
        await asyncio.sleep(0.5)

    async with stack(firehose, tmp_path) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        body = httpx.Request("POST", "/", json=CHAT).content
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"authorization: Bearer %s\r\ncontent-length: %d\r\n\r\n%s"
                % (gateway.key.encode(), len(body), body)
            )
            client.settimeout(10)
            received = bytearray()
            await asyncio.sleep(1.2)
            while not received.endswith(b"0\r\n\r\n"):
                part = await loop.run_in_executor(None, client.recv, 1 << 20)
                assert part, "the gateway closed before the end"
                received += part
    assert held[0] > 10_000_000, f"only {held[0]} bytes held upstream: the gateway kept reading"
    assert received.count(b'data: {"n": ') == events and b"data: [DONE]" in received


async def test_a_client_that_leaves_closes_the_upstream_connection(tmp_path: Path) -> None:
    """The upstream sees its connection end soon after the client hangs up mid-stream, and the slot
    is free again."""
    upstream_gone = asyncio.Event()

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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

    async with stack(endless, tmp_path) as gateway:
        async with (
            httpx.AsyncClient(timeout=10) as client,
            client.stream(
                "POST", gateway.url + "/v1/chat/completions", json=CHAT, headers=gateway.auth
            ) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith('data: {"n": 5}'):
                    break
        async with asyncio.timeout(5):
            await upstream_gone.wait()
            while gateway.app.state.pipeline.backends.in_use:  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.01)
