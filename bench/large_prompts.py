"""Large prompts: what a 150k- or 1M-token prompt costs the gateway, and whether its event loop stays
free while such prompts are counted, matched, sent and their KV events applied.

Setup per gateway (a fresh simulator and gateway each, the simulator on CPU 1 with the load
generator, the gateway alone on CPU 0): the simulator as the deployment's backend (context
1,048,576, KV pool 1,372,579 tokens, prefix cache and KV events on, instant prefill, two slots); the
gateway subscribed to its events. ``gateway`` is this checkout's; ``--before DIR`` adds another
checkout's (``git worktree add DIR COMMIT``), run the same way.

Phases, per gateway:

1. **CPU per prompt**: ``--prompts`` prompts of each size, one at a time, ``max_tokens`` 1, nothing
   else running; the gateway's CPU time (``/proc/<pid>/task/*/schedstat``, ns) from the first sent to
   the last answered and its events applied (its CPU settled), less what it uses idle over as long.
2. **Beside a stream**: one stream decoding at 50 tokens/s through the gateway; its largest gap
   between two text chunks while nothing arrives (3 s), then while the same prompts arrive one at a
   time; the gateway's event loop lag over the arrivals (``gateway_event_loop_lag_seconds``: the
   samples over 10 ms, and the bucket of the longest).
3. **Direct** (this checkout's gateway only): the same prompts sent straight to the simulator, each
   counted (``/tokenize``) then sent as the gateway does, while the stream runs through the gateway:
   the stream's gap growth then is the simulator's own share (and that of the gateway applying the
   events).
4. **Queued memory**: both slots held by streams, :data:`QUEUED` counted 1M-token requests waiting
   in the queue; the gateway's RSS per waiting request.

Printed: each gateway's CPU per prompt by size, its longest loop lag, the stream's largest gap minus
its quiet one (through the gateway vs direct), its RSS per queued 1M-token request, and the targets
met or not: CPU <= 0.10 s per 1M-token prompt and <= 0.02 s per 150k, no loop lag over 10 ms, <= 8
MiB per queued 1M-token request.

Usage::

    .venv/bin/python -m bench.large_prompts [--prompts 4] [--before DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.bench_gateway import targets_table
from bench.common import LOAD_CPU, MODEL, BenchError, chat_body, gateway, make_keys, pinned, sse_events
from bench.queue_scale import memory_mb
from tests.support.probes import scrape
from tests.support.servers import free_port

#: Prompt sizes measured, tokens (the simulator's tokenizer: 4 characters an id, 7 ids of template).
SIZES = (150_000, 1_000_000)
#: The deployment's backend: context and KV pool, tokens.
CONTEXT, POOL = 1_048_576, 1_372_579
#: The targets: gateway CPU per prompt by size, s; the loop's longest lag, s.
CPU_TARGET_S = {150_000: 0.02, 1_000_000: 0.10}
LAG_TARGET_S = 0.01
#: The running stream's decode speed (tokens/s) and how long it lasts at most (tokens).
STREAM_TPS, STREAM_TOKENS = 50, 20_000
QUIET_S = 3.0
#: 1M-token requests queued at once (phase 4), and the target of the gateway's RSS per such, MiB.
QUEUED, QUEUED_MIB_TARGET = 8, 8.0
CHAT = "/v1/chat/completions"
JSON = {"content-type": "application/json"}


def prompt_bytes(size: int, index: int) -> bytes:
    """A chat request of ``size`` prompt tokens, ``max_tokens`` 1, its start distinct per ``index``
    (no cached prefix), as JSON."""
    head = f"Large prompt {index:06d} of {size} tokens. "
    filler = "The quick brown fox jumps over the lazy dog. "
    text = (head + filler * (4 * (size - 7) // len(filler) + 1))[: 4 * (size - 7)]
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 1}
    return json.dumps(body).encode()


def cpu_ns(pid: int) -> int:
    """CPU time of process ``pid``, all its threads, ns (the scheduler's, not the 10 ms ticks of
    ``/proc/<pid>/stat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


async def settled(pid: int, idle_ns_per_s: float) -> int:
    """Wait until process ``pid`` uses no more CPU than idle over 0.3 s; its CPU then, ns."""
    last = cpu_ns(pid)
    while True:
        await asyncio.sleep(0.3)
        now = cpu_ns(pid)
        if now - last <= 0.3 * idle_ns_per_s + 1_000_000:
            return now
        last = now


async def idle_rate(pid: int, seconds: float = 2.0) -> float:
    """Process ``pid``'s CPU use while nothing is sent, ns a second."""
    before, start = cpu_ns(pid), time.perf_counter()
    await asyncio.sleep(seconds)
    return (cpu_ns(pid) - before) / (time.perf_counter() - start)


def lag_buckets(url: str) -> dict[float, float]:
    """The gateway's ``gateway_event_loop_lag_seconds`` buckets (``le`` -> count); empty if it has none."""
    bucket = "gateway_event_loop_lag_seconds_bucket{le="
    return {float(name[len(bucket) : -1]): n for name, n in scrape(url).items() if name.startswith(bucket)}


def lag_figures(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """Between two scrapes: the samples, those over :data:`LAG_TARGET_S`, and the upper bound of the
    longest's bucket (s; inf: over the last finite one)."""
    if not after:
        return {"samples": None, "over_target": None, "longest_at_most_s": None}
    counts = {le: after[le] - before.get(le, 0.0) for le in after}
    total = counts[float("inf")]
    bounds = sorted(counts)
    longest = next((le for le in bounds if counts[le] >= total), bounds[-1])
    return {"samples": total, "over_target": total - counts[LAG_TARGET_S], "longest_at_most_s": longest}


@contextlib.contextmanager
def backend(workdir: Path, name: str) -> Iterator[tuple[str, str, str]]:
    """The simulator as the deployment's backend, on CPU 1: (its url, events endpoint, replay)."""
    port = free_port()
    events, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "dspark_sim", "--port", str(port), "--log-level", "warning", "--slots", "2"]
    cmd += ["--ttft-base-s", "0", "--prefill-tps", "1e9", "--max-model-len", str(CONTEXT)]
    cmd += ["--kv-cache-tokens", str(POOL), "--kv-events-endpoint", events]
    cmd += ["--kv-events-replay-endpoint", replay]
    url = f"http://127.0.0.1:{port}"
    with pinned(workdir, f"simulator-{name}", LOAD_CPU, cmd, None, url + "/health"):
        yield url, events, replay


class Stream:
    """One stream through the gateway decoding at :data:`STREAM_TPS`: when each text chunk came."""

    def __init__(self, client: httpx.AsyncClient, target: tuple[str, dict[str, str]]) -> None:
        self.times: list[float] = []
        self.flowing = asyncio.Event()
        body = chat_body(0, STREAM_TOKENS, stream=True, decode_tps=STREAM_TPS)
        self.task = asyncio.create_task(self._read(client, target, body))

    async def _read(self, client: httpx.AsyncClient, target: tuple[str, dict[str, str]], body: Any) -> None:
        async with contextlib.aclosing(sse_events(client, target, body)) as events:
            async for now, event in events:
                if b'"content":"' in event or b'"reasoning' in event:
                    self.times.append(now)
                    if len(self.times) == 2:
                        self.flowing.set()

    def largest_gap(self, start: float, end: float) -> float:
        """The largest gap between two chunks that came between ``start`` and ``end``, s."""
        times = [t for t in self.times if start <= t <= end]
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=float("nan"))

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, BenchError):
            await self.task


