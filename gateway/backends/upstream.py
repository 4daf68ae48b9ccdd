"""The upstream seam: what the pipeline needs of an HTTP client to the model server, and the errors
it maps every failure to. Pure: the client itself is elsewhere
(:mod:`gateway.backends.aiohttp_upstream`; an in-memory fake for tests in ``tests/support``).

Failures before response headers are 503 ``upstream_unavailable``; an upstream that took the request
but stays silent past the read timeout is 504 ``upstream_timeout``; a body that breaks is 502; an
upstream error status is the same status with the upstream's message. Redirects are not followed (a
model server has no reason to send one; following it would re-send the prompt elsewhere).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from gateway.errors import GatewayError

#: Upstream error bodies are read up to this many bytes (they are small JSON objects).
MAX_ERROR_BODY = 64 * 1024


class UpstreamResponse(Protocol):
    """A response whose headers arrived with a status below 400. Read it once (:meth:`chunks` or
    :meth:`read`) and :meth:`close` it.

    ``chunks()`` yields the body's bytes as they arrive (everything already received in one piece)
    and raises :class:`GatewayError` 504 when nothing came within the read timeout, 502
    ``upstream_stream_error`` when the body broke; ``read()`` returns the whole body (504, or 502
    ``upstream_error``). ``close()`` gives the connection back to the pool if the body was read to
    its end, else closes it (vLLM aborts the request); it is idempotent.
    """

    status: int

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class Upstream(Protocol):
    """A vLLM OpenAI server.

    ``open`` sends a request and returns once the response headers arrive (the caller owns the
    response); it raises :class:`GatewayError` 503 when the server can't be reached, 504 when it is
    silent past the read timeout, or the upstream's own status when it answers >= 400.
    ``get_text`` is ``GET path``'s body if it answers 200 within ``timeout_s``, else None (never
    raises); ``aclose`` closes the pool.
    """

    async def open(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> UpstreamResponse: ...

    async def get_text(self, path: str, timeout_s: float) -> str | None: ...

    async def aclose(self) -> None: ...


class Started:
    """A streamed :class:`UpstreamResponse` whose body has begun: :meth:`chunks` yields its first chunk
    (``first``, a read already done) and then the rest of ``rest``, the iterator that read came from;
    the error the first read raised, if any, is raised there as the response would have raised it."""

    def __init__(
        self, response: UpstreamResponse, first: asyncio.Future[bytes], rest: AsyncIterator[bytes]
    ) -> None:
        self._response = response
        self._first = first
        self._rest = rest
        self.status = response.status

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            yield self._first.result()
        except StopAsyncIteration:  # the body was empty
            return
        async for chunk in self._rest:
            yield chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        self._response.close()


async def probe(upstream: Upstream, timeout_s: float) -> bool:
    """True if the upstream's ``GET /health`` answers 200 within ``timeout_s`` seconds."""
    return await upstream.get_text("/health", timeout_s) is not None


def unavailable(detail: str) -> GatewayError:
    """503 ``upstream_unavailable`` (the model server can't be reached)."""
    return GatewayError("upstream_unavailable", f"The model server is unavailable: {detail}")


class Unreachable(GatewayError):
    """503 ``upstream_unavailable`` before the request reached the model server (no connection could
    be made): it may be sent to another one."""

    def __init__(self, detail: str) -> None:
        super().__init__("upstream_unavailable", f"The model server is unavailable: {detail}")


def timed_out(detail: str) -> GatewayError:
    """504 ``upstream_timeout``: the model server took the request, then sent nothing for longer than
    ``GATEWAY_UPSTREAM_READ_TIMEOUT_S`` (before its headers, or in the middle of a stream)."""
    return GatewayError("upstream_timeout", f"The model server timed out: {detail}")


def broken(code: str, exc: BaseException) -> GatewayError:
    """The error for a body that failed after the headers: 504 if the read timeout ran out, else 502
    with ``code`` (``upstream_stream_error`` for a stream, ``upstream_error`` for a whole body)."""
    noun = "stream" if code == "upstream_stream_error" else "response"
    if isinstance(exc, TimeoutError):
        return timed_out(f"no bytes mid-{noun} ({type(exc).__name__})")
    message = f"The model server {noun} broke: {type(exc).__name__}"
    return (
        GatewayError(code, message, status=502) if code == "upstream_error" else GatewayError(code, message)
    )


def upstream_error(status: int, raw: bytes) -> GatewayError:
    """Map an upstream error response (``status`` >= 400, body ``raw``) to a :class:`GatewayError` with
    the same status.

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
    code = "upstream_error" if status >= 500 else "upstream_rejected"
    return GatewayError(code, message, param=param, status=status)
