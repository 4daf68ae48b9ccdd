"""Mixed long-context and interactive traffic on the simulator: KV-aware admission against a plain
two-slot FIFO, the same load, in one run.

Scale: the deployment at 1/10 in tokens and 5x in speed, so one run takes minutes. The simulator's KV
pool is 137,258 tokens (the balanced profile's 1,372,579 / 10) and its context 104,858 (1,048,576 /
10); prefill runs at 8,205 tokens/s (the recipe's 159,979 uncached tokens in 97.50 s, x5), shared by
the sequences prefilling at once, and decode at 450 tokens/s a sequence (~90, x5). A long prompt has
90,000 tokens (the recipe's 949,896-token qualification, /10): two of them can't share the pool, as two
900k prompts can't share the real one, and vLLM (the simulator) preempts one to recompute it later.

Load, the same in both arms: ``--long`` long requests (``max_tokens`` 256, two keys), one every 0.5 s
from t = 0; short streamed chats (~60 prompt tokens, ``max_tokens`` 32) from four keys at
``--short-rate`` a second for ``--seconds`` s, from t = 1 s.

Arms (one gateway each, the same simulator settings, a fresh simulator each):

- **kv**: the gateway as deployed, scaled: ``GATEWAY_KV_BUDGET_TOKENS=137258``,
  ``GATEWAY_MAX_MODEL_LEN=104858``, ``GATEWAY_LONG_PROMPT_TOKENS=3277`` (32,768 / 10), one express slot;
- **fifo**: every request fits (``GATEWAY_KV_BUDGET_TOKENS=10^9``) and no lane
  (``GATEWAY_EXPRESS_SLOTS=0``): the fair per-key queue in front of two slots, nothing more.

Figures per arm: the short requests' TTFT (sent -> first event with text) p50 / p99 / max, the long
requests' completion time (sent -> last byte) mean / max, the simulator's
``vllm:num_preemptions_total``, and fifo / kv ratios of each. Failed requests are counted; the script
exits 1 if there are any.

Usage::

    .venv/bin/python -m bench.kv_mix [--long 4] [--short-rate 2] [--seconds 60] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import MODEL, BenchError, make_keys, pct, simulator_and_gateway
from bench.overhead import stream_once
from tests.support.probes import scrape

POOL, CONTEXT, LONG_PROMPT = 137_258, 104_858, 90_000
SIM_ARGS = [
    "--kv-cache-tokens", str(POOL), "--max-model-len", str(CONTEXT), "--prefill-tps", "8205",
    "--decode-tps", "450", "--ttft-base-s", "0.02",
]  # fmt: skip
ARMS: dict[str, dict[str, object]] = {
    "kv": {"kv_budget_tokens": POOL, "max_model_len": CONTEXT, "long_prompt_tokens": 3_277},
    "fifo": {"kv_budget_tokens": 10**9, "max_model_len": CONTEXT, "express_slots": 0},
}
QUEUE = {"queue_max": 1000, "queue_max_per_key": 500, "queue_timeout_s": 600, "queue_timeout_long_s": 600}
LONG_KEYS, SHORT_KEYS = ["long-a", "long-b"], ["short-a", "short-b", "short-c", "short-d"]


def long_body(index: int) -> dict[str, Any]:
    """~90,000 simulated tokens (the simulator counts ~4 characters a token), distinct per request."""
    text = f"Document {index}. " + "The quick brown fox jumps over the lazy dog. " * (LONG_PROMPT * 4 // 45)
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text + " Summarise it."}],
        "max_tokens": 256,
        "ignore_eos": True,
        "stream": True,
    }


def short_body(index: int) -> dict[str, Any]:
    text = f"Interactive question {index}: what is the capital of France? Answer in one sentence please."
    body = {"model": MODEL, "messages": [{"role": "user", "content": text * 2}], "max_tokens": 32}
    return {**body, "ignore_eos": True, "stream": True}


async def run_arm(workdir: Path, arm: str, longs: int, short_rate: float, seconds: float) -> dict[str, Any]:
    """One arm's load against a fresh simulator and gateway; its figures."""
    database = f"sqlite+aiosqlite:///{workdir / 'gateway.db'}"
    secrets = await make_keys(database, LONG_KEYS + SHORT_KEYS)
    settings = {**ARMS[arm], **QUEUE}
    with simulator_and_gateway(workdir, 2, SIM_ARGS, **settings) as (sim_url, gw_url, _pids):
        url = gw_url + "/v1/chat/completions"
        failures: list[str] = []
        short_ttft: list[float] = []
        long_done: list[float] = []
        limits = httpx.Limits(max_connections=2000, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits) as client:

            async def long_one(index: int) -> None:
                await asyncio.sleep(index * 0.5)
                target = (url, {"Authorization": f"Bearer {secrets[LONG_KEYS[index % 2]]}"})
                start = time.perf_counter()
                try:
                    await stream_once(client, target, long_body(index))
                    long_done.append(time.perf_counter() - start)
                except (BenchError, httpx.HTTPError) as exc:
                    failures.append(f"long {index}: {exc}")

            async def short_one(index: int) -> None:
                await asyncio.sleep(1.0 + index / short_rate)
                target = (url, {"Authorization": f"Bearer {secrets[SHORT_KEYS[index % 4]]}"})
                try:
                    ttft, *_ = await stream_once(client, target, short_body(index))
                    short_ttft.append(ttft)
                except (BenchError, httpx.HTTPError) as exc:
                    failures.append(f"short {index}: {exc}")

            began = time.perf_counter()
            shorts = int(short_rate * seconds)
            await asyncio.gather(*(long_one(i) for i in range(longs)), *(short_one(i) for i in range(shorts)))
            makespan = time.perf_counter() - began
        preemptions = scrape(sim_url).get("vllm:num_preemptions_total", 0.0)
    return {
        "short_requests": len(short_ttft),
        "short_ttft_s": {"p50": pct(short_ttft, 50), "p99": pct(short_ttft, 99), "max": max(short_ttft)},
        "long_requests": len(long_done),
        "long_completion_s": {"mean": statistics.fmean(long_done), "max": max(long_done)},
        "preemptions": preemptions,
        "makespan_s": makespan,
        "failures": failures,
    }


