"""Scale-out costs and gains, in one run on this machine: what shared admission (Redis leases) costs
against the in-process one, and requests/s through 1, 2 and 4 gateway replicas sharing PostgreSQL
and Redis in front of one simulator.

1. **Admission latency**: ``--cycles`` admit + release of one request, uncontended, in-process and
   shared (each admit is one Lua script on loopback Redis; the release is sent in the background and
   awaited here before the next admit), p50 / p99 in microseconds and their ratio. Then the
   **hand-off**: with one slot held and one request waiting, release -> the waiter resumes, p50 / p99
   (shared: a release script, then a pub/sub message to the waiting replica).
2. **Requests/s**: ``--seconds`` s of one-token non-stream chat requests, ``--concurrency`` at a time
   spread round robin over the replicas, each replica a ``dspark-gateway serve`` process with
   ``GATEWAY_ADMISSION_STORE`` and ``GATEWAY_LIMITS_STORAGE`` on Redis and its keys and ledger in
   PostgreSQL; the simulator has 64 slots (the gateways' ``GATEWAY_SLOTS``) and answers at once.
   Arms: one replica with in-process admission (the single-replica default), then 1, 2 and 4
   replicas with shared admission. Figures: requests/s per arm, and its ratio to the shared
   one-replica arm's. On 2 cores the replicas,
   the simulator and the load generator share the CPUs, so the ratio says what replicas add here,
   not on a head node.

PostgreSQL and Redis are the ones ``tests/support/services.py`` finds or starts (loopback only); the
keys and the ledger go to a database of the run's own, dropped at the end.

Usage::

    .venv/bin/python -m bench.scale_out [--cycles 2000] [--seconds 10] [--concurrency 32] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from bench.common import MODEL, make_keys, pct
from gateway.admission import Admission, Capacity, Lease, Need, SharedAdmission
from tests.support.replicas import Replicas
from tests.support.services import own_database, postgres_server, redis_server
from tests.support.sim_process import SimProcess


async def admission_latency(redis_url: str, cycles: int) -> dict[str, Any]:
    """Part 1: uncontended admit + release, and the release -> waiter hand-off, both admissions."""
    local = Admission(1, 8, 30.0)
    shared = SharedAdmission(
        Redis.from_url(redis_url),
        f"bench:admission:{{{uuid.uuid4().hex[:8]}}}:",
        Capacity(1, 1e18, 1),
        8,
        30.0,
    )
    await shared.start()
    try:
        figures: dict[str, Any] = {}
        for name, admission in (("in_process", local), ("shared", shared)):
            admits, handoffs = [], []
            for _ in range(cycles):
                started = time.perf_counter()
                lease = await admission.admit("bench", 1, None, Need())
                admits.append(time.perf_counter() - started)
                assert isinstance(lease, Lease)
                waiter = await admission.admit("other", 1, None, Need())
                assert not isinstance(waiter, Lease)
                waiting = asyncio.ensure_future(admission.wait(waiter))
                await asyncio.sleep(0)
                started = time.perf_counter()
                lease.release()
                handed = await waiting
                handoffs.append(time.perf_counter() - started)
                handed.release()
                await settle(admission)
            figures[name] = {
                "admit_us": {"p50": pct(admits, 50) * 1e6, "p99": pct(admits, 99) * 1e6},
                "handoff_us": {"p50": pct(handoffs, 50) * 1e6, "p99": pct(handoffs, 99) * 1e6},
            }
        return figures
    finally:
        await shared.aclose()


async def settle(admission: Admission | SharedAdmission) -> None:
    """Wait until the last release reached the store (the shared one sends it in the background)."""
    while admission.in_use:
        await asyncio.sleep(0) if isinstance(admission, Admission) else await admission.renew()


async def requests_per_second(urls: list[str], keys: list[str], seconds: float, concurrency: int) -> dict:
    """Part 2, one replica count: closed-loop clients over ``urls``; requests/s and failures."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    done, failed = 0, 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(index: int, http: httpx.AsyncClient) -> None:
        nonlocal done, failed
        url, key = urls[index % len(urls)], keys[index % len(keys)]
        headers = {"Authorization": f"Bearer {key}"}
        while time.perf_counter() < deadline:
            answer = await http.post(url + "/v1/chat/completions", json=body, headers=headers)
            if answer.status_code == 200:
                done += 1
            else:
                failed += 1

    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(concurrency)))
        wall = time.perf_counter() - started
    return {"requests_per_s": done / wall, "requests": done, "failures": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with (
        postgres_server() as server_url,
        own_database(server_url, "bench_scale_") as postgres_url,
        redis_server() as redis_url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        work = Path(tmp)
        latency = asyncio.run(admission_latency(redis_url, args.cycles))
        for name, figures in latency.items():
            admit, handoff = figures["admit_us"], figures["handoff_us"]
            print(
                f"{name:>10}: admit p50 {admit['p50']:.0f} us, p99 {admit['p99']:.0f} us; "
                f"hand-off p50 {handoff['p50']:.0f} us, p99 {handoff['p99']:.0f} us"
            )
        ratios = {
            f"{part}_{q}": latency["shared"][part][q] / latency["in_process"][part][q]
            for part in ("admit_us", "handoff_us")
            for q in ("p50", "p99")
        }
        print("shared / in-process: " + ", ".join(f"{k} x{v:.1f}" for k, v in ratios.items()))
        sim = SimProcess(work / "sim.log", "--slots", "64", "--decode-tps", "1e6", "--ttft-base-s", "0",
                         "--prefill-tps", "1e9").start()  # fmt: skip
        throughput: dict[str, Any] = {}
        try:
            keys = list(asyncio.run(make_keys(postgres_url, [f"bench-{i}" for i in range(8)])).values())
            for arm, count in (("1 in-process", 1), ("1", 1), ("2", 2), ("4", 4)):
                store = {"admission_store": "memory://"} if "in-process" in arm else {}
                replicas = Replicas(
                    sim.url, postgres_url, redis_url, work, slots=64, queue_max=1024,
                    spec_counters="never", backend_poll_s=3600, admission_namespace=f"bench{count}", **store,
                )  # fmt: skip
                try:
                    gateways = replicas.start(count)
                    urls = [g.url for g in gateways]
                    asyncio.run(requests_per_second(urls, keys, 1.0, args.concurrency))  # warm up
                    throughput[arm] = asyncio.run(
                        requests_per_second(urls, keys, args.seconds, args.concurrency)
                    )
                finally:
                    replicas.stop()
                figures = throughput[arm]
                print(
                    f"{arm} replica(s): {figures['requests_per_s']:.0f} requests/s "
                    f"({figures['requests']} requests, {figures['failures']} failed)"
                )
        finally:
            sim.kill()
        one = throughput["1"]["requests_per_s"]
        scaling = {count: figures["requests_per_s"] / one for count, figures in throughput.items()}
        print("requests/s of 1 replica's: " + ", ".join(f"{c}: x{r:.2f}" for c, r in scaling.items()))
    result = {
        "admission": latency,
        "shared_over_in_process": ratios,
        "replicas": throughput,
        "scaling": scaling,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    failures = sum(figures["failures"] for figures in throughput.values())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
