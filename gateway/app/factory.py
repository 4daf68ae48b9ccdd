"""``create_app(settings) -> FastAPI``: builds every piece of state on ``app.state``; nothing at import.

The routes are :mod:`gateway.app.routes`' table; one middleware (:mod:`gateway.http.edge`) wraps
them all; errors are rendered in each route's dialect (:mod:`gateway.http.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from limits.aio.storage import Storage
from redis.asyncio import BlockingConnectionPool, Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.admission import Admission, Gate, SharedAdmission
from gateway.app import routes
from gateway.auth import Authenticator, KeyStore
from gateway.auth.audit import AuditLog
from gateway.auth.cache_salt import SECRET_NAME
from gateway.auth.tokens import TokenConfig
from gateway.backends.aiohttp_upstream import AiohttpUpstream, build_session
from gateway.backends.counting import CountGate
from gateway.backends.kv_view import KVView
from gateway.backends.monitor import BackendMonitor
from gateway.backends.pool import Backend, Backends
from gateway.backends.upstream import Upstream
from gateway.batch.runner import BatchRunner
from gateway.config import Settings
from gateway.console.sealing import console_secret
from gateway.http.drain import Drain
from gateway.http.edge import EdgeMiddleware
from gateway.http.errors import install_error_handlers, renderer
from gateway.http.http_metrics import HttpMetrics
from gateway.http.openapi import DOCS_ASSETS
from gateway.http.rate_headers import rate_headers
from gateway.http.throttle import AddressThrottle
from gateway.limits.quota import Quotas, QuotaWeights
from gateway.limits.rate import RateLimiter, storage_for
from gateway.proxy.pipeline import Pipeline
from gateway.storage.batches import BatchStore
from gateway.storage.db import open_engine
from gateway.storage.file_bounds import FileBounds
from gateway.storage.file_sweep import FileSweep
from gateway.storage.files import FileStore
from gateway.storage.response_owners import ResponseOwners
from gateway.storage.secrets import shared_secret
from gateway.telemetry import GatewayMetrics
from gateway.telemetry.ledger import UsageLedger
from gateway.telemetry.loop_lag import sample_lag
from gateway.telemetry.sinks import TelemetrySinks
from gateway.telemetry.tracing import Tracing

#: Makes the client to one backend's base URL (the lifespan closes it with ``aclose``).
UpstreamFactory = Callable[[Settings, str], Upstream]

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


def aiohttp_upstream(settings: Settings, url: str) -> Upstream:
    """The production upstream: :class:`AiohttpUpstream` at ``url``, pooled for the slots."""
    session = build_session(
        settings.upstream_connect_timeout_s,
        settings.upstream_read_timeout_s,
        max_connections=settings.slots + 8,
    )
    return AiohttpUpstream(url, session)


def quota_storage(settings: Settings, limits_storage: Storage) -> Storage:
    """Where quota counters live: in the admission store's Redis when the replicas share one
    (``GATEWAY_ADMISSION_STORE``: a quota must hold across them even when their rate limits are each
    their own), else with the rate limits (``GATEWAY_LIMITS_STORAGE``: memory, or Redis)."""
    store = settings.admission_store
    if store.startswith(("redis://", "rediss://")):
        return storage_for(store)
    if store.startswith("unix://"):
        return storage_for("redis+" + store)  # the ``limits`` name of a Redis socket
    return limits_storage


async def cache_secret(settings: Settings, engine: AsyncEngine) -> bytes:
    """What every request's ``cache_salt`` is derived from (:mod:`gateway.auth.cache_salt`):
    ``GATEWAY_CACHE_SALT_SECRET``, else the database's (generated once, the same for every replica)."""
    if settings.cache_salt_secret:
        return settings.cache_salt_secret.encode()
    return await shared_secret(engine, SECRET_NAME)


def file_bounds(settings: Settings) -> FileBounds:
    """What keys, groups and everyone may keep in the files directory (``GATEWAY_FILES_*``)."""
    return FileBounds(
        settings.files_max_bytes_per_key,
        settings.files_max_count_per_key,
        settings.files_max_bytes_per_group,
        settings.files_max_count_per_group,
        settings.files_max_total_bytes,
        settings.files_min_free_bytes,
    )


def admission_for(settings: Settings, backend: str) -> Admission | SharedAdmission:
    """Backend ``backend``'s admission: this process's (``GATEWAY_ADMISSION_STORE=memory://``), or the
    one every replica shares in Redis (``redis://...``)."""
    store = settings.admission_store
    if store.startswith(("redis://", "rediss://", "unix://")):
        # a blocking pool: a burst of releases waits for a connection instead of failing past the cap
        pool = BlockingConnectionPool.from_url(
            store, max_connections=64, timeout=settings.admission_lease_ttl_s
        )
        return SharedAdmission.configured(settings, Redis(connection_pool=pool), backend)
    if store != "memory://":
        raise ValueError(f"GATEWAY_ADMISSION_STORE must be memory:// or a redis:// URL, not {store!r}")
    return Admission.configured(settings)


def backend_pairs(
    settings: Settings,
    upstream_factory: UpstreamFactory,
    admissions: Mapping[str, Gate],
    views: Mapping[str, KVView],
    metrics: GatewayMetrics,
) -> list[Backend]:
    """One :class:`Backend` per ``GATEWAY_UPSTREAM`` entry: its client, admission, prefix cache view
    and monitor."""
    backends = []
    for name, url in settings.upstreams:
        upstream = upstream_factory(settings, url)
        monitor = BackendMonitor(upstream, metrics, settings.backend_poll_s, name)
        counts = CountGate(
            upstream_factory(settings, url), settings.count_concurrency, settings.count_concurrency_per_key
        )
        backends.append(Backend(name, upstream, admissions[name], monitor, counts, views[name]))
    return backends


