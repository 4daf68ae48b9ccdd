"""Prometheus metrics on a per-app registry (no import-time globals, so apps can coexist in one process).

HTTP metrics come from prometheus-fastapi-instrumentator; admission gauges are read live from the
:class:`~gateway.admission.Admission` at scrape time.
"""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Gauge
from prometheus_fastapi_instrumentator import Instrumentator

from gateway.admission import Admission


class GatewayMetrics:
    """The gateway's metric families, registered on their own :class:`CollectorRegistry`."""

    def __init__(self, admission: Admission) -> None:
        self.registry = CollectorRegistry()
        Gauge(
            "gateway_slots_total", "Upstream slots (vLLM --max-num-seqs)", registry=self.registry
        ).set_function(lambda: admission.slots)
        Gauge(
            "gateway_slots_in_use", "Requests holding an upstream slot", registry=self.registry
        ).set_function(lambda: admission.in_use)
        Gauge("gateway_queue_depth", "Requests waiting for a slot", registry=self.registry).set_function(
            lambda: admission.queue_depth
        )

    def instrument(self, app: FastAPI) -> None:
        """Add HTTP request metrics to ``app`` and expose everything at ``GET /metrics``."""
        Instrumentator(registry=self.registry, excluded_handlers=["/metrics"]).instrument(app).expose(
            app, endpoint="/metrics", include_in_schema=False
        )
