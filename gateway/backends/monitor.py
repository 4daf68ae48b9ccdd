"""BackendMonitor: polls one backend's vLLM ``/metrics`` so one scrape of the gateway shows it, and
says whether it is up.

Every ``interval_s`` it reads ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and
``vllm:kv_cache_usage_perc`` into ``gateway_backend_*{backend}`` gauges, sets
``gateway_upstream_up{backend}`` and tells ``on_health`` (up: the page answered). :meth:`scrape` is
also used on demand for the spec-decode counters of the ``metrics_delta`` source.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Protocol

from prometheus_client.parser import text_string_to_metric_families

from gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("gateway.backend")


#: The backend gauges the poll reads (vLLM's names).
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


def _sample_name(line: str) -> str:
    return line.partition("{")[0].partition(" ")[0]


def parse_samples(text: str, names: Collection[str]) -> dict[str, float]:
    """Prometheus text -> ``{sample name: value summed over label sets}`` for the samples in ``names``.

    Other lines are dropped before the parser sees them: vLLM's page is mostly histograms, and parsing
    all of it (pure Python) held the event loop for milliseconds on every poll.
    """
    wanted = "\n".join(line for line in text.splitlines() if _sample_name(line) in names)
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


class TextSource(Protocol):
    """What the monitor reads the backend through (the upstream client): ``GET path``'s body if it
    answered 200 within ``timeout_s`` seconds, else None."""

    async def get_text(self, path: str, timeout_s: float) -> str | None: ...


class BackendMonitor:
    """Reads the upstream's ``/metrics``; :meth:`run` polls until cancelled."""

    def __init__(
        self,
        upstream: TextSource,
        metrics: GatewayMetrics,
        interval_s: float,
        name: str = "default",
        on_health: Callable[[bool], None] | None = None,
    ) -> None:
        self._upstream = upstream
        self._metrics = metrics
        self._interval_s = interval_s
        self._name = name
        self.on_health = on_health
        """Told after each poll whether the backend answered (``Backends.mark``)."""

    async def scrape(self, names: Collection[str], timeout_s: float = 2.0) -> dict[str, float] | None:
        """The backend's samples named in ``names`` now, or None if the page can't be read."""
        text = await self._upstream.get_text("/metrics", timeout_s)
        try:
            return parse_samples(text, names) if text is not None else None
        except ValueError:
            return None

    async def poll_once(self) -> None:
        """One poll: update the upstream-up and backend gauges."""
        values = await self.scrape(GAUGES)
        self._metrics.upstream_up.labels(self._name).set(1 if values is not None else 0)
        if self.on_health is not None:
            self.on_health(values is not None)
        if values is None:
            return
        metrics = self._metrics
        gauges = (metrics.backend_running, metrics.backend_waiting, metrics.backend_kv_usage)
        for gauge, name in zip(gauges, GAUGES, strict=True):
            if name in values:
                gauge.labels(self._name).set(values[name])

    async def run(self) -> None:
        """Poll every ``interval_s`` seconds, forever (cancel to stop)."""
        while True:
            with contextlib.suppress(Exception):
                await self.poll_once()
            await asyncio.sleep(self._interval_s)
