"""The load benchmark, as ``vllm bench serve`` runs one: arrivals at a request rate, a concurrency cap.

Request ``i`` (0 ≤ i < ``num_prompts``) sends workload ``i mod len(workloads)``. It arrives at
:func:`arrival_offsets`\\ ``[i]`` seconds after the start and, with ``concurrency`` set, then waits for
one of ``concurrency`` places (vLLM's ``--max-concurrency``); its clock starts when it is sent. So
``concurrency=N`` with the default rate (``inf``: all arrive at once) is N clients in a closed loop,
and ``request_rate=R`` alone is an open Poisson load of R requests/s. Warm-ups (``warmup`` per
workload) run one at a time before the start and are left out of the figures.

The report: vLLM's fields at the top level (``num_prompts``, ``request_rate`` (``"inf"`` or req/s),
``burstiness`` (1.0: Poisson), ``max_concurrency``, then those of
:func:`dspark_qualify.serving_metrics.serving_metrics`), plus ``environment``, ``workloads`` and
``runs`` (every record, with ``start_s``).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from openai import AsyncOpenAI

from dspark_qualify.bench import BenchConfig, RunRecord, environment, measure
from dspark_qualify.serving_metrics import Sample, metric_values, serving_metrics

__all__ = ["LoadConfig", "arrival_offsets", "run_load"]


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """``num_prompts`` requests; ``concurrency`` places (``None``: no cap); ``request_rate`` req/s
    (``math.inf``: all at once); ``seed`` of the arrival times."""

    num_prompts: int = 100
    concurrency: int | None = None
    request_rate: float = math.inf
    seed: int = 0


def arrival_offsets(n: int, request_rate: float, seed: int = 0) -> list[float]:
    """When each of ``n`` requests arrives, s after the start: all 0 at an infinite rate, else a
    Poisson process (exponential gaps of mean 1 / ``request_rate``) rescaled so that the last arrival
    is at n / ``request_rate``, as vLLM's ``get_request`` does with burstiness 1."""
    if math.isinf(request_rate):
        return [0.0] * n
    rng = random.Random(seed)
    offsets: list[float] = []
    at = 0.0
    for _ in range(n):
        at += rng.expovariate(request_rate)
        offsets.append(at)
    scale = (n / request_rate) / offsets[-1]
    return [t * scale for t in offsets]


async def run_load(
    client: AsyncOpenAI,
    config: BenchConfig,
    load: LoadConfig,
    on_run: Callable[[RunRecord], None] | None = None,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Warm up, run the load; the report (see the module doc) and the measured values of each metric
    (s, :func:`dspark_qualify.serving_metrics.metric_values`: what ``--plot`` draws)."""
    warm: list[Sample] = []
    for workload in config.workloads:
        for i in range(config.warmup):
            record, _ = await measure(client, config, workload, i, True)
            warm.append(Sample(record))
            if on_run is not None:
                on_run(record)
    offsets = arrival_offsets(load.num_prompts, load.request_rate, load.seed)
    places: AbstractAsyncContextManager[Any] = (
        asyncio.Semaphore(load.concurrency) if load.concurrency else nullcontext()
    )
    start = time.perf_counter()

    async def one(i: int) -> Sample:
        await asyncio.sleep(max(0.0, start + offsets[i] - time.perf_counter()))
        async with places:
            sent = time.perf_counter() - start
            workload = config.workloads[i % len(config.workloads)]
            record, itl = await measure(client, config, workload, i, False)
        if on_run is not None:
            on_run(record)
        return Sample(record, itl, round(sent, 6))

    samples = await asyncio.gather(*(one(i) for i in range(load.num_prompts)))
    duration = time.perf_counter() - start
    rate: float | str = "inf" if math.isinf(load.request_rate) else load.request_rate
    report = {
        "environment": environment(config, "load", seed=load.seed),
        "workloads": {w.name: w.description for w in config.workloads},
        "num_prompts": load.num_prompts,
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": load.concurrency,
        **serving_metrics(samples, duration),
        "runs": [{**asdict(s.record), "start_s": s.start_s} for s in (*warm, *samples)],
    }
    return report, metric_values(samples)