#: Distinct prompts across phases: none finds another's prefix in the cache.
_INDEX = itertools.count()


async def send(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    size: int,
    count: int,
    count_first: bool = False,
) -> None:
    """``count`` distinct prompts of ``size`` tokens to the server at ``url``, one at a time, each
    counted first (``/tokenize``) with ``count_first``, as the gateway has it counted; raises
    :class:`BenchError` on a failure or a miscounted prompt."""
    for _ in range(count):
        content = prompt_bytes(size, next(_INDEX))
        if count_first:
            counted = await client.post(url + "/tokenize", content=content, headers=headers | JSON)
            if counted.status_code != 200 or counted.json()["count"] != size:
                raise BenchError(
                    f"/tokenize of a {size}-token prompt: {counted.status_code}: {counted.text[:200]}"
                )
        response = await client.post(url + CHAT, content=content, headers=headers | JSON)
        if response.status_code != 200:
            raise BenchError(f"{size}-token prompt: status {response.status_code}: {response.text[:200]}")
        counted = response.json()["usage"]["prompt_tokens"]
        if counted != size:
            raise BenchError(f"a {size}-token prompt counted as {counted}")


async def cpu_per_prompt(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], pid: int, count: int
) -> dict[int, float]:
    """Phase 1: the gateway's CPU per prompt by size, s."""
    figures: dict[int, float] = {}
    for size in SIZES:
        idle = await idle_rate(pid)
        start_ns, start = await settled(pid, idle), time.perf_counter()
        await send(client, url, headers, size, count)
        used = await settled(pid, idle) - start_ns - idle * (time.perf_counter() - start)
        figures[size] = used / count / 1e9
    return figures


