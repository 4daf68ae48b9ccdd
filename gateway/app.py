"""``create_app(settings) -> FastAPI``: builds every piece of state on ``app.state``; nothing at import.

Route table (deny by default — only these paths exist; every other path is a 404 in OpenAI shape, so
vLLM's ``/tokenize``, ``/invocations``, ``/pause``, its ``/metrics`` ... are unreachable):

================================  ======  =================================
``POST /v1/chat/completions``     key     proxied (stream and non-stream)
``POST /v1/completions``          key     proxied
``GET  /v1/models``               key     upstream list, filtered by the key
``GET  /health``                  public  process up
``GET  /ready``                   public  upstream ``/health`` answers
``GET  /metrics``                 public  gateway Prometheus metrics
================================  ======  =================================
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.admission import Admission
from gateway.api import health
from gateway.auth import Authenticator, KeyStore
from gateway.config import Settings
from gateway.errors import install_error_handlers
from gateway.proxy import routes as proxy_routes
from gateway.proxy.forward import Forwarder
from gateway.proxy.upstream import Upstream, build_client
from gateway.telemetry import GatewayMetrics


def create_app(settings: Settings) -> FastAPI:
    """Build the gateway ASGI app. ``settings.upstream`` must be set (the CLI fills it with the simulator).

    The lifespan opens the key store and the pooled upstream client and closes them on shutdown.
    Raises ``ValueError`` if no upstream is configured.
    """
    if not settings.upstream:
        raise ValueError("settings.upstream is required (e.g. http://127.0.0.1:8000)")
    upstream_url = settings.upstream
    admission = Admission(settings.slots, settings.queue_max, settings.queue_timeout_s)
    metrics = GatewayMetrics(admission)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await KeyStore.open(settings.database_url)
        client = build_client(
            settings.upstream_connect_timeout_s,
            settings.upstream_read_timeout_s,
            max_connections=settings.slots + 8,
        )
        app.state.authenticator = Authenticator(store, settings.key_cache_ttl_s)
        app.state.forwarder = Forwarder(Upstream(upstream_url, client), admission, settings)
        try:
            yield
        finally:
            await app.state.authenticator.aclose()
            await client.aclose()
            await store.close()

    app = FastAPI(
        title="dspark-gateway",
        summary="Authenticated, slot-aware OpenAI-compatible gateway for DeepSeek-V4-Flash on vLLM",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.admission = admission
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(proxy_routes.router)
    metrics.instrument(app)
    return app
