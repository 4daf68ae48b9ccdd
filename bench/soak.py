"""Soak: a real gateway process at 2 slots under 50 clients that stream, wait for whole answers and
give up at every point, for ``--duration`` seconds (30 minutes for a release, 40 s in CI).

Passes (exit 0) when, over the whole run: no client saw an error other than the expected 429 of a
full queue; the gateway's RSS is flat after warm-up (the least-squares slope of RSS over time after
the first third of the run, MB per hour, stays under ``--rss-mb-per-hour``); afterwards no slot is in
use and no one is queued, the backend runs nothing, and the usage ledger holds exactly one row per
request the gateway received.

Warm-up is excluded because the process fills bounded stores in its first minutes (the allocator's
arenas, the connection pools, SQLite's page cache per connection): a slope over the whole run would
charge that to a leak. A rate, unlike a difference, means the same for a 60 s and a 30 min run; only
a longer run measures it finer.

Usage::

    python -m bench.soak --duration 1800 --json soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from gateway.auth import KeyStore
from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.load_mix import BEHAVIOURS, Outcome, run_client
from tests.support.probes import scrape, wait_until
from tests.support.servers import free_port

CLIENTS = 50
KEYS = 5
QUEUE_MAX = 32  # below the client count: a full queue (429) happens and must be the only error


async def _make_keys(database_url: str) -> tuple[list[str], str]:
    store = await KeyStore.open(database_url)
    try:
        keys = [(await store.create(f"soak-{n}"))[1] for n in range(KEYS)]
        admin = (await store.create("soak-admin", scopes=["admin"]))[1]
    finally:
        await store.close()
    return [k for k in keys if k], admin or ""


async def _clients(gateway: GatewayProcess, keys: list[str], duration_s: float, seed: int) -> dict[str, Any]:
    """``CLIENTS`` loops of random behaviours until the deadline; RSS sampled every second."""
    deadline = time.monotonic() + duration_s
    outcomes: list[Outcome] = []
    rss: list[tuple[float, int]] = []
    started = time.monotonic()

    async def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        headers = {"Authorization": f"Bearer {rng.choice(keys)}"}
        async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=60) as http:
            serial = 0
            while time.monotonic() < deadline:
                behaviour = rng.choice(BEHAVIOURS)
                outcome = await run_client(http, behaviour, f"soak-{index}-{serial}", rng)
                outcomes.append(outcome)
                serial += 1
                if outcome.phase == "refused":  # back off as the OpenAI SDK does on a 429
                    await asyncio.sleep(rng.uniform(0.5, 1.5))

    async def sample() -> None:
        while time.monotonic() < deadline:
            rss.append((time.monotonic() - started, gateway.rss_bytes()))
            await asyncio.sleep(1)

    await asyncio.gather(sample(), *(client(n) for n in range(CLIENTS)))
    return {"outcomes": outcomes, "rss": rss}


#: The share of the run counted as warm-up (see the module docstring).
WARMUP_SHARE = 1 / 3


def rss_trend(rss: list[tuple[float, int]], warmup_s: float) -> dict[str, Any]:
    """RSS samples ``(s since start, bytes)``: at the start of each tenth of the run and at its end, MB;
    after ``warmup_s``, the first and last sample, MB, and the least-squares slope, MB per hour
    (``statistics.linear_regression``)."""
    after = [(t, b / 2**20) for t, b in rss if t >= warmup_s]
    if len(after) < 2:
        raise ValueError(f"{len(after)} RSS samples after {warmup_s:.0f} s of warm-up: run longer")
    slope = statistics.linear_regression([t for t, _ in after], [mb for _, mb in after]).slope
    return {
        "by_tenth": [round(rss[len(rss) * n // 10][1] / 2**20, 1) for n in range(10)]
        + [round(after[-1][1], 1)],
        "warmup_s": round(warmup_s, 1),
        "after_warmup": round(after[0][1], 1),
        "end": round(after[-1][1], 1),
        "mb_per_hour": round(slope * 3600, 2),
    }


def run(duration_s: float, rss_mb_per_hour: float, seed: int, workdir: Path) -> dict[str, Any]:
    """Run the soak; return the report (``passed`` and the figures behind it)."""
    database_url = f"sqlite+aiosqlite:///{workdir / 'soak.db'}"
    keys, admin = asyncio.run(_make_keys(database_url))
    sim_port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "dspark_sim", "--port", str(sim_port), "--log-level", "warning"]
        + ["--decode-tps", "1000", "--ttft-base-s", "0.02", "--prefill-tps", "100000"],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "sim.log").open("wb"),
    )
    sim_url = f"http://127.0.0.1:{sim_port}"
    gateway = None
    try:
        wait_until(lambda: _answers(sim_url + "/health"), timeout_s=30, what="simulator up")
        env = clean_env(
            upstream=sim_url, database_url=database_url, slots=2, queue_max=QUEUE_MAX, ledger_flush_s=1
        )
        gateway = GatewayProcess(env, workdir / "gateway.log").start()
        result = asyncio.run(_clients(gateway, keys, duration_s, seed))
        outcomes: list[Outcome] = result["outcomes"]

        admin_headers = {"Authorization": f"Bearer {admin}"}

        def idle() -> bool:
            status = httpx.get(gateway.url + "/admin/status", headers=admin_headers, timeout=5).json()
            return status["slots_in_use"] == 0 and status["queue_depth"] == 0

        try:
            wait_until(idle, timeout_s=30, what="slots and queue back to 0")
            idle_after = True
        except AssertionError:
            idle_after = False
        backend = scrape(sim_url)
        sent = {o.request_id for o in outcomes if o.sent}
        rows = _rows(database_url, expect=sent)
        row_ids = set(rows)
        missing = sent - row_ids
        issued = {o.request_id for o in outcomes}
        duplicates = len(rows) - len(row_ids)
        errors = [o for o in outcomes if o.error or o.phase in ("truncated", "empty", "unsent")]
        refused = Counter(o.status for o in outcomes if o.phase == "refused")
        trend = rss_trend(result["rss"], duration_s * WARMUP_SHARE)
        checks = {
            "no_errors": not errors,
            "only_429_refusals": set(refused) <= {429},
            "rss_flat": trend["mb_per_hour"] < rss_mb_per_hour,
            "idle_after": idle_after,
            "backend_idle": backend["vllm:num_requests_running"] == 0,
            # every request whose body was surely sent has its row, none has two, none is invented; a
            # client that gave up as its body went out may not have seen it sent, yet have a row
            "one_row_per_request": duplicates == 0 and not missing and row_ids <= issued,
        }
        return {
            "passed": all(checks.values()),
            "checks": checks,
            "duration_s": duration_s,
            "clients": CLIENTS,
            "requests": len(outcomes),
            "requests_per_s": round(len(outcomes) / duration_s, 1),
            "phases": dict(Counter(o.phase for o in outcomes)),
            "refused_by_status": {str(k): v for k, v in refused.items()},
            "errors": [f"{o.request_id} {o.behaviour} {o.phase} {o.error}" for o in errors[:10]],
            "ledger_rows": len(rows),
            "duplicate_rows": duplicates,
            "rows_of_requests_not_seen_sent": len(row_ids & (issued - sent)),
            "rows_of_unknown_requests": len(row_ids - issued),
            "missing_rows": [
                f"{o.request_id} {o.behaviour} {o.phase} {o.status}"
                for o in outcomes
                if o.request_id in missing
            ][:10],
            "requests_received": len(sent),
            "rss_mb": trend,
            "rss_samples": len(result["rss"]),
        }
    finally:
        if gateway is not None:
            gateway.stop()
        sim.terminate()
        sim.wait(timeout=20)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _rows(database_url: str, expect: set[str]) -> list[str]:
    """Request ids of every ledger row, once each of ``expect`` has one (the writer batches; rows of
    requests a client gave up on as they went out come too, so a count would end the wait early)."""
    path = database_url.split("///", 1)[1]

    def read() -> list[str]:
        with sqlite3.connect(path) as db:
            return [r[0] for r in db.execute("SELECT client_request_id FROM usage_ledger")]

    with_rows: list[str] = []

    def enough() -> bool:
        with_rows[:] = read()
        return expect <= set(with_rows)

    with contextlib.suppress(AssertionError):  # too few: reported by the one_row_per_request check
        wait_until(enough, timeout_s=30, what="ledger rows")
    return with_rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of load (default 1800)")
    parser.add_argument(
        "--rss-mb-per-hour", type=float, default=10.0, help="largest RSS slope after warm-up, MB/h"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as workdir:
        report = run(args.duration, args.rss_mb_per_hour, args.seed, Path(workdir))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
