"""HTTP request metrics: the kept route answers give the labels the instrumentator itself gives."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_fastapi_instrumentator import Instrumentator

from gateway.telemetry import http_metrics

#: Both methods twice (the second time a kept answer is used); a static path that a template also
#: matches, for the method only the template has; a template; a 404; a made-up method.
REQUESTS = [
    ("POST", "/keys/rotate"),
    ("GET", "/keys/rotate"),
    ("GET", "/keys/abc"),
    ("GET", "/status"),
    ("GET", "/nowhere"),
    ("BREW", "/status"),
] * 2


def _app(instrument: bool, registry: CollectorRegistry) -> FastAPI:
    app = FastAPI(redirect_slashes=False)  # as the gateway's (instrument refuses the default)
    router = APIRouter()  # included: the instrumentator has to flatten it (the costly part)
    router.add_api_route("/keys/rotate", lambda: {}, methods=["POST"])
    router.add_api_route("/keys/{key_id}", lambda key_id: {}, methods=["GET"])
    router.add_api_route("/status", lambda: {}, methods=["GET"])
    app.include_router(router)
    if instrument:
        http_metrics.instrument(app, registry)
    else:
        Instrumentator(registry=registry, excluded_handlers=["/metrics"]).instrument(app)
    return app


async def _send(app: FastAPI) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        for method, path in REQUESTS:
            await client.request(method, path)


async def _series(instrument: bool, name: str) -> list[str]:
    registry = CollectorRegistry()
    await _send(_app(instrument, registry))
    exposition = generate_latest(registry).decode()
    return sorted(line for line in exposition.splitlines() if line.startswith(name + "{"))


def test_labels_match_the_instrumentators_own() -> None:
    ours, theirs = (asyncio.run(_series(kept, "http_requests_total")) for kept in (True, False))
    assert ours == theirs
    # the latency histogram kept from the library's default set keeps its labels (handler, method)
    durations = [asyncio.run(_series(kept, "http_request_duration_seconds_count")) for kept in (True, False)]
    assert durations[0] == durations[1] != []
    assert 'http_requests_total{handler="/keys/rotate",method="POST",status="2xx"} 2.0' in ours
    assert 'http_requests_total{handler="/keys/{key_id}",method="GET",status="2xx"} 4.0' in ours


def test_only_static_answers_are_kept() -> None:
    app = _app(True, CollectorRegistry())
    asyncio.run(_send(app))
    layer = app.middleware_stack  # built by the first request
    while not isinstance(layer, http_metrics.StaticRouteInstrumentatorMiddleware):
        layer = layer.app  # type: ignore[union-attr]
    assert layer._static == {
        ("POST", "/keys/rotate"): ("/keys/rotate", True),
        ("GET", "/status"): ("/status", True),
    }


def test_an_app_that_redirects_slashes_is_refused() -> None:
    """There the library answers '/keys/<anything>/' with the path itself: every such path would be kept."""
    with pytest.raises(ValueError, match="redirect_slashes"):
        http_metrics.instrument(FastAPI(), CollectorRegistry())
