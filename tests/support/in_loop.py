"""The gateway served by uvicorn inside the test's own event loop (asyncio's or uvloop, see the
``uvloop_too`` marker), configured as ``dspark-gateway serve`` configures it, with a key in its database."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from gateway.app import UpstreamFactory, aiohttp_upstream, create_app
from gateway.auth import KeyStore
from gateway.cli.serve import server_config
from gateway.config import Settings

#: Settings that keep the gateway from sending its upstream anything but the requests under test.
QUIET = {"spec_counters": "never", "backend_poll_s": 3600.0}


@dataclass(frozen=True)
class Served:
    """A running gateway: its base URL (no trailing slash), a client key and its app (``app.state``)."""

    url: str
    key: str
    app: Any

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@contextlib.asynccontextmanager
async def gateway_in_loop(
    upstream: str, database_url: str, upstream_factory: UpstreamFactory = aiohttp_upstream, **settings: Any
) -> AsyncIterator[Served]:
    """Serve the gateway in front of ``upstream`` on a free loopback port until the block ends."""
    store = await KeyStore.open(database_url)
    try:
        _, key = await store.create("relay-client")
    finally:
        await store.close()
    app = create_app(
        Settings(upstream=upstream, database_url=database_url, **{**QUIET, **settings}), upstream_factory
    )
    server = uvicorn.Server(
        server_config(app, "127.0.0.1", 0, app.state.settings, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(20):
            while not server.started:  # noqa: ASYNC110 (uvicorn offers a flag, no event)
                if serving.done():
                    await serving
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield Served(f"http://127.0.0.1:{port}", key, app)
    finally:
        server.should_exit = True
        await serving
