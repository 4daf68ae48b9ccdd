"""The upstream client (gateway/backends/aiohttp_upstream.py) against raw-socket servers on loopback: bytes
read before a failure are passed on, an error body in several segments keeps its message, redirects
are not followed, no cookie comes back, and the relay reports [DONE] as it arrives."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from gateway.admission import Admission
from gateway.backends.aiohttp_upstream import AiohttpUpstream as Upstream
from gateway.backends.aiohttp_upstream import build_session
from gateway.dialects.base import Answer, Step
from gateway.dialects.sse import DONE
from gateway.errors import GatewayError
from gateway.proxy.placement import let_waiter_send
from gateway.proxy.relay import RelayOutcome, relay_events
from gateway.reasoning.policy import ReasoningShown
from gateway.telemetry.observation import Observation
from tests.support.raw_http import chunked, head, read_message, read_request, server

T = TypeVar("T")
VLLM_400 = {
    "error": {
        "message": "This model's maximum context length is 1024 tokens. " + "x" * 200,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


async def test_bytes_read_before_a_broken_end_are_passed_on_then_the_break() -> None:
    """Events arrive, then the upstream closes without the last-chunk marker: what came before the
    break is handed over, then 502 ``upstream_stream_error`` (aiohttp's payload error, mapped)."""
    events = [b'data: {"n": %d}\n\n' % i for i in range(5)]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(head("200 OK", None, "text/event-stream"))
        for event in events:
            writer.write(chunked(event))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.close()  # and no b"0\r\n\r\n"

    async with server(handler) as url:
        session = build_session(1.0, 5.0, 4)
        got = b""
        try:
            response = await Upstream(url, session).open("POST", "/v1/chat/completions", b"{}")
            with pytest.raises(GatewayError) as info:
                async for data in response.chunks():
                    got += data
            response.close()
        finally:
            await session.close()
    assert info.value.status == 502 and info.value.code == "upstream_stream_error"
    assert got == b"".join(events)


async def test_an_error_body_in_two_segments_keeps_the_upstreams_message() -> None:
    body = json.dumps(VLLM_400).encode()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            writer.write(head("400 Bad Request", len(body)) + body[:40])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(body[40:])
            await writer.drain()

    async with server(handler) as url:
        session = build_session(1.0, 5.0, 4)
        try:
            with pytest.raises(GatewayError) as info:
                await Upstream(url, session).open("POST", "/v1/chat/completions", b"{}")
        finally:
            await session.close()
    assert info.value.status == 400 and info.value.message == VLLM_400["error"]["message"]


async def test_a_redirect_is_not_followed() -> None:
    """Following it would send the prompt wherever ``Location`` points."""
    hits: list[bytes | None] = []

    async def elsewhere(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(await read_request(reader))
        writer.write(head("200 OK", 2) + b"{}")
        await writer.drain()

    async with server(elsewhere) as other:

        async def redirecting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await read_request(reader) is not None:
                writer.write(f"HTTP/1.1 307 Temporary Redirect\r\nlocation: {other}/x\r\n".encode())
                writer.write(b"content-length: 0\r\n\r\n")
                await writer.drain()

        async with server(redirecting) as url:
            session = build_session(1.0, 5.0, 4)
            try:
                response = await Upstream(url, session).open("POST", "/x", b'{"prompt": "secret"}')
                response.close()
            finally:
                await session.close()
    assert hits == [] and response.status == 307


async def test_a_cookie_the_upstream_sets_is_never_sent_back() -> None:
    """One pooled session serves every client: a ``Set-Cookie`` in one answer must not ride on the next
    request (any client's). The upstream is named (``localhost``): aiohttp's default jar keeps cookies
    of named hosts and skips only IP addresses."""
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (message := await read_message(reader)) is not None:
            heads.append(message[0].lower())
            writer.write(b"HTTP/1.1 200 OK\r\nset-cookie: session=abc; Path=/\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()

    async with server(handler) as url:
        session = build_session(1.0, 5.0, 4)
        upstream = Upstream(url.replace("127.0.0.1", "localhost"), session)
        try:
            for _ in range(2):
                response = await upstream.open("POST", "/v1/chat/completions", b"{}")
                assert await response.read() == b"{}"
                response.close()
        finally:
            await session.close()
    assert len(heads) == 2 and all(b"\r\ncookie:" not in request_head for request_head in heads)


async def test_the_relay_reports_done_as_soon_as_it_arrives() -> None:
    """The sequence's end (the slot's early release) comes when [DONE] is read, while the upstream still
    holds the response open, and the relay then waits for the response's real end."""
    upstream_closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(head("200 OK", None, "text/event-stream"))
        writer.write(chunked(b'data: {"n": 1}\n\n') + chunked(b"data: [DONE]\n\n"))
        await writer.drain()
        await asyncio.sleep(0.5)
        upstream_closed.set()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    done_while_open: list[bool] = []
    relayed: list[bytes] = []

    async with server(handler) as url:
        session = build_session(1.0, 5.0, 4)
        try:
            response = await Upstream(url, session).open("POST", "/v1/chat/completions", b"{}")
            outcome = RelayOutcome()
            async for out in relay_events(response, PassThrough(), outcome):
                if out.sequence_end:
                    done_while_open.append(not upstream_closed.is_set())
                else:
                    relayed.append(out.data)
            response.close()
        finally:
            await session.close()
    assert done_while_open == [True] and upstream_closed.is_set()
    assert b"".join(relayed) == b'data: {"n": 1}\n\ndata: [DONE]\n\n'
    assert outcome.done and outcome.error is None


class PassThrough:
    """A translator that sends every event on unchanged; the stream ends at ``[DONE]``."""

    def knowing(self, shown: ReasoningShown) -> None:
        return None

    def ends(self, _event: bytes, data: bytes | None) -> bool:
        return data == DONE

    def step(self, event: bytes, _data: bytes | None, telemetry: dict | None = None) -> Step:
        return Step([event])

    def answer(self, body: bytes) -> Answer:
        return Answer(body, Observation())

    def error_event(self, error: GatewayError, telemetry: dict[str, Any] | None = None) -> Step:
        return Step([b"data: " + error.message.encode() + b"\n\n"])


async def test_a_handed_on_slot_has_the_next_request_at_the_backend_when_the_releaser_resumes() -> None:
    """The proxy's early release: when ``let_waiter_send`` returns after a release that granted the
    slot, the request that was waiting for it has written its whole request (headers and body) on
    its pooled upstream connection, so the backend starts it before the releaser rewrites and sends
    its own answer. The backend here is a plain socket outside the event loop: ``select`` sees the
    bytes the moment they are written."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    session = build_session(5.0, 5.0, 4)
    upstream = Upstream(f"http://127.0.0.1:{port}", session)
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    waiting: asyncio.Task[bytes] | None = None

    async def poll(attempt: Callable[[], T]) -> T:
        for _ in range(1000):  # 5 s
            with contextlib.suppress(BlockingIOError):
                return attempt()
            await asyncio.sleep(0.005)
        raise AssertionError("the client did not get this far in 5 s")

    try:
        warm = asyncio.create_task(upstream.open("POST", "/v1/chat/completions", b'{"n":1}'))
        backend, _ = await poll(listener.accept)  # aiohttp connects in the loop
        with backend:
            received = b""
            while not received.endswith(b'{"n":1}'):
                received += await poll(lambda: backend.recv(65536, socket.MSG_DONTWAIT))
            backend.sendall(answer)
            first = await warm
            assert await first.read() == b"{}"
            first.close()  # the connection goes back to the pool

            admission = Admission(slots=1, queue_max=4, queue_timeout_s=5)
            held = await admission.acquire()

            async def next_request() -> bytes:
                (await admission.acquire()).release()
                response = await upstream.open("POST", "/v1/chat/completions", b'{"n":2}')
                try:
                    return await response.read()
                finally:
                    response.close()

            waiting = asyncio.create_task(next_request())
            await asyncio.sleep(0)
            assert admission.queue_depth == 1
            assert held.release()  # granted to the waiting request
            await let_waiter_send()
            assert select.select([backend], [], [], 0)[0], "the next request was not written yet"
            head, _, body = backend.recv(65536).partition(b"\r\n\r\n")
            assert head.startswith(b"POST /v1/chat/completions HTTP/1.1") and body == b'{"n":2}'
            backend.sendall(answer)
            assert await waiting == b"{}"
    finally:
        if waiting is not None and not waiting.done():
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting
        listener.close()
        await session.close()
