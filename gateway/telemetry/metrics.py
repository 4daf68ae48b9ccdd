"""Prometheus metrics on a per-app registry (no import-time globals, so apps can coexist in one process).

Names follow ``gateway_<noun>_<unit>``; labels carry the key *name*, never the key. HTTP metrics are
recorded on the same registry by the edge middleware (:mod:`gateway.http.http_metrics`); slot and queue gauges
are read live from the :class:`~gateway.admission.Gate` at scrape time; backend gauges are set by
the :class:`~gateway.backends.monitor.BackendMonitor`. The registry also carries what
prometheus-client's default registry would — ``process_*`` (CPU, memory, open files, start time),
``python_info`` and ``python_gc_*`` — and no ``_created`` series: each counter and histogram would
add one whose value is only its creation time, doubling the series a scrape stores
(``disable_created_metrics``, prometheus-client's public switch; it holds for the whole process).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, Metric

from dspark_common.metric_series import BoundSeries
from gateway.admission import Load, Reason
from gateway.telemetry.loop_lag import LAG_BUCKETS
from gateway.telemetry.record import RequestTelemetry

_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
_TOKENS_PER_S = (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 120, 150, 200, 300)
_RATE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 1.0)
_LENGTH = (1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6)
#: |predicted - reported| cached tokens: 0 (exact), within a block of 256, then by fourfolds.
_ERROR_TOKENS = (0, 256, 1024, 4096, 16384, 65536, 262144)
#: The per-request token counts of a record, by ``gateway_tokens_total``'s ``kind``.
_TOKEN_KINDS = ("prompt", "completion", "cached", "reasoning")


#: The states of a backend's circuit breaker (``gateway_backend_circuit_state``).
CIRCUIT_STATES = ("closed", "open", "half_open")


class Circuit(Protocol):
    """What the metrics read of a circuit breaker: its ``state``, one of :data:`CIRCUIT_STATES`."""

    @property
    def state(self) -> str: ...


#: Where admission's view of a backend's prefix cache comes from (``gateway_backend_prefix_cache_source``).
CACHE_SOURCES = ("events", "estimate", "off")


class SessionHolds(Protocol):
    """What the metrics read of a backend's admission: the agent sessions it holds."""

    def holds(self) -> list[dict[str, object]]: ...


def _held(admission: SessionHolds) -> int:
    return len(admission.holds())


class PrefixCacheView(Protocol):
    """What the metrics read of a backend's prefix cache view: its source now (:data:`CACHE_SOURCES`)."""

    def source(self, now: float) -> str: ...


def _from_source(view: PrefixCacheView, source: str) -> int:
    return int(view.source(time.monotonic()) == source)


class KVEventCounts(Protocol):
    """What the metrics read of a backend's KV event feed: its ignored messages and events by reason."""

    @property
    def ignored(self) -> Mapping[str, int]: ...


class _KVEventsIgnored:
    """``gateway_kv_events_ignored_total{backend,reason}``, read from each feed at scrape time (the
    feed keeps its own counts: a counter that only grows, set from them)."""

    def __init__(self) -> None:
        self.feeds: dict[str, KVEventCounts] = {}

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "gateway_kv_events_ignored",
            "KV event messages and events that changed nothing, by reason: malformed | block_size (not "
            "GATEWAY_KV_BLOCK_SIZE) | out_of_order (a batch number the replay did not confirm) | "
            "disconnected (a connection cut: a message over GATEWAY_KV_EVENTS_MAX_BYTES, or a "
            "publisher gone)",
            labels=("backend", "reason"),
        )
        for name, feed in self.feeds.items():
            for reason, count in feed.ignored.items():
                family.add_metric((name, reason), count)
        yield family


def _waiting(load: Load, reason: str) -> int:
    return load.waiting_for()[reason]


def _in_state(circuit: Circuit, state: str) -> int:
    return int(circuit.state == state)


