"""``create_app(settings) -> FastAPI``: builds every piece of state on ``app.state``; nothing at import.

Route table (deny by default — only these paths exist; every other path is a 404 in OpenAI shape, so
vLLM's ``/tokenize``, ``/invocations``, ``/pause``, its ``/metrics`` ... are unreachable; the two
``POST`` inference routes are answered by :class:`~gateway.proxy.fast_path.InferenceFastPath` before
FastAPI's router):

================================  ======  =================================
``POST /v1/chat/completions``     key     proxied (stream and non-stream)
``POST /v1/completions``          key     proxied
``GET  /v1/models``               key     upstream list, filtered by the key
``/admin/keys`` (CRUD, rotate)     admin   API keys (see gateway/admin/keys.py)
``GET  /admin/status``            admin   slots, queue, per-key in flight / waiting
``GET  /admin/audit``             admin   admin actions
``GET  /admin/usage``             admin   token totals by day / key / model
``GET  /admin/requests``          admin   recent requests' telemetry
``GET  /health``                  public  process up (also while draining)
``GET  /ready``                   public  upstream ``/health`` answers (503 while draining)
``GET  /metrics``                 public  Prometheus (bearer token if ``GATEWAY_METRICS_TOKEN``)
================================  ======  =================================
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.access_log import AccessLogMiddleware
from gateway.admin import keys as admin_keys
from gateway.admin import routes as admin_routes
from gateway.admission import Admission
from gateway.api import health
from gateway.api import metrics as metrics_route
from gateway.auth import Authenticator, KeyStore
from gateway.auth.audit import AuditLog
from gateway.auth.tokens import TokenConfig
from gateway.config import Settings
from gateway.db import open_engine
from gateway.drain import Drain, DrainMiddleware
from gateway.errors import install_error_handlers
from gateway.headers import HeaderGuardMiddleware
from gateway.limits import RateLimiter, storage_for
from gateway.proxy import routes as proxy_routes
from gateway.proxy.fast_path import InferenceFastPath
from gateway.proxy.forward import Forwarder
from gateway.proxy.upstream import Upstream, build_session
from gateway.request_id import RequestIdMiddleware
from gateway.telemetry import GatewayMetrics
from gateway.telemetry.backend import BackendMonitor
from gateway.telemetry.ledger import UsageLedger
from gateway.telemetry.sinks import TelemetrySinks

log = logging.getLogger("gateway.app")
#: At shutdown, longest wait for cancelled requests' clean-up before the ledger's last flush, seconds.
_CLEAN_UP_S = 10.0


def token_config(settings: Settings) -> TokenConfig | None:
    """JWT trust settings, or None when neither a secret nor a JWKS file is configured."""
    if not settings.jwt_secret and not settings.jwt_jwks_file:
        return None
    return TokenConfig.load(
        settings.jwt_secret,
        settings.jwt_issuer,
        settings.jwt_audience,
        settings.jwt_jwks_file,
        settings.jwt_idp_issuer,
        settings.jwt_idp_audience,
        settings.jwt_idp_algorithms,
    )


def create_app(settings: Settings) -> FastAPI:
    """Build the gateway ASGI app. ``settings.upstream`` must be set (the CLI fills it with the simulator).

    The lifespan opens the database, the pooled upstream client, the usage ledger writer and the
    backend poller, and closes them in reverse on shutdown (the ledger flushes what is left).
    Raises ``ValueError`` if no upstream is configured.
    """
    if not settings.upstream:
        raise ValueError("settings.upstream is required (e.g. http://127.0.0.1:8000)")
    upstream_url = settings.upstream
    admission = Admission(
        settings.slots, settings.queue_max, settings.queue_timeout_s, settings.queue_max_per_key
    )
    metrics = GatewayMetrics(admission)
    drain = Drain()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = await open_engine(settings.database_url)
        session = build_session(
            settings.upstream_connect_timeout_s,
            settings.upstream_read_timeout_s,
            max_connections=settings.slots + 8,
        )
        upstream = Upstream(upstream_url, session)
        ledger = UsageLedger(engine, flush_interval_s=settings.ledger_flush_s)
        ledger.start()
        monitor = BackendMonitor(upstream, metrics, settings.backend_poll_s)
        poller = asyncio.create_task(monitor.run())
        app.state.ledger = ledger
        app.state.store = store = KeyStore(engine)
        app.state.audit = AuditLog(engine)
        app.state.authenticator = Authenticator(
            store, settings.key_cache_ttl_s, token_config(settings), settings.admin_key_sha256
        )
        limits_storage = storage_for(settings.limits_storage)
        app.state.forwarder = Forwarder(
            upstream,
            admission,
            settings,
            TelemetrySinks(metrics, ledger),
            monitor,
            RateLimiter(limits_storage, settings.limits_window_s),
        )
        try:
            yield
        finally:
            # uvicorn cancels requests still running past its shutdown timeout and starts this shutdown
            # at once: let their (shielded) clean-up release slots and queue their usage rows first.
            if not await drain.wait_idle(_CLEAN_UP_S):
                log.error(
                    "%d request(s) still cleaning up at shutdown: their usage rows may be lost",
                    drain.in_flight,
                )
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
            await app.state.authenticator.aclose()
            await app.state.forwarder.drain()
            await ledger.close()
            await session.close()
            await engine.dispose()

    app = FastAPI(
        title="dspark-gateway",
        summary="Authenticated, slot-aware OpenAI-compatible gateway for DeepSeek-V4-Flash on vLLM",
        lifespan=lifespan,
        # '/v1/chat/completions/' is a 404 like every unlisted path, not a 307 to a URL built from the
        # client's Host header
        redirect_slashes=False,
        # the gateway's telemetry is Prometheus (/metrics) and the usage ledger; FastAPI's native
        # OpenTelemetry would look up the global providers on every request for nothing
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.admission = admission
    app.state.metrics = metrics
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(metrics_route.router)
    app.include_router(proxy_routes.router)
    app.include_router(admin_routes.router)
    app.include_router(admin_keys.router)
    app.add_middleware(InferenceFastPath, endpoints=proxy_routes.INFERENCE_ENDPOINTS)  # inside the rest
    metrics.instrument(app)
    app.state.drain = drain
    app.add_middleware(DrainMiddleware, drain=drain)
    app.add_middleware(HeaderGuardMiddleware)  # oversized or ambiguous headers, before routing
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(AccessLogMiddleware)  # outermost: its line has every response's final status
    return app