def create_app(settings: Settings, upstream_factory: UpstreamFactory = aiohttp_upstream) -> FastAPI:
    """Build the gateway ASGI app. ``settings.upstream`` must be set (the CLI fills it with the simulator);
    ``upstream_factory`` makes the client to it (tests pass an in-memory one).

    The lifespan opens the database, the upstream client, the usage ledger writer and the backend
    poller, and closes them in reverse on shutdown (the ledger flushes what is left).
    Raises ``ValueError`` if no upstream is configured, or a KV event socket's directory is one other
    users can reach (:func:`~dspark_common.zmq_endpoints.private_ipc_dir`).
    """
    if not settings.upstream:
        raise ValueError("settings.upstream is required (e.g. http://127.0.0.1:8000)")
    admissions = {name: admission_for(settings, name) for name, _ in settings.upstreams}
    # here, not in the lifespan: a KV event socket others could reach refuses the start at once
    views = {name: KVView.configured(settings, name) for name, _ in settings.upstreams}
    shared = [a for a in admissions.values() if isinstance(a, SharedAdmission)]
    metrics = GatewayMetrics()
    drain = Drain()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = await open_engine(settings.database_url)
        backends = Backends(
            backend_pairs(settings, upstream_factory, admissions, views, metrics), settings.affinity
        )
        metrics.watch(backends)
        monitors = []
        if settings.loop_lag_interval_s > 0:
            monitors.append(asyncio.create_task(sample_lag(metrics.loop_lag, settings.loop_lag_interval_s)))
        for backend in backends.all:
            metrics.watch_backend(backend.name, backend.admission)
            metrics.watch_circuit(backend.name, backend.breaker)
            metrics.watch_prefix_cache(backend.name, backend.kv)
            metrics.watch_holds(backend.name, backend.admission)
            backend.monitor.on_health = functools.partial(backends.mark, backend)
            monitors.append(asyncio.create_task(backend.monitor.run()))
            if backend.kv.feed is not None:
                metrics.watch_kv_events(backend.name, backend.kv.feed)
                monitors.append(asyncio.create_task(backend.kv.feed.run()))
        for admission in shared:
            await admission.start()
        ledger = UsageLedger(
            engine, flush_interval_s=settings.ledger_flush_s, max_pending=settings.ledger_max_pending_rows
        )
        ledger.start()
        metrics.watch_ledger(lambda: ledger.backlog)
        app.state.ledger = ledger
        app.state.store = store = KeyStore(engine)
        app.state.audit = AuditLog(engine)
        app.state.authenticator = Authenticator(
            store, settings.key_cache_ttl_s, token_config(settings), settings.admin_key_sha256
        )
        limits_storage = storage_for(settings.limits_storage)
        owners = ResponseOwners(engine)
        app.state.files = FileStore(
            engine,
            settings.files_dir,
            settings.files_max_bytes,
            file_bounds(settings),
            settings.files_default_expiry_s,
        )
        file_sweep = FileSweep(app.state.files, settings.files_sweep_s)
        file_sweep.start()
        app.state.pipeline = pipeline = Pipeline(
            backends,
            settings,
            TelemetrySinks(metrics, ledger),
            RateLimiter(limits_storage, settings.limits_window_s),
            owners,
            Quotas(
                quota_storage(settings, limits_storage), QuotaWeights(**settings.quota_weights), ledger.spent
            ),
            tracing := Tracing.from_environment(),
            await cache_secret(settings, engine),
        )
        if settings.console:
            app.state.console_secret = await console_secret(settings, engine)
        app.state.throttle = AddressThrottle(
            limits_storage, settings.auth_failures_per_minute, settings.public_requests_per_minute
        )
        app.state.batches = batches = BatchStore(engine)
        app.state.message_batch_creates = set[str]()  # keys creating a message batch now: one each
        app.state.batch_runner = runner = BatchRunner(
            app, pipeline, batches, app.state.files, store, settings.batch_lease_ttl_s, drain, metrics,
            settings.batch_max_running,
        )  # fmt: skip
        running_batches = asyncio.create_task(runner.run())
        try:
            yield
        finally:
            # first the batch lines: each one's exchange gives its slot back and records its usage, and
            # the batch's lease is given back for whoever starts next
            running_batches.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running_batches
            await file_sweep.close()
            # uvicorn cancels requests still running past its shutdown timeout and starts this shutdown
            # at once: let their exchanges release slots and queue their usage rows first.
            if not await drain.wait_idle(_CLEAN_UP_S):
                log.error(
                    "%d request(s) still cleaning up at shutdown: their usage rows may be lost",
                    drain.in_flight,
                )
            for task in monitors:
                task.cancel()
            for task in monitors:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await app.state.authenticator.aclose()
            await pipeline.settled()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)  # exports what is batched: a blocking call
            await owners.aclose()
            await ledger.close()
            for backend in backends.all:
                await backend.upstream.aclose()
                await backend.counts.upstream.aclose()
            for admission in shared:
                await admission.aclose()
            if settings.console:
                await app.state.console_sessions.aclose()
                if app.state.oidc is not None:
                    await app.state.oidc.aclose()
            await engine.dispose()

    # /docs and /redoc load Swagger UI and ReDoc from the gateway itself (fastapi-offline ships them),
    # not from a CDN: they work where the gateway has no Internet access
    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
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
    app.state.metrics = metrics
    app.state.drain = drain
    install_error_handlers(app, routes.dialect_for)
    routes.install(app)
    app.add_middleware(
        EdgeMiddleware,
        drain=drain,
        metrics=HttpMetrics(metrics.registry),
        render=renderer(routes.dialect_for),
        limit_headers=rate_headers,
    )
    return app