class GatewayMetrics:
    """The gateway's metric families, registered on their own :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        disable_created_metrics()
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        labels = ("model", "key", "api")
        self._load = [
            Gauge(name, text, registry=registry)
            for name, text in (
                ("gateway_slots_total", "Upstream slots (vLLM --max-num-seqs), all backends"),
                (
                    "gateway_slots_in_use",
                    "Requests holding an upstream slot (admitted, sequence not finished)",
                ),
                ("gateway_queue_depth", "Requests waiting for a slot"),
                ("gateway_kv_budget_tokens", "The KV pool admission shares out, tokens"),
                (
                    "gateway_kv_reserved_tokens",
                    "KV tokens reserved by admitted requests (prompt + output budget)",
                ),
                ("gateway_long_slots", "Long-prompt requests allowed at once (the lane)"),
                ("gateway_long_in_use", "Long-prompt requests admitted now"),
            )
        ]
        self._waiting = Gauge(
            "gateway_queue_waiting",
            "Requests waiting now, by what they wait for: slot|kv|lane|key_concurrency|reserved",
            ("reason",),
            registry=registry,
        )
        self._backend_load = [
            Gauge(name, text, ("backend",), registry=registry)
            for name, text in (
                ("gateway_backend_slots_in_use", "Sequences holding this backend's slots"),
                ("gateway_backend_queue_depth", "Requests waiting for this backend"),
                ("gateway_backend_kv_reserved_tokens", "KV tokens reserved on this backend"),
            )
        ]
        self._circuit = Gauge(
            "gateway_backend_circuit_state",
            "1 for the state the backend's circuit breaker is in: closed|open|half_open",
            ("backend", "state"),
            registry=registry,
        )
        self._cache_source = Gauge(
            "gateway_backend_prefix_cache_source",
            "1 for where admission's view of the backend's prefix cache comes from: events (its KV "
            "events, fresh) | estimate (what the gateway sent it: no events, or stale)",
            ("backend", "source"),
            registry=registry,
        )
        self._session_holds = Gauge(
            "gateway_backend_session_holds",
            "Agent sessions whose prefix this backend's admission holds for their next turn",
            ("backend",),
            registry=registry,
        )
        self._kv_ignored = _KVEventsIgnored()
        registry.register(self._kv_ignored)
        self._batch_lines = Counter(
            "gateway_batch_lines",
            "Batch lines this process answered, by outcome: ok (the output file) | error (the error file)",
            ("outcome",),
            registry=registry,
        )
        self._batch_waiting = Gauge(
            "gateway_batch_lines_waiting",
            "Lines not answered yet of the batches this process runs (0: none runs here)",
            registry=registry,
        )
        self._ledger_pending = Gauge(
            "gateway_ledger_pending_rows",
            "Usage rows kept in memory after a failed write, until the database takes them (0: writing)",
            registry=registry,
        )
        # by (model, key, api): bounded by the key table times the dialects
        self._series: dict[tuple[str, str, str], BoundSeries] = {}
        self.requests = Counter(
            "gateway_requests", "Inference requests by final status", (*labels, "status"), registry=registry
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens by kind: prompt|completion|cached|reasoning",
            (*labels, "kind"),
            registry=registry,
        )
        self.prefill = Counter(
            "gateway_prefill_tokens",
            "Prompt tokens the backend computed: prompt minus those its prefix cache held",
            labels,
            registry=registry,
        )
        self.ttft = Histogram(
            "gateway_ttft_seconds", "Arrival to first token", labels, buckets=_SECONDS, registry=registry
        )
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Time waiting for a slot",
            labels,
            buckets=_SECONDS,
            registry=registry,
        )
        self.queue_wait_reason = Counter(
            "gateway_queue_wait_reason_seconds",
            "Seconds admitted requests waited, by what they waited for",
            ("reason",),
            registry=registry,
        )
        self.decode = Histogram(
            "gateway_decode_tokens_per_second",
            "(completion_tokens - 1) / (t_last - t_first) per request",
            labels,
            buckets=_TOKENS_PER_S,
            registry=registry,
        )
        self.e2e = Histogram(
            "gateway_e2e_seconds", "Arrival to end of response", labels, buckets=_SECONDS, registry=registry
        )
        self.acceptance = Histogram(
            "gateway_spec_acceptance_rate",
            "Draft tokens accepted / drafted, per request",
            (*labels, "source"),
            buckets=_RATE,
            registry=registry,
        )
        self.acceptance_length = Histogram(
            "gateway_spec_mean_acceptance_length",
            "Tokens per speculative step, per request",
            (*labels, "source"),
            buckets=_LENGTH,
            registry=registry,
        )
        self.prediction_error = Histogram(
            "gateway_prefix_cache_prediction_error_tokens",
            "|cached tokens admission predicted - cached tokens the backend reported| per request it "
            "predicted, by where the prediction came from: events | estimate",
            ("source",),
            buckets=_ERROR_TOKENS,
            registry=registry,
        )
        self.tool_calls_dropped = Counter(
            "gateway_tool_calls_dropped",
            "Tool calls the model spelled out (DSML) in answers to requests that declared no tools: "
            "dropped, not handed to the client",
            labels,
            registry=registry,
        )
        self.ends = Counter(
            "gateway_request_ends",
            "Requests by how they ended: complete, error, client_gone, client_slow (cut for not reading)",
            ("end",),
            registry=registry,
        )
        self.clamped = Counter(
            "gateway_telemetry_clamped",
            "Impossible upstream values clamped, by field",
            ("field",),
            registry=registry,
        )
        self.loop_lag = Histogram(
            "gateway_event_loop_lag_seconds",
            "How late the event loop fired a timer (GATEWAY_LOOP_LAG_INTERVAL_S apart): every stream, "
            "health check and scrape waits while the loop is held",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.upstream_up = Gauge(
            "gateway_upstream_up",
            "1 if the backend's /metrics answered at the last poll",
            ("backend",),
            registry=registry,
        )
        self.backend_running = Gauge(
            "gateway_backend_requests_running",
            "vLLM num_requests_running at the last poll",
            ("backend",),
            registry=registry,
        )
        self.backend_waiting = Gauge(
            "gateway_backend_requests_waiting",
            "vLLM num_requests_waiting at the last poll",
            ("backend",),
            registry=registry,
        )
        self.backend_kv_usage = Gauge(
            "gateway_backend_kv_cache_usage_ratio",
            "vLLM kv_cache_usage_perc (0..1) at the last poll",
            ("backend",),
            registry=registry,
        )

    def watch(self, load: Load) -> None:
        """Read the gateway-wide gauges (slots, queue, KV, lane) from ``load`` at every scrape."""
        reads = (
            lambda: load.slots,
            lambda: load.in_use,
            lambda: load.queue_depth,
            lambda: load.capacity.kv_budget_tokens,
            lambda: load.kv_reserved_tokens,
            lambda: load.capacity.long_slots,
            lambda: load.long_in_use,
        )
        for gauge, read in zip(self._load, reads, strict=True):
            gauge.set_function(read)
        for reason in Reason:
            self._waiting.labels(reason.value).set_function(functools.partial(_waiting, load, reason.value))

    def watch_backend(self, name: str, load: Load) -> None:
        """Read backend ``name``'s own gauges from its admission ``load`` at every scrape."""
        reads = (lambda: load.in_use, lambda: load.queue_depth, lambda: load.kv_reserved_tokens)
        for gauge, read in zip(self._backend_load, reads, strict=True):
            gauge.labels(name).set_function(read)

    def watch_circuit(self, name: str, circuit: Circuit) -> None:
        """Read backend ``name``'s circuit state (:class:`~gateway.backends.breaker.Breaker`) at every
        scrape."""
        for state in CIRCUIT_STATES:
            self._circuit.labels(name, state).set_function(functools.partial(_in_state, circuit, state))

    def watch_holds(self, name: str, admission: SessionHolds) -> None:
        """Read how many sessions backend ``name``'s admission holds at every scrape."""
        self._session_holds.labels(name).set_function(functools.partial(_held, admission))

    def watch_ledger(self, backlog: Callable[[], int]) -> None:
        """Read the usage rows kept after a failed write (``backlog()``) at every scrape."""
        self._ledger_pending.set_function(backlog)

    def batch_line(self, ok: bool) -> None:
        """A batch line answered and recorded."""
        self._batch_lines.labels("ok" if ok else "error").inc()

    def batch_waiting(self, lines: int) -> None:
        """The lines the batches running here have left, together (0 when none runs here)."""
        self._batch_waiting.set(lines)

    def watch_prefix_cache(self, name: str, view: PrefixCacheView) -> None:
        """Read where backend ``name``'s prefix cache view comes from at every scrape."""
        for source in CACHE_SOURCES:
            read = functools.partial(_from_source, view, source)
            self._cache_source.labels(name, source).set_function(read)

    def watch_kv_events(self, name: str, feed: KVEventCounts) -> None:
        """Read what backend ``name``'s KV event feed ignored at every scrape."""
        self._kv_ignored.feeds[name] = feed

    def observe(self, record: RequestTelemetry) -> None:
        """Record one finished request."""
        series = (record.model, record.key_name, record.api)
        bound = self._series.get(series)
        if bound is None:
            bound = self._series[series] = BoundSeries(*series)
        bound(self.requests, str(record.status)).inc()
        for kind in _TOKEN_KINDS:
            count = getattr(record, f"{kind}_tokens")
            if count:
                bound(self.tokens, kind).inc(count)
        if record.prompt_tokens > record.cached_tokens:
            bound(self.prefill).inc(record.prompt_tokens - record.cached_tokens)
        for histogram, value in (
            (self.ttft, record.ttft_s),
            (self.queue_wait, record.queue_wait_s),
            (self.decode, record.decode_tokens_per_s),
            (self.e2e, record.e2e_s),
        ):
            if value is not None:
                bound(histogram).observe(value)
        for reason, seconds in record.waited_for.items():
            self.queue_wait_reason.labels(reason).inc(seconds)
        spec = record.spec
        if spec is not None:
            if spec.acceptance_rate is not None:
                bound(self.acceptance, spec.source).observe(spec.acceptance_rate)
            if spec.mean_acceptance_length is not None:
                bound(self.acceptance_length, spec.source).observe(spec.mean_acceptance_length)
        self._prediction(record)
        if record.tool_calls_dropped:
            bound(self.tool_calls_dropped).inc(record.tool_calls_dropped)
        for name in record.clamped:
            self.clamped.labels(name).inc()
        if record.end_reason is not None:
            self.ends.labels(record.end_reason).inc()

    def _prediction(self, record: RequestTelemetry) -> None:
        """How far admission's prediction of the cached tokens was from what the backend reported; only
        for an answer that carried its usage (status 200 and prompt tokens counted): another reported
        nothing to compare with."""
        if record.cached_tokens_predicted is None or record.cache_source is None:
            return
        if record.status != 200 or not record.prompt_tokens:
            return
        error = abs(record.cached_tokens_predicted - record.cached_tokens)
        self.prediction_error.labels(record.cache_source).observe(error)
