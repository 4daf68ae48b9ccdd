"""vLLM-named Prometheus metrics for the simulator, on the app's own ``CollectorRegistry``.

Exposed names match vLLM's ``/metrics`` exactly (``prometheus_client`` adds ``_total`` to counters, so
counters are declared without it). Every series carries ``model_name``. Gauges are read from the
scheduler at scrape time, so they can never drift from the real queue state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dspark_common.metric_series import BoundSeries

from .scheduler import Scheduler
from .sequence import Sequence, Step

FINISH_REASONS = ("stop", "length", "abort")
_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


class _SchedulerGauges(Collector):
    """``vllm:num_requests_running|waiting`` and ``vllm:kv_cache_usage_perc`` from live state."""

    def __init__(self, scheduler: Scheduler, model_name: str, kv_cache_tokens: int) -> None:
        self._scheduler = scheduler
        self._model = model_name
        self._kv_cache_tokens = kv_cache_tokens

    def collect(self) -> Iterator[Metric]:
        values = (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                self._scheduler.num_running,
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                self._scheduler.num_waiting,
            ),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                min(1.0, self._scheduler.kv_tokens / self._kv_cache_tokens),
            ),
        )
        for name, documentation, value in values:
            family = GaugeMetricFamily(name, documentation, labels=["model_name"])
            family.add_metric([self._model], value)
            yield family


class SimMetrics:
    """The simulator's metrics; implements the engine's ``EngineObserver``.

    Every series but the per-position and per-reason ones has the one label ``model_name``, so each
    is bound to it once here, as vLLM does (``create_metric_per_engine`` in vllm/v1/metrics/utils.py:
    every series is exposed from the start, at 0), not looked up with ``labels()`` at each update;
    the other two are kept by :class:`~dspark_common.metric_series.BoundSeries` as they first appear.
    """

    def __init__(self, model_name: str, scheduler: Scheduler, kv_cache_tokens: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_SchedulerGauges(scheduler, model_name, kv_cache_tokens))
        registry, labels = self.registry, ["model_name"]

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=registry).labels(model_name)

        def by(name: str, doc: str, label: str) -> Counter:  # a counter with one more label
            return Counter(name, doc, [*labels, label], registry=registry)

        def histogram(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, labels, buckets=_LATENCY_BUCKETS, registry=registry).labels(
                model_name
            )

        self._prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self._generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._success_family = by(
            "vllm:request_success", "Count of successfully processed requests.", "finished_reason"
        )
        self._bound = BoundSeries(model_name)  # the per-reason and per-position families
        for reason in FINISH_REASONS:
            self._bound(self._success_family, reason)  # exposed from the start, at 0
        self._drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self._draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self._accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        self._per_pos_family = by(
            "vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.", "position"
        )
        self._ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token, seconds.")
        self._itl = histogram("vllm:inter_token_latency_seconds", "Inter-token latency, seconds.")
        self._e2e = histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency, seconds.")
        self._aborted = counter(
            "dspark_sim_requests_aborted",
            "Simulator only: requests aborted by their client (disconnect while waiting or decoding).",
        )
        self._queue = histogram("vllm:request_queue_time_seconds", "Time spent in WAITING phase, seconds.")
        self._preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.counts = counter(
            "dspark_sim_token_counts",
            "Simulator only: prompt counts answered (/tokenize, /v1/messages/count_tokens).",
        )
        self.counts_peak = Gauge(
            "dspark_sim_token_counts_peak",
            "Simulator only: most prompt counts in flight at once so far.",
            labels,
            registry=registry,
        ).labels(model_name)
        self._counting = self._peak = 0

    @contextlib.asynccontextmanager
    async def counting(self, seconds: float) -> AsyncIterator[None]:
        """One prompt count, taking ``seconds`` (the tokenizer's time), counted and its concurrency
        peak kept."""
        self._counting += 1
        self._peak = max(self._counting, self._peak)
        self.counts_peak.set(self._peak)
        try:
            if seconds > 0:
                await asyncio.sleep(seconds)
            yield
        finally:
            self._counting -= 1
            self.counts.inc()

    def render(self) -> bytes:
        """Prometheus text exposition of everything above."""
        return generate_latest(self.registry)

    # EngineObserver
    def on_prefill(self, seq: Sequence) -> None:
        """Prompt processed; first token due now."""
        self._prompt_tokens.inc(seq.prompt_tokens)
        if seq.first_token is not None:
            self._ttft.observe(seq.first_token - seq.arrival)
        if seq.scheduled is not None:
            self._queue.observe(seq.scheduled - seq.arrival)

    def on_step(self, seq: Sequence, step: Step) -> None:
        """One engine step emitted ``step.tokens`` tokens."""
        self._generation_tokens.inc(step.tokens)
        if len(seq.step_times) >= 2:
            self._itl.observe(seq.step_times[-1] - seq.step_times[-2])
        if step.drafted:
            self._drafts.inc()
            self._draft_tokens.inc(step.drafted)
            self._accepted_tokens.inc(step.accepted)
            for position in range(step.accepted):
                self._bound(self._per_pos_family, str(position)).inc()

    def on_preempt(self, seq: Sequence) -> None:
        """The sequence was preempted (it lost its KV; it will recompute)."""
        self._preemptions.inc()

    def on_finish(self, seq: Sequence, reason: str) -> None:
        """The sequence left the engine (``reason``: stop, length or abort)."""
        if reason == "abort":
            self._aborted.inc()
            return
        self._bound(self._success_family, reason).inc()
        if seq.last_token is not None:
            self._e2e.observe(seq.last_token - seq.arrival)
