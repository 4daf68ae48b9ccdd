"""The sequential benchmark: warm-up runs, then repetitions of each workload, medians per workload.

Each run is one streamed completion (:func:`dspark_qualify.stream.stream_chat`), one at a time
(single-request figures, as in the recipe's qualification table; :mod:`dspark_qualify.load` measures
under concurrency, with the same per-run records).
A run that raised, or whose stream carried no text (so no TTFT), is a failed run: a record with
``error``. Warm-up runs are recorded with ``warmup: true`` and left out of the medians. A median is taken over
the measured runs where the figure is defined; ``n`` says how many that was.

Per-run record fields (units): ``ttft_s`` (s, client), ``decode_tokens_per_s`` (tokens/s, client,
(completion_tokens − 1) / (t_last − t_first)), ``e2e_s`` (s), ``prompt_tokens``, ``completion_tokens``,
``acceptance_rate`` (0..1, accepted / drafted), ``mean_acceptance_length`` (tokens per verify step,
1..k+1) and ``acceptance_source`` (where those two came from, or ``None``), plus the gateway's own
``gateway_ttft_s`` / ``gateway_decode_tokens_per_s`` when it sent telemetry.
"""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from openai import AsyncOpenAI

from dspark_qualify.stream import StreamResult, stream_chat
from dspark_qualify.target import Target
from dspark_qualify.urls import public_url
from dspark_qualify.workloads import Workload

__all__ = ["MEDIAN_FIELDS", "BenchConfig", "RunRecord", "environment", "measure", "medians", "run_bench"]

MEDIAN_FIELDS = ("ttft_s", "decode_tokens_per_s", "acceptance_rate", "mean_acceptance_length", "e2e_s")


@dataclass(frozen=True, slots=True)
class BenchConfig:
    base_url: str
    model: str
    workloads: Sequence[Workload]
    repetitions: int = 3
    warmup: int = 1
    max_tokens: int = 2048
    extra_body: dict[str, Any] | None = None
    target: Target | None = None


@dataclass(slots=True)
class RunRecord:
    workload: str
    index: int
    warmup: bool
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    exact: bool | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    acceptance_source: str | None = None
    gateway_ttft_s: float | None = None
    gateway_decode_tokens_per_s: float | None = None
    error: str | None = None


def record_of(workload: Workload, index: int, warmup: bool, result: StreamResult) -> RunRecord:
    """A run's figures from its stream; acceptance only from the gateway's telemetry object."""
    usage = result.usage or {}
    record = RunRecord(
        workload=workload.name,
        index=index,
        warmup=warmup,
        ttft_s=result.t_first,
        decode_tokens_per_s=result.decode_tokens_per_s,
        e2e_s=result.t_end,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        finish_reason=result.finish_reason,
        exact=workload.check(result.content) if workload.check else None,
    )
    telemetry = result.telemetry or {}
    record.gateway_ttft_s = telemetry.get("ttft_s")
    record.gateway_decode_tokens_per_s = telemetry.get("decode_tokens_per_s")
    spec = telemetry.get("spec")
    if isinstance(spec, dict) and spec.get("acceptance_rate") is not None:
        record.acceptance_rate = spec.get("acceptance_rate")
        record.mean_acceptance_length = spec.get("mean_acceptance_length")
        record.acceptance_source = f"gateway telemetry (spec.source={spec.get('source')})"
    return record


async def measure(
    client: AsyncOpenAI, config: BenchConfig, workload: Workload, index: int, warmup: bool
) -> tuple[RunRecord, list[float]]:
    """One run of ``workload``: its record and its inter-token latencies (s); a failed run is a
    record with ``error`` (and no latencies), not an exception."""
    messages = [{"role": "user", "content": workload.prompt}]
    try:
        result = await stream_chat(
            client, config.model, messages, max_tokens=config.max_tokens, extra_body=config.extra_body
        )
    except Exception as exc:  # a failed run is data, not a crash
        return RunRecord(workload.name, index, warmup, error=f"{type(exc).__name__}: {exc}"), []
    if result.t_first is None:
        return RunRecord(workload.name, index, warmup, error="the stream carried no text"), []
    return record_of(workload, index, warmup, result), result.itl


def medians(records: Sequence[RunRecord]) -> dict[str, dict[str, Any]]:
    """Per workload: ``{field: median or None, "n": measured runs, "errors": failed runs}``."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.workload for r in records):
        runs = [r for r in records if r.workload == name and not r.warmup]
        ok = [r for r in runs if r.error is None]
        row: dict[str, Any] = {"n": len(ok), "errors": len(runs) - len(ok)}
        for fld in MEDIAN_FIELDS:
            values = [v for r in ok if (v := getattr(r, fld)) is not None]
            row[fld] = statistics.median(values) if values else None
        sources = sorted({r.acceptance_source for r in ok if r.acceptance_source})
        row["acceptance_source"] = "; ".join(sources) or None
        out[name] = row
    return out


def environment(config: BenchConfig, mode: str, **parameters: Any) -> dict[str, Any]:
    """Where and how the figures were taken (no credentials): ``mode`` (``sequential`` or ``load``)
    and that mode's ``parameters`` besides the common ones."""
    return {
        "mode": mode,
        "model": config.model,
        "base_url": public_url(config.base_url),
        "target": config.target.as_json() if config.target else None,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "warmup": config.warmup,
        "max_tokens": config.max_tokens,
        **parameters,
        "extra_body": config.extra_body or {},
        "client": {"python": sys.version.split()[0], "platform": platform.platform()},
    }


async def run_bench(
    client: AsyncOpenAI, config: BenchConfig, on_run: Callable[[RunRecord], None] | None = None
) -> dict[str, Any]:
    """Run everything in order (per workload: warm-ups, then repetitions) and build the report."""
    records: list[RunRecord] = []
    for workload in config.workloads:
        for i in range(config.warmup + config.repetitions):
            warm = i < config.warmup
            record, _ = await measure(client, config, workload, i if warm else i - config.warmup, warm)
            records.append(record)
            if on_run is not None:
                on_run(record)
    return {
        "environment": environment(config, "sequential", repetitions=config.repetitions, concurrency=1),
        "workloads": {w.name: w.description for w in config.workloads},
        "medians": medians(records),
        "runs": [asdict(r) for r in records],
    }
