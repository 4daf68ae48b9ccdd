"""The one seam to the backend: a pooled ``httpx2.AsyncClient`` and the mapping of its failures.

Connection failures before response headers become 503 ``upstream_unavailable``; an upstream that
took the request but stays silent past the read timeout, 504 ``upstream_timeout``; an upstream error
status becomes the same status with the upstream's message in OpenAI shape.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2

from gateway.errors import GatewayError, error_type

#: Upstream error bodies are read up to this many bytes (they are small JSON objects).
_MAX_ERROR_BODY = 64 * 1024


def unavailable(detail: str) -> GatewayError:
    """503 ``upstream_unavailable`` (the model server can't be reached)."""
    return GatewayError(503, f"The model server is unavailable: {detail}", code="upstream_unavailable")


def timed_out(detail: str) -> GatewayError:
    """504 ``upstream_timeout``: the model server took the request, then sent nothing for longer than
    ``GATEWAY_UPSTREAM_READ_TIMEOUT_S`` (before its headers, or in the middle of a stream)."""
    return GatewayError(504, f"The model server timed out: {detail}", code="upstream_timeout")


def build_client(
    connect_timeout_s: float, read_timeout_s: float | None, max_connections: int
) -> httpx2.AsyncClient:
    """The pooled client: connect timeout short, read timeout as configured (None: unbounded)."""
    timeout = httpx2.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=60.0, pool=None)
    limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx2.AsyncClient(timeout=timeout, limits=limits, trust_env=False)


class Upstream:
    """A vLLM OpenAI server at ``base_url`` (e.g. ``http://127.0.0.1:8000``)."""

    def __init__(self, base_url: str, client: httpx2.AsyncClient) -> None:
        self.base_url = base_url
        self._client = client

    async def open(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> httpx2.Response:
        """Send a request and return once response headers arrive (the body is not read yet).

        ``headers`` (e.g. ``x-request-id``) are sent along. The caller owns the response and must
        ``aclose()`` it. Raises :class:`GatewayError` 503 when
        the server can't be reached, 504 when it is silent past the read timeout, or the upstream's
        status when it answers with an error (the response is closed then).
        """
        sent = {**(headers or {}), **({"content-type": "application/json"} if body is not None else {})}
        request = self._client.build_request(method, self.base_url + path, content=body, headers=sent)
        try:
            response = await self._client.send(request, stream=True)
        except httpx2.ReadTimeout as exc:  # connected and sent: the server is there but silent
            raise timed_out(type(exc).__name__) from exc
        except httpx2.TimeoutException as exc:
            raise unavailable(f"timed out ({type(exc).__name__})") from exc
        except httpx2.TransportError as exc:
            raise unavailable(type(exc).__name__) from exc
        if response.status_code >= 400:
            try:
                raw = await _read_bounded(response)
            finally:
                await response.aclose()
            raise upstream_error(response.status_code, raw)
        return response

    async def probe(self, timeout_s: float) -> bool:
        """True if ``GET /health`` answers 200 within ``timeout_s`` seconds."""
        try:
            response = await self._client.get(self.base_url + "/health", timeout=timeout_s)
        except httpx2.HTTPError:
            return False
        return response.status_code == 200


async def _read_bounded(response: httpx2.Response) -> bytes:
    raw = b""
    try:
        async for part in response.aiter_bytes():
            raw += part
            if len(raw) >= _MAX_ERROR_BODY:
                break
    except httpx2.HTTPError:
        pass
    return raw[:_MAX_ERROR_BODY]


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
