"""The throughput phase's load generator: streamed requests on raw connections, text events counted
without parsing HTTP or JSON.

The load generator shares CPU 1 with the simulator. Read through httpx (HTTP parsing, an SSE line
decoder, a regular expression per event) a relayed chunk cost it ~45 µs of CPU, as much as the
simulator spent producing it, so CPU 1 was full at ~11,000 chunks/s and the gateway on CPU 0 never
was (~70 % busy): its CPU per chunk was measured with every event arriving alone. Here a stream is
one :class:`asyncio.Protocol` that writes its request once and then, per read, counts the text
events completed by it (the :data:`TEXT` pattern over the bytes up to the last blank line, in C),
so CPU 1 can offer the proxy more than it can relay. Inter-chunk gaps are kept as in
:func:`bench.overhead.stream_once`: the time between reads holding text events, 0 for further
events in the same read.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bench.common import BenchError, Target, raw_post

#: A non-empty text field in a chunk's delta (role-only, usage-only and [DONE] events don't count).
TEXT = re.compile(rb'"(?:content|reasoning|reasoning_content)":\s*"[^"]')


@dataclass(slots=True)
class StreamCount:
    """What one stream delivered: text events, gaps between them (s), and the error if it failed."""

    chunks: int = 0
    gaps: list[float] = field(default_factory=list)
    error: str | None = None


class _CountingStream(asyncio.Protocol):
    """One ``Connection: close`` streamed request; resolves ``done`` when the connection ends."""

    def __init__(self, request: bytes, deadline: float, done: asyncio.Future[StreamCount]) -> None:
        self._request = request
        self._deadline = deadline
        self._done = done
        self._head: bytes | None = b""  # the response head until it is complete, then None
        self._tail = b""  # bytes after the last blank line: an event still arriving
        self._last = 0.0
        self._transport: asyncio.Transport | None = None
        self.count = StreamCount()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._head is not None:
            head = self._head + data
            end = head.find(b"\r\n\r\n")
            if end < 0:
                self._head = head
                return
            self._head = None
            if head[9:12] != b"200":
                self._fail(f"status {head[9:12].decode(errors='replace')}: {head[end + 4 :][:200]!r}")
                return
            data = head[end + 4 :]
        buffer = self._tail + data if self._tail else data
        last_event = buffer.rfind(b"\n\n")
        if last_event < 0:
            self._tail = buffer
            return
        self._tail = buffer[last_event + 2 :]
        events = len(TEXT.findall(buffer, 0, last_event))
        if events:
            count = self.count
            if count.chunks:
                count.gaps.append(now - self._last)
            count.gaps.extend([0.0] * (events - 1))
            count.chunks += events
            self._last = now
        if now >= self._deadline and self._transport is not None:
            self._transport.abort()

    def _fail(self, error: str) -> None:
        self.count.error = error
        if self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(self.count)


async def count_stream(target: Target, body: dict[str, Any], deadline: float) -> StreamCount:
    """Stream ``body`` from ``target`` until it ends or ``deadline`` (``time.perf_counter()``) passes.

    Raises :class:`BenchError` on a status other than 200 or a stream that ended without a text event
    before the deadline.
    """
    url = urlsplit(target[0])
    loop = asyncio.get_running_loop()
    done: asyncio.Future[StreamCount] = loop.create_future()
    request = raw_post(target, body)
    await loop.create_connection(lambda: _CountingStream(request, deadline, done), url.hostname, url.port)
    count = await done
    if count.error is not None:
        raise BenchError(count.error)
    if not count.chunks and time.perf_counter() < deadline:
        raise BenchError("stream ended without content")
    return count


async def run_streams(
    target: Target, streams: int, deadline: float, body: Callable[[int], dict[str, Any]]
) -> tuple[list[StreamCount], list[str]]:
    """``streams`` concurrent workers, each streaming ``body(serial)`` from ``target`` one request after
    another until ``deadline``; (every stream's count, errors)."""
    serial = iter(range(10**9))
    counts: list[StreamCount] = []
    errors: list[str] = []

    async def worker() -> None:
        while time.perf_counter() < deadline:
            try:
                counts.append(await count_stream(target, body(next(serial)), deadline))
            except (BenchError, OSError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(*(worker() for _ in range(streams)))
    return counts, errors
