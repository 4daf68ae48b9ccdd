"""The one seam to the backend: a pooled aiohttp session, and the mapping of its failures.

aiohttp rather than an httpx-style client: its C HTTP parser, and a body stream that hands over
everything already buffered at once, so events that arrive together are relayed in one write
(httpx/h11 parse chunked bodies in Python and yield one HTTP chunk, i.e. one vLLM event, at a time;
it cost the relay more CPU per chunk than everything else it does).

Connection failures before response headers become 503 ``upstream_unavailable``; an upstream that
took the request but stays silent past the read timeout, 504 ``upstream_timeout``; a body that
breaks, 502; an upstream error status becomes the same status with the upstream's message in OpenAI
shape. Redirects are not followed (a model server has no reason to send one; following it would
re-send the prompt elsewhere).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import aiohttp

from gateway.errors import GatewayError, error_type

#: Upstream error bodies are read up to this many bytes (they are small JSON objects).
_MAX_ERROR_BODY = 64 * 1024

#: Seconds an idle pooled connection is kept: under uvicorn's 5 s keep-alive (vLLM's server), so the
#: gateway never sends a request on a connection the server is closing at that moment.
KEEPALIVE_S = 4.0


def unavailable(detail: str) -> GatewayError:
    """503 ``upstream_unavailable`` (the model server can't be reached)."""
    return GatewayError(503, f"The model server is unavailable: {detail}", code="upstream_unavailable")


def timed_out(detail: str) -> GatewayError:
    """504 ``upstream_timeout``: the model server took the request, then sent nothing for longer than
    ``GATEWAY_UPSTREAM_READ_TIMEOUT_S`` (before its headers, or in the middle of a stream)."""
    return GatewayError(504, f"The model server timed out: {detail}", code="upstream_timeout")


def broken(code: str, exc: BaseException) -> GatewayError:
    """The error for a body that failed after the headers: 504 if the read timeout ran out, else 502
    with ``code`` (``upstream_stream_error`` for a stream, ``upstream_error`` for a whole body)."""
    noun = "stream" if code == "upstream_stream_error" else "response"
    if isinstance(exc, TimeoutError):  # aiohttp's socket read timeout is one too
        return timed_out(f"no bytes mid-{noun} ({type(exc).__name__})")
    return GatewayError(502, f"The model server {noun} broke: {type(exc).__name__}", code=code)


def build_session(
    connect_timeout_s: float, read_timeout_s: float | None, max_connections: int
) -> aiohttp.ClientSession:
    """The pooled session: connect timeout short, read timeout (between two reads) as configured (None:
    unbounded), bodies passed through undecoded (the gateway relays bytes, never re-compresses), and
    no cookie jar: one session serves every client, so a cookie an upstream set while answering one
    of them would go back upstream with everybody's later requests (aiohttp's default jar keeps cookies
    from named hosts; it skips only IP addresses)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=KEEPALIVE_S)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        headers={"Accept-Encoding": "identity"},
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class BodySink(Protocol):
    """Where :meth:`UpstreamResponse.tap` delivers a body: ``data`` for each piece as it arrives (never
    empty), then ``end`` once: None at the body's end, else the :class:`GatewayError` it broke with
    (as :meth:`UpstreamResponse.chunks` raises it).

    ``data`` returns True to stop reading the upstream (the client is not keeping up): the reader
    pauses its protocol there and then, inside aiohttp's parser callback, as aiohttp's own reader
    does when its buffer is full; the rest of that read stays with the parser until
    :meth:`UpstreamResponse.resume_reading`. (Paused from outside that callback, aiohttp's C parser
    would keep a pause flag only the callback clears and stall on a later read.)
    """

    def data(self, data: bytes) -> bool: ...

    def end(self, error: GatewayError | None) -> None: ...


#: The sink of each tapped body reader, by ``id`` (a reader has ``__slots__``: no room for it there).
_SINKS: dict[int, BodySink] = {}


class _TappedReader(aiohttp.StreamReader):
    """aiohttp's body reader while tapped: aiohttp's HTTP parser calls ``feed_data`` with each piece of
    the body (de-chunked), ``feed_eof`` at its end and ``set_exception`` when it breaks or the read
    timeout runs out; here they go straight to the sink instead of a buffer that a reading task
    drains. Same slots as :class:`aiohttp.StreamReader`, so a reader can change class both ways."""

    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        if data:
            self.total_bytes += len(data)
            if _SINKS[id(self)].data(data):
                self._protocol.pause_reading()
        return False  # nothing held back for a decompressor (bodies are not decoded here)

    def begin_http_chunk_receiving(self) -> None:
        pass  # chunk boundaries are for readchunk(); kept, they would grow by one per event

    def end_http_chunk_receiving(self) -> None:
        pass

    def feed_eof(self) -> None:
        super().feed_eof()
        _SINKS[id(self)].end(None)

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        super().set_exception(exc, *args)
        _SINKS[id(self)].end(broken("upstream_stream_error", exc))


class UpstreamResponse:
    """A response whose headers arrived; the caller reads it once (:meth:`chunks`, :meth:`read` or
    :meth:`tap`) and must :meth:`close` it."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, everything already received in one piece.

        Raises :class:`GatewayError` 504 when no byte came within the read timeout, 502
        ``upstream_stream_error`` when the connection broke (reset, bad chunked framing).
        """
        content = self._response.content
        try:
            async for data in content.iter_any():
                yield data
        except (TimeoutError, aiohttp.ClientError) as exc:
            # aiohttp raises a stored failure before handing over what it had already received
            # (StreamReader.readany): those events came before the failure, so they go on first
            held = content._read_nowait(-1) if content._buffer else b""
            if held:
                yield held
            raise broken("upstream_stream_error", exc) from exc

    async def read(self) -> bytes:
        """The whole body. Raises :class:`GatewayError` 504 (read timeout) or 502 ``upstream_error``."""
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise broken("upstream_error", exc) from exc

    def tap(self, sink: BodySink) -> Callable[[], None]:
        """Deliver the body to ``sink`` from aiohttp's parser callbacks, as the bytes are parsed: no
        read call and no task switch per piece (a streamed chunk's cost is per read, see
        docs/performance.md). What is already buffered goes to ``sink.data`` at once; ``sink.end``
        may be called within this call (the body had already ended). Returns the function that
        detaches the sink (idempotent; call it before :meth:`close`): the reader buffers again.
        """
        content = self._response.content
        if type(content) is not aiohttp.StreamReader:  # no body (aiohttp's EMPTY_PAYLOAD), or tapped
            if isinstance(content, _TappedReader):
                raise RuntimeError("the body is tapped already")
            sink.end(None)
            return lambda: None
        # as in chunks(): bytes that came before a failure go on before it. Reading the buffer below
        # its low-water mark resumes a reader that had paused itself, and the parser then feeds it
        # what it held: read until it is empty.
        held = []
        while content._buffer:
            held.append(content._read_nowait(-1))
        failure, eof = content.exception(), content.is_eof()
        _SINKS[id(content)] = sink
        content.__class__ = _TappedReader
        if held:
            sink.data(b"".join(held))  # outside the parser callback: no pause here (see BodySink)
        if failure is not None:
            sink.end(broken("upstream_stream_error", failure))
        elif eof:
            sink.end(None)

        def detach() -> None:
            if _SINKS.pop(id(content), None) is not None:
                content.__class__ = aiohttp.StreamReader

        return detach

    def resume_reading(self) -> None:
        """Read the upstream again after a :class:`BodySink` paused it; what the parser held is
        delivered within this call (``sink.data`` must not ask for a pause again meanwhile: a pause
        inside this call would leave aiohttp's read timeout running while paused)."""
        connection = self._response.connection
        if connection is not None and connection.protocol is not None:
            connection.protocol.resume_reading()

    def close(self) -> None:
        """Give the connection back to the pool if the body was read to its end, else close it."""
        self._response.release()


class Upstream:
    """A vLLM OpenAI server at ``base_url`` (e.g. ``http://127.0.0.1:8000``)."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url
        self._session = session

    async def open(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> UpstreamResponse:
        """Send a request and return once response headers arrive (the body is not read yet).

        ``headers`` (e.g. ``x-request-id``) are sent along. The caller owns the response and must
        ``close()`` it. Raises :class:`GatewayError` 503 when the server can't be reached, 504 when it
        is silent past the read timeout, or the upstream's status when it answers with an error (the
        response is closed then).
        """
        sent = {**(headers or {}), **({"content-type": "application/json"} if body is not None else {})}
        try:
            response = await self._session.request(
                method, self.base_url + path, data=body, headers=sent, allow_redirects=False
            )
        except aiohttp.ConnectionTimeoutError as exc:
            raise unavailable(f"timed out ({type(exc).__name__})") from exc
        except TimeoutError as exc:  # connected and sent: the server is there but silent
            raise timed_out(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise unavailable(type(exc).__name__) from exc
        if response.status >= 400:
            raw = b""
            try:  # read() returns what is buffered: loop to the end or the bound
                while len(raw) < _MAX_ERROR_BODY and (
                    part := await response.content.read(_MAX_ERROR_BODY - len(raw))
                ):
                    raw += part
            except (TimeoutError, aiohttp.ClientError):
                pass  # keep what came: the status is what matters
            finally:
                response.release()
            raise upstream_error(response.status, raw)
        return UpstreamResponse(response)

    async def get_text(self, path: str, timeout_s: float) -> str | None:
        """``GET path``'s body as text if it answers 200 within ``timeout_s`` seconds, else None."""
        try:
            async with self._session.get(
                self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False
            ) as response:
                return await response.text() if response.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None

    async def probe(self, timeout_s: float) -> bool:
        """True if ``GET /health`` answers 200 within ``timeout_s`` seconds."""
        return await self.get_text("/health", timeout_s) is not None


def upstream_error(status: int, raw: bytes) -> GatewayError:
    """Map an upstream error response to a :class:`GatewayError` with the same status.

    vLLM's error body is OpenAI-shaped but its ``code`` is the HTTP status as an int; FastAPI's is
    ``{"detail": ...}``. The message is kept; ``type`` and ``code`` are made OpenAI's.
    """
    message, param = f"The model server answered HTTP {status}.", None
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
            param = err.get("param") if isinstance(err.get("param"), str) else None
        elif isinstance(parsed.get("detail"), str):
            message = parsed["detail"]
        elif isinstance(parsed.get("message"), str):
            message = parsed["message"]
    code = "upstream_error" if status >= 500 else None
    return GatewayError(status, message, type=error_type(status), code=code, param=param)