def ratios(kv: dict[str, Any], fifo: dict[str, Any]) -> dict[str, float]:
    """fifo / kv for each figure (above 1: KV-aware admission is that many times faster)."""
    return {
        "short_ttft_p50": fifo["short_ttft_s"]["p50"] / kv["short_ttft_s"]["p50"],
        "short_ttft_p99": fifo["short_ttft_s"]["p99"] / kv["short_ttft_s"]["p99"],
        "long_completion_mean": fifo["long_completion_s"]["mean"] / kv["long_completion_s"]["mean"],
        "long_completion_max": fifo["long_completion_s"]["max"] / kv["long_completion_s"]["max"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=int, default=4, help="long requests")
    parser.add_argument("--short-rate", type=float, default=2.0, help="short requests a second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long short requests arrive")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for arm in ("kv", "fifo"):
        with tempfile.TemporaryDirectory(prefix=f"kv-mix-{arm}-") as workdir:
            results[arm] = asyncio.run(run_arm(Path(workdir), arm, args.long, args.short_rate, args.seconds))
        figures = results[arm]
        print(
            f"{arm:>4}: short TTFT p50 {figures['short_ttft_s']['p50']:.3f} s, p99 "
            f"{figures['short_ttft_s']['p99']:.3f} s ({figures['short_requests']} requests); long completion "
            f"mean {figures['long_completion_s']['mean']:.1f} s, "
            f"max {figures['long_completion_s']['max']:.1f} s "
            f"({figures['long_requests']}); preemptions {figures['preemptions']:.0f}; makespan "
            f"{figures['makespan_s']:.1f} s; failures {len(figures['failures'])}"
        )
    results["fifo_over_kv"] = ratios(results["kv"], results["fifo"])
    print(
        "fifo / kv: " + ", ".join(f"{name} x{value:.2f}" for name, value in results["fifo_over_kv"].items())
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if results["kv"]["failures"] or results["fifo"]["failures"]:
        print("failures:", *(results["kv"]["failures"] + results["fifo"]["failures"])[:10], sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
