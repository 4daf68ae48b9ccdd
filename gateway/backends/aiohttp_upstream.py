"""The upstream client: one pooled aiohttp session, through its public API only.

aiohttp rather than an httpx-style client: its HTTP parser is C, and ``StreamReader.iter_any()``
hands over everything already buffered at once, so events that arrived together are relayed in one
write (httpx / h11 parse a chunked body in Python and yield one HTTP chunk — one vLLM event — per
read, at several times aiohttp's CPU per event).

One limit of that public API: when the connection breaks, ``StreamReader`` raises the stored failure
before handing over what it had already buffered, so events that arrived in the same read as the
break are lost (the client still gets the error event; those events were never sent). Reading
the buffer past the failure would need aiohttp's private ``_buffer``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp

from gateway.backends.upstream import (
    MAX_ERROR_BODY,
    Unreachable,
    broken,
    timed_out,
    unavailable,
    upstream_error,
)

#: Seconds an idle pooled connection is kept: under uvicorn's 5 s keep-alive (vLLM's server), so the
#: gateway never sends a request on a connection the server is closing at that moment.
KEEPALIVE_S = 4.0


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


class AiohttpResponse:
    """:class:`~gateway.backends.upstream.UpstreamResponse` over an ``aiohttp.ClientResponse``."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for data in self._response.content.iter_any():
                yield data
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise broken("upstream_stream_error", exc) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise broken("upstream_error", exc) from exc

    def close(self) -> None:
        self._response.release()


class AiohttpUpstream:
    """:class:`~gateway.backends.upstream.Upstream` at ``base_url`` (e.g. ``http://127.0.0.1:8000``)."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url
        self._session = session

    async def open(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> AiohttpResponse:
        sent = {**(headers or {}), **({"content-type": "application/json"} if body is not None else {})}
        try:
            response = await self._session.request(
                method, self.base_url + path, data=body, headers=sent, allow_redirects=False
            )
        except aiohttp.ConnectionTimeoutError as exc:
            raise Unreachable(f"timed out ({type(exc).__name__})") from exc
        except aiohttp.ClientConnectorError as exc:  # no connection: nothing was sent
            raise Unreachable(type(exc).__name__) from exc
        except TimeoutError as exc:  # connected and sent: the server is there but silent
            raise timed_out(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise unavailable(type(exc).__name__) from exc
        if response.status >= 400:
            raw = b""
            try:  # read() returns what is buffered: loop to the end or the bound
                while len(raw) < MAX_ERROR_BODY and (
                    part := await response.content.read(MAX_ERROR_BODY - len(raw))
                ):
                    raw += part
            except (TimeoutError, aiohttp.ClientError):
                pass  # keep what came: the status is what matters
            finally:
                response.release()
            raise upstream_error(response.status, raw)
        return AiohttpResponse(response)

    async def get_text(self, path: str, timeout_s: float) -> str | None:
        try:
            async with self._session.get(
                self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False
            ) as response:
                return await response.text() if response.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None

    async def aclose(self) -> None:
        await self._session.close()
