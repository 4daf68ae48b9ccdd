"""A fake vLLM upstream on a raw asyncio socket server that misbehaves on request, for fault tests.

The fault is chosen per request by a marker ``fault:NAME`` in the last user message (no marker: a
normal, well-formed answer, stream or not as asked). GET requests (the gateway's ``/metrics`` poll,
``/health``) get an empty 404. Faults:

- ``reset_before_headers``: read the whole request, then close with ``SO_LINGER 0`` (a TCP RST);
- ``reset_mid_stream``: 200 + SSE headers + :data:`GOOD_CHUNKS` chunk events, then RST (every
  fault below that answers 200 starts with these chunks too);
- ``stall_before_headers`` / ``stall_mid_stream``: send nothing (more) until the peer hangs up;
- ``bad_json`` / ``not_object``: the good chunks, then ``data: not json`` / ``data: [1, 2]``, then ``[DONE]``;
- ``long_line``: the good chunks, then ``data: xxx…`` of :data:`LONG_LINE_BYTES` bytes with no newline;
- ``status_500_json`` / ``status_500_html``: HTTP 500 with a vLLM-shaped JSON body / an HTML page
  (``status_503_json``, ... any 5xx alike);
- ``big``: a well-formed stream of :data:`BIG_CHUNKS` chunks of ~64 KB each, written as fast as the
  connection takes them; :attr:`FaultyUpstream.sent` counts the bytes written so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
from typing import Any

from tests.support.servers import free_port

GOOD_CHUNKS = 3
LONG_LINE_BYTES = 3 * 1024 * 1024
VLLM_500 = {
    "error": {"message": "EngineCore died", "type": "InternalServerError", "param": None, "code": 500}
}
HTML_500 = b"<html><body><h1>500 Internal Server Error</h1></body></html>"
#: 1,280 x 65 kB = 83 MB from upstream: more than the kernel alone can hold on the way (tcp_rmem's
#: autotuning maximum is 32 MB here), so a pause shows; at 640 (42 MB) read-ahead once took 23 MB.
BIG_CHUNKS = 1280
BIG_TEXT = "word " * 13_000


def chunk(content: str, finish: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with ``content`` in choice 0's delta."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "deepseek-v4-flash-0731",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    }


def sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _head(status: str, content_type: str, length: int | None = None) -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    return f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{framing}\r\n\r\n".encode()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close the connection with a TCP RST instead of a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultyUpstream:
    """The fake upstream in a background thread: ``start()``, ``.url``, ``stop()``."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.sent = 0
        self.posts = 0  # POST requests answered (or faulted) so far
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> FaultyUpstream:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop
        )
        self._server = started.result(timeout=10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for writer in self._writers:  # ends every pending read or drain: the handlers return
                writer.transport.abort()
            others = asyncio.all_tasks() - {asyncio.current_task()}
            if others:
                await asyncio.wait(others, timeout=5)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:  # keep-alive: the gateway pools its upstream connections
                request = await _read_request(reader)
                if request is None or not await self._answer(*request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            if not writer.transport.is_closing():
                writer.close()

    async def _answer(
        self, method: str, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False if the connection is finished."""
        if method != "POST":
            writer.write(_head("404 Not Found", "text/plain", 0))
            return True
        self.posts += 1
        payload = json.loads(body)
        text = str(payload["messages"][-1]["content"])
        fault = text.split("fault:", 1)[1].split()[0] if "fault:" in text else "ok"
        if fault == "reset_before_headers":
            _reset(writer)
            return False
        if fault.startswith("status_5"):
            data, kind = (
                (json.dumps(VLLM_500).encode(), "application/json")
                if fault.endswith("json")
                else (HTML_500, "text/html")
            )
            writer.write(_head(f"{fault.split('_')[1]} Server Error", kind, len(data)) + data)
            return True
        if fault == "stall_before_headers":
            await reader.read()  # until the gateway gives up and closes
            return False
        if not payload.get("stream"):
            data = json.dumps(_completion()).encode()
            writer.write(_head("200 OK", "application/json", len(data)) + data)
            return True
        writer.write(_head("200 OK", "text/event-stream"))
        for i in range(GOOD_CHUNKS if fault != "ok" else 1):
            writer.write(_chunked(sse(chunk(f"part{i} "))))
        await writer.drain()
        return await self._stream_tail(fault, reader, writer)

    async def _stream_tail(
        self, fault: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if fault == "big":
            event = _chunked(sse(chunk(BIG_TEXT)))
            for _ in range(BIG_CHUNKS):
                writer.write(event)
                await writer.drain()  # blocks while the gateway does not read: backpressure
                self.sent += len(event)
        if fault == "reset_mid_stream":
            await asyncio.sleep(0.3)  # let the gateway read the good chunks before the RST
            _reset(writer)
            return False
        if fault in ("stall_mid_stream", "long_line"):
            if fault == "long_line":
                line = b"data: " + b"x" * LONG_LINE_BYTES
                for start in range(0, len(line), 256 * 1024):
                    writer.write(_chunked(line[start : start + 256 * 1024]))
                    await writer.drain()
            await reader.read()  # until the gateway gives up and closes
            return False
        bad = {"bad_json": b"not json", "not_object": b"[1, 2]"}.get(fault)
        if bad is not None:
            writer.write(_chunked(sse(bad)))
        else:  # ok, big
            writer.write(_chunked(sse(chunk("Hello", "stop"))))
        writer.write(_chunked(sse(b"[DONE]")) + b"0\r\n\r\n")
        await writer.drain()
        return True


def _completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": "deepseek-v4-flash-0731",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    """``(method, body)`` of the next request on the connection, or None at its end."""
    with contextlib.suppress(asyncio.IncompleteReadError):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return lines[0].split()[0], await reader.readexactly(length)
    return None
