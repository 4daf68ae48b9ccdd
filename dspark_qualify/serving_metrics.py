"""The metrics of ``vllm bench serve`` over a load run, under vLLM's names.

Source: vLLM ``vllm/benchmarks/serve.py`` (``calculate_metrics`` and the result dict it writes). Per
completed request, on the client's clock (definitions of the times: :mod:`dspark_qualify.stream`):

- ``ttft``: to the first chunk carrying text (vLLM's chat client takes the first chunk with
  ``choices``, a role-only chunk included);
- ``tpot``: (e2el − ttft) / (output_tokens − 1), requests with output_tokens > 1 only;
- ``itl``: every gap between consecutive text chunks, all requests pooled (a DSpark chunk is one
  engine step, 1..k+1 tokens, so this is the time per step, as vLLM's own client measures it);
- ``e2el``: from sending the request to the end of its stream.

For each: ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` (population, as ``np.std``) and
``p50_``/``p90_``/``p99_<m>_ms`` (linear interpolation between order statistics, ``np.percentile``'s
default), in milliseconds; ``None`` when no request defines the metric (vLLM writes 0 there).
Totals: ``completed``, ``failed``, ``total_input_tokens`` and ``total_output_tokens`` (the server's
``usage``), ``duration`` (s, first arrival to last completion), ``request_throughput`` (req/s),
``output_throughput`` and ``total_token_throughput`` (tokens/s), all over ``duration``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dspark_qualify.bench import RunRecord

__all__ = ["METRICS", "PERCENTILES", "Sample", "metric_values", "percentile", "serving_metrics"]

PERCENTILES = (50, 90, 99)
#: Metric key -> what it is called in vLLM's printed report.
METRICS = {
    "ttft": "Time to First Token",
    "tpot": "Time per Output Token (excl. 1st token)",
    "itl": "Inter-token Latency",
    "e2el": "End-to-end Latency",
}


@dataclass(slots=True)
class Sample:
    """One request of a load run: its record, its inter-token latencies (s) and when it was sent (s
    after the run started; ``None`` for a warm-up)."""

    record: RunRecord
    itl_s: list[float] = field(default_factory=list)
    start_s: float | None = None


def percentile(values: Sequence[float], p: int) -> float:
    """The ``p``-th percentile (1..99) of a non-empty sample, interpolated as ``np.percentile``."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def metric_values(samples: Sequence[Sample]) -> dict[str, list[float]]:
    """Per metric, the values of the completed requests, s (``itl``: every gap of every request)."""
    done = [s for s in samples if s.record.error is None]
    values: dict[str, list[float]] = {m: [] for m in METRICS}
    for s in done:
        r = s.record
        if r.ttft_s is None or r.e2e_s is None:
            continue
        values["ttft"].append(r.ttft_s)
        values["e2el"].append(r.e2e_s)
        values["itl"] += s.itl_s
        if r.completion_tokens is not None and r.completion_tokens > 1:
            values["tpot"].append((r.e2e_s - r.ttft_s) / (r.completion_tokens - 1))
    return values


def _summary(name: str, seconds: Sequence[float]) -> dict[str, float | None]:
    ms = [v * 1000 for v in seconds]
    out: dict[str, float | None] = {
        f"mean_{name}_ms": statistics.fmean(ms) if ms else None,
        f"median_{name}_ms": statistics.median(ms) if ms else None,
        f"std_{name}_ms": statistics.pstdev(ms) if ms else None,
    }
    out |= {f"p{p}_{name}_ms": percentile(ms, p) if ms else None for p in PERCENTILES}
    return out


def serving_metrics(samples: Sequence[Sample], duration_s: float) -> dict[str, float | int | None]:
    """vLLM's result fields for these measured ``samples`` over a run of ``duration_s`` seconds."""
    done = [s.record for s in samples if s.record.error is None]
    total_in = sum(r.prompt_tokens or 0 for r in done)
    total_out = sum(r.completion_tokens or 0 for r in done)
    out: dict[str, float | int | None] = {
        "duration": duration_s,
        "completed": len(done),
        "failed": len(samples) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration_s,
        "output_throughput": total_out / duration_s,
        "total_token_throughput": (total_in + total_out) / duration_s,
    }
    for name, seconds in metric_values(samples).items():
        out |= _summary(name, seconds)
    return out
