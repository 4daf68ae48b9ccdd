"""A raw HTTP/1.1 upstream on a plain asyncio socket server, for tests of the upstream seam: the handler
writes exactly the bytes a test needs (chunk boundaries, resets, missing terminators)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One request: its head (request line and headers, with the blank line) and its body (by its
    ``Content-Length``), or None when the connection ended first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return head, await reader.readexactly(length)


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's body (:func:`read_message`), or None when the connection ended first."""
    message = await read_message(reader)
    return None if message is None else message[1]


@contextlib.asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[str]:
    """Serve ``handler`` on a free loopback port; yield its base URL."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await handler(reader, writer)
        writer.transport.abort()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    finally:
        listening.close()


def head(status: str, length: int | None, content_type: str = "application/json") -> bytes:
    """A response head: ``Content-Length: length``, or chunked when ``length`` is None."""
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    return f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{framing}\r\n\r\n".encode()


def chunked(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"