async def beside_a_stream(
    client: httpx.AsyncClient, gateway_url: str, key: dict[str, str], prompts_to: str, count: int
) -> dict[str, Any]:
    """Phases 2 and 3: prompts sent to ``prompts_to`` (the gateway, or the simulator straight) one at
    a time while a stream runs through the gateway: its largest gap quiet and busy, s, and the
    gateway's loop lag over the arrivals."""
    stream = Stream(client, (gateway_url + CHAT, key))
    try:
        await asyncio.wait_for(stream.flowing.wait(), 60)
        quiet_start = time.perf_counter()
        await asyncio.sleep(QUIET_S)
        lag_before, busy_start = lag_buckets(gateway_url), time.perf_counter()
        direct = prompts_to != gateway_url
        for size in SIZES:
            await send(client, prompts_to, {} if direct else key, size, count, count_first=direct)
        busy_end = time.perf_counter()
        lag = lag_figures(lag_before, lag_buckets(gateway_url))
        if stream.task.done():
            stream.task.result()  # its failure, if it failed
            raise BenchError("the stream ended before the prompts did")
    finally:
        await stream.close()
    quiet = stream.largest_gap(quiet_start, busy_start)
    busy = stream.largest_gap(busy_start, busy_end)
    return {"quiet_gap_s": quiet, "busy_gap_s": busy, "gap_growth_s": busy - quiet, "loop_lag": lag}


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid``, MiB."""
    return memory_mb(pid)["VmRSS"] * 1e6 / 2**20


async def queued_memory(client: httpx.AsyncClient, gateway_url: str, key: dict[str, str], pid: int) -> float:
    """Phase 4: the gateway's RSS per counted 1M-token request waiting in its queue, MiB: both slots
    held by streams, :data:`QUEUED` such requests sent, RSS once all wait, less RSS before."""
    streams = [Stream(client, (gateway_url + CHAT, key)) for _ in range(2)]
    try:
        for stream in streams:
            await asyncio.wait_for(stream.flowing.wait(), 60)
        await asyncio.sleep(1)
        before = rss_mib(pid)
        size = SIZES[-1]
        waiting: list[asyncio.Task[httpx.Response]] = []
        for _ in range(QUEUED):  # one at a time: each counted alone (a key's counts in flight are bounded)
            content = prompt_bytes(size, next(_INDEX))
            waiting.append(
                asyncio.create_task(client.post(gateway_url + CHAT, content=content, headers=key | JSON))
            )
            while scrape(gateway_url)["gateway_queue_depth"] < len(waiting):
                if any(task.done() for task in waiting):
                    raise BenchError("a queued request ended before the others were queued")
                await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        per_request = (rss_mib(pid) - before) / QUEUED
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    finally:
        for stream in streams:
            await stream.close()
    return per_request


async def measure(workdir: Path, name: str, count: int, environ: dict[str, str] | None) -> dict[str, Any]:
    """One gateway's figures (phases 1 and 2, and 3 for this checkout's)."""
    database = f"sqlite+aiosqlite:///{workdir / f'{name}.db'}"
    key = {"Authorization": f"Bearer {(await make_keys(database, ['large']))['large']}"}
    with backend(workdir, name) as (sim_url, events, replay):
        settings = {"kv_events": events, "kv_events_replay": replay, "queue_max_per_key": 64}
        with gateway(workdir, name, sim_url, 2, settings, environ) as (gateway_url, pid):
            async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
                for size in SIZES:  # warm: the first requests' imports, pools and caches
                    await send(client, gateway_url, key, size, 1)
                figures: dict[str, Any] = {
                    "cpu_s": await cpu_per_prompt(client, gateway_url, key, pid, count)
                }
                figures["through_gateway"] = await beside_a_stream(
                    client, gateway_url, key, gateway_url, count
                )
                if environ is None:
                    figures["direct"] = await beside_a_stream(client, gateway_url, key, sim_url, count)
                figures["queued_mib_per_1m_request"] = await queued_memory(client, gateway_url, key, pid)
    return figures


def targets(report: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Each target: (target, the figure that decides it, met?); None when not measured."""
    mine = report["gateway"]
    rows: list[tuple[str, str, bool | None]] = []
    before = report.get("before")
    for size, limit in CPU_TARGET_S.items():
        figure = f"{mine['cpu_s'][size]:.3f} s"
        if before is not None:
            figure += (
                f" (before {before['cpu_s'][size]:.3f} s, x{before['cpu_s'][size] / mine['cpu_s'][size]:.1f})"
            )
        rows.append(
            (f"gateway CPU per {size:,}-token prompt <= {limit} s", figure, mine["cpu_s"][size] <= limit)
        )
    queued = mine["queued_mib_per_1m_request"]
    figure = f"{queued:.1f} MiB"
    if before is not None:
        figure += f" (before {before['queued_mib_per_1m_request']:.1f} MiB)"
    rows.append(
        (f"RSS per queued 1M-token request <= {QUEUED_MIB_TARGET:g} MiB", figure, queued <= QUEUED_MIB_TARGET)
    )
    lag = mine["through_gateway"]["loop_lag"]
    longest = lag["longest_at_most_s"] * 1000
    figure = f"{lag['over_target']:.0f} of {lag['samples']:.0f} samples over; longest <= {longest:g} ms"
    rows.append(
        (f"event loop lag while they arrive <= {LAG_TARGET_S * 1000:g} ms", figure, lag["over_target"] == 0)
    )
    for name in ("gateway", "before"):
        if name in report:
            arms = report[name]
            growth = [arms["through_gateway"]["gap_growth_s"]]
            text = f"{growth[0] * 1000:+.0f} ms through the gateway"
            if "direct" in arms:
                text += f", {arms['direct']['gap_growth_s'] * 1000:+.0f} ms sent straight to the simulator"
            rows.append((f"{name}: a stream's largest gap, busy minus quiet", text, None))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4, help="prompts of each size per phase")
    parser.add_argument("--before", type=Path, help="another checkout of the gateway, measured the same way")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    report: dict[str, Any] = {"prompts": args.prompts}
    arms: dict[str, dict[str, str] | None] = {"gateway": None}
    if args.before is not None:
        arms["before"] = {"PYTHONPATH": str(args.before.resolve())}
        head = ["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"]
        commit = subprocess.run(head, capture_output=True, text=True, check=True)
        report["before_commit"] = commit.stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-large-") as tmp:
        for name, environ in arms.items():
            report[name] = asyncio.run(measure(Path(tmp), name, args.prompts, environ))
            print(name, json.dumps(report[name], default=str), flush=True)
    rows = targets(report)
    report["targets"] = [{"target": t, "figure": f, "met": m} for t, f, m in rows]
    print(targets_table(rows))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
