"""Gateway overhead against direct access to the simulator, in one run on a 2-core machine.

The gateway (``dspark-gateway serve``) runs pinned to CPU 0; the simulator and this load generator share
CPU 1. Every figure is measured twice with the same request bodies (hence the same token plans): straight
to the simulator ("direct") and through the gateway. Measured: TTFT, inter-chunk gaps (ITL) and
non-stream latency at several concurrencies; relayed SSE chunks/s at saturation with the CPU seconds
each process spends per 1,000 chunks; requests/s of short non-stream requests. See docs/performance.md.

Usage::

    .venv/bin/python -m tests.perf.bench_gateway [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from gateway.auth import KeyStore
from tests.perf.litellm_proxy import available as litellm_available
from tests.perf.litellm_proxy import litellm_proxy
from tests.support.gateway_process import BIN, clean_env
from tests.support.probes import wait_until
from tests.support.servers import free_port

MODEL = "deepseek-v4-flash-0731"
SLOTS = 512
GATEWAY_CPU, LOAD_CPU = 0, 1  # the simulator and the load generator share LOAD_CPU
#: A non-empty text field in a chunk's delta (role-only, usage-only and [DONE] events don't count).
_TEXT = re.compile(rb'"(?:content|reasoning|reasoning_content)":\s*"[^"]')


@dataclass(frozen=True)
class Plan:
    """How much to measure: (concurrency, requests) per level, token counts, throughput load."""

    levels: tuple[tuple[int, int], ...]
    stream_tokens: int = 64  # max_tokens (with ignore_eos) of the latency streams
    e2e_tokens: int = 32  # max_tokens of the non-stream latency requests
    tput_streams: int = 64
    tput_tokens: int = 4000
    tput_s: float = 15.0
    rps_concurrency: int = 64
    rps_requests: int = 3000


FULL = Plan(levels=((1, 200), (32, 960), (256, 2048)))
QUICK = Plan(levels=((1, 30), (32, 128)), tput_s=4.0, rps_requests=400)


Target = tuple[str, dict[str, str]]  # chat completions URL, headers
Clients = list[httpx.AsyncClient]


class BenchError(Exception):
    """A request that did not succeed (non-200, error event, no content)."""


def pct(values: list[float], p: int) -> float:
    """The ``p``-th percentile (1..99) of ``values`` (inclusive method); NaN when empty."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def chat_body(index: int, max_tokens: int, stream: bool) -> dict[str, Any]:
    """A chat request producing exactly ``max_tokens`` tokens; ``index`` varies the text (and the plan)."""
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Benchmark request {index}: write a paragraph."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }


async def stream_once(
    client: httpx.AsyncClient, target: Target, body: dict[str, Any], deadline: float | None = None
) -> tuple[float, list[float], int]:
    """One streamed request: (TTFT s, gaps between text chunks s, text chunks), stopping at ``deadline``
    (TTFT NaN and no chunks if that came first).

    TTFT ends at the read holding the first ``data:`` event with non-empty content/reasoning; a gap is
    the time between the reads holding two consecutive such events (0 when they arrive together).
    """
    start = time.perf_counter()
    first: float | None = None
    gaps: list[float] = []
    last, chunks, buffer = 0.0, 0, b""
    async with client.stream("POST", target[0], json=body, headers=target[1]) as response:
        if response.status_code != 200:
            await response.aread()
            raise BenchError(f"status {response.status_code}: {response.text[:200]}")
        async for data in response.aiter_raw():
            now = time.perf_counter()
            events = (buffer + data).split(b"\n\n")
            buffer = events.pop()
            for event in events:
                if event.startswith(b'data: {"error"'):
                    raise BenchError(event[:200].decode(errors="replace"))
                if _TEXT.search(event):
                    chunks += 1
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
            if deadline is not None and now >= deadline:
                break
    if first is None:
        if deadline is not None and time.perf_counter() >= deadline:
            return float("nan"), [], 0  # cut at the deadline before its first token: not a failure
        raise BenchError("stream ended without content")
    return first - start, gaps, chunks


async def complete_once(client: httpx.AsyncClient, target: Target, body: dict[str, Any]) -> float:
    """One non-stream request; its end-to-end latency (request sent to body read), s."""
    start = time.perf_counter()
    response = await client.post(target[0], json=body, headers=target[1])
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        raise BenchError(f"status {response.status_code}: {response.text[:200]}")
    return elapsed


Job = Callable[[httpx.AsyncClient, int], Awaitable[Any]]


async def run_jobs(clients: Clients, n: int, concurrency: int, job: Job) -> tuple[list[Any], list[str]]:
    """``job(client, 0..n-1)`` by ``concurrency`` workers, worker k with ``clients[k]``; (results, errors).

    A client per worker: httpcore scans its whole pool on every request, so one client with hundreds of
    connections costs the load generator more CPU than the simulator spends answering.
    """
    indices = iter(range(n))
    results: list[Any] = []
    errors: list[str] = []

    async def worker(client: httpx.AsyncClient) -> None:
        for index in indices:
            try:
                results.append(await job(client, index))
            except (BenchError, httpx.HTTPError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(*(worker(clients[k]) for k in range(concurrency)))
    return results, errors


def machine_busy_seconds() -> float:
    """CPU time of the whole machine (all CPUs, not idle nor waiting for I/O) so far, seconds."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class Meter:
    """Wall time and CPU seconds of processes ``pids`` (name -> pid) from creation to :meth:`read`.

    ``others`` is what the rest of the machine used meanwhile (other processes, and the kernel work
    that is not charged to a process, e.g. part of loopback networking): contention shows there.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        self.machine = machine_busy_seconds()
        self.start = time.perf_counter()

    def read(self, units: int, per: int = 1) -> dict[str, Any]:
        """Seconds so far, CPU busy % per process, CPU ms per ``per`` units of work (chunks, requests)."""
        wall = time.perf_counter() - self.start
        used = {name: cpu_seconds(pid) - self.cpu[name] for name, pid in self.pids.items()}
        used["others"] = machine_busy_seconds() - self.machine - sum(used.values())
        return {
            "seconds": round(wall, 2),
            "cpu_busy_pct": {k: round(100 * v / wall, 1) for k, v in used.items()},
            f"cpu_ms_per_{per}": {k: round(v * 1000 * per / max(units, 1), 3) for k, v in used.items()},
        }


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(pct(values, 50) * 1000, 3), "p99": round(pct(values, 99) * 1000, 3)}


def _streams(target: Target, tokens: int) -> Job:
    return lambda client, i: stream_once(client, target, chat_body(i, tokens, True))


def _completions(target: Target, tokens: int) -> Job:
    return lambda client, i: complete_once(client, target, chat_body(i, tokens, False))


async def measure_level(
    clients: Clients, target: Target, plan: Plan, pids: dict[str, int], concurrency: int, n: int
) -> dict[str, Any]:
    """TTFT, ITL (streams) and end-to-end latency (non-stream) at ``concurrency``, in ms."""
    await run_jobs(clients, max(concurrency, 8), concurrency, _streams(target, 8))  # connections first
    meter = Meter(pids)
    streams, stream_errors = await run_jobs(clients, n, concurrency, _streams(target, plan.stream_tokens))
    load = meter.read(n)
    e2e, e2e_errors = await run_jobs(clients, n, concurrency, _completions(target, plan.e2e_tokens))
    gaps = [g for s in streams for g in s[1]]
    return {
        "requests": n,
        "ttft_ms": _ms([s[0] for s in streams]),
        "itl_ms": _ms(gaps) | {"gaps": len(gaps)},
        "e2e_ms": _ms(e2e),
        "stream_phase_cpu_busy_pct": load["cpu_busy_pct"],
        "error_count": len(stream_errors) + len(e2e_errors),
        "errors": (stream_errors + e2e_errors)[:5],
    }


async def measure_throughput(
    clients: Clients, target: Target, plan: Plan, pids: dict[str, int]
) -> dict[str, Any]:
    """Text chunks/s of ``plan.tput_streams`` long streams for ``plan.tput_s`` s; CPU per 1,000 chunks."""
    deadline = time.perf_counter() + plan.tput_s
    serial = iter(range(10**9))

    async def job(client: httpx.AsyncClient, _: int) -> int:
        total = 0
        while time.perf_counter() < deadline:
            body = chat_body(next(serial), plan.tput_tokens, True)
            total += (await stream_once(client, target, body, deadline))[2]
        return total

    meter = Meter(pids)
    counts, errors = await run_jobs(clients, plan.tput_streams, plan.tput_streams, job)
    load = meter.read(sum(counts), per=1000)
    chunks_per_s = round(sum(counts) / load["seconds"], 1)
    out = {"streams": plan.tput_streams, "chunks": sum(counts), "chunks_per_s": chunks_per_s}
    return out | load | {"error_count": len(errors), "errors": errors[:5]}


async def measure_rps(clients: Clients, target: Target, plan: Plan, pids: dict[str, int]) -> dict[str, Any]:
    """Requests/s of non-stream 1-token requests at ``plan.rps_concurrency``, and CPU ms per request."""
    job = _completions(target, 1)
    await run_jobs(clients, plan.rps_concurrency, plan.rps_concurrency, job)  # connections first
    meter = Meter(pids)
    done, errors = await run_jobs(clients, plan.rps_requests, plan.rps_concurrency, job)
    load = meter.read(len(done))
    requests_per_s = round(len(done) / load["seconds"], 1)
    out = {"concurrency": plan.rps_concurrency, "requests": len(done), "requests_per_s": requests_per_s}
    return out | load | {"error_count": len(errors), "errors": errors[:5]}


#: The process that answers each path, whose CPU the tables show: the simulator for the direct path.
SERVER = {"direct": "simulator", "gateway": "gateway", "litellm": "litellm"}


async def measure(plan: Plan, targets: dict[str, Target], pids: dict[str, int]) -> dict[str, Any]:
    """Every measurement, on each path in turn (direct, gateway, LiteLLM if there) with the same bodies."""
    workers = max([c for c, _ in plan.levels] + [plan.tput_streams, plan.rps_concurrency])
    out: dict[str, Any] = {"levels": {}, "throughput": {}, "rps": {}}
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(timeout=120)) for _ in range(workers)]
        for concurrency, n in plan.levels:
            out["levels"][str(concurrency)] = {
                name: await measure_level(clients, target, plan, pids, concurrency, n)
                for name, target in targets.items()
            }
        for name, target in targets.items():
            out["throughput"][name] = await measure_throughput(clients, target, plan, pids)
            await asyncio.sleep(1)  # let cut streams wind down before the next measurement
        for name, target in targets.items():
            out["rps"][name] = await measure_rps(clients, target, plan, pids)
    return out


async def _make_key(database_url: str) -> str:
    store = await KeyStore.open(database_url)
    try:
        return (await store.create("bench"))[1] or ""
    finally:
        await store.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def servers(
    workdir: Path, decode_tps: float, litellm: bool
) -> Iterator[tuple[dict[str, Target], dict[str, int]]]:
    """Start the simulator (CPU 1), the gateway (CPU 0) and, if ``litellm``, the LiteLLM proxy (CPU 0,
    idle while the gateway is measured); yield (chat completions target per path, pid per server)."""
    database_url = f"sqlite+aiosqlite:///{workdir / 'bench.db'}"
    key = asyncio.run(_make_key(database_url))
    sim_port, gw_port = free_port(), free_port()
    sim_cmd = [sys.executable, "-m", "gateway.sim", "--port", str(sim_port), "--log-level", "warning"]
    sim_cmd += ["--slots", str(SLOTS), "--decode-tps", str(decode_tps), "--ttft-base-s", "0"]
    sim_cmd += ["--prefill-tps", "1e7"]
    env = clean_env(
        upstream=f"http://127.0.0.1:{sim_port}",
        database_url=database_url,
        slots=SLOTS,
        queue_max=100_000,
        queue_max_per_key=100_000,
        spec_counters="never",
    )
    sim_url, gw_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gw_port}"
    starts = (
        ("simulator", LOAD_CPU, sim_cmd, None, sim_url + "/health"),
        ("gateway", GATEWAY_CPU, [BIN, "serve", "--port", str(gw_port)], env, gw_url + "/ready"),
    )
    path = "/v1/chat/completions"
    targets = {"direct": (sim_url + path, {}), "gateway": (gw_url + path, {"Authorization": f"Bearer {key}"})}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, cpu, cmd, proc_env, ready in starts:
            with (workdir / f"{name}.log").open("wb") as log:
                pinned = ["taskset", "-c", str(cpu), *cmd]
                procs.append(subprocess.Popen(pinned, env=proc_env, stdout=log, stderr=log))
            wait_until(functools.partial(_answers, ready), timeout_s=30, what=f"{name} ready")
        pids = {"simulator": procs[0].pid, "gateway": procs[1].pid}
        with contextlib.ExitStack() as stack:
            if litellm:
                ll_url, ll_key, pids["litellm"] = stack.enter_context(
                    litellm_proxy(workdir, sim_url, MODEL, GATEWAY_CPU)
                )
                targets["litellm"] = (ll_url + path, {"Authorization": f"Bearer {ll_key}"})
            yield targets, pids
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _log_problems(path: Path) -> list[str]:
    """The last 20 warning, error and traceback lines of a server log."""
    lines = path.read_text(errors="replace").splitlines()
    return [line for line in lines if any(w in line for w in ("WARNING", "ERROR", "Traceback"))][-20:]


def _contention() -> dict[str, bool]:
    """Other load on the machine now: a test run (pytest), a soak."""
    found = {"pytest_running": False, "soak_running": False}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = cmdline.read_bytes()
            found["pytest_running"] |= b"pytest" in argv
            found["soak_running"] |= b"tests.soak" in argv
    return found


def _capacity(phase: dict[str, Any], name: str) -> float:
    """Chunks/s one whole core could produce (simulator) or relay (a proxy) at the CPU cost per chunk
    measured in the throughput phase: what that phase would show if CPU 1 could feed it faster."""
    return 1e6 / phase["cpu_ms_per_1000"][SERVER[name]]


def _busy(by_path: dict[str, dict[str, float]]) -> list[float]:
    """CPU busy % per path: all of CPU 1 (simulator + load generator) direct, else the proxy's."""
    return [b["simulator"] + b["load"] if n == "direct" else b[SERVER[n]] for n, b in by_path.items()]


def table(report: dict[str, Any]) -> str:
    """The figures as a fixed-width table: a column per path, then each proxy's added ms (latency rows)
    or its ratio to direct (throughput rows).

    CPU rows show the CPU of the process that answers on that path (the simulator for "direct").
    "cpu1" is the simulator plus the load generator (the whole of CPU 1 when 100).
    """
    names = list(report["rps"])
    proxies = names[1:]
    rows = [("metric", *names, *(f"{n} added / ratio" for n in proxies))]

    def add(label: str, values: list[float], fmt: str, how: str) -> None:
        base = values[0]
        if how == "diff":
            extra = [f"{v - base:+.2f}" for v in values[1:]]
        else:
            extra = [f"x{v / base:.2f}" if how == "ratio" and base else "" for v in values[1:]]
        rows.append((label, *(f"{v:{fmt}}" for v in values), *extra))

    for c, level in report["levels"].items():
        for label, key in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("non-stream e2e", "e2e_ms")):
            for p in ("p50", "p99"):
                add(f"{label} {p}, c={c} (ms)", [level[n][key][p] for n in names], ".2f", "diff")
        busy = _busy({n: level[n]["stream_phase_cpu_busy_pct"] for n in names})
        add(f"CPU busy %, c={c} streams (cpu1 | proxy)", busy, ".0f", "")
    tput, rps = report["throughput"], report["rps"]
    add(
        f"chunks/s, {tput['direct']['streams']} streams",
        [tput[n]["chunks_per_s"] for n in names],
        ".0f",
        "ratio",
    )
    cpu_per_chunk = [tput[n]["cpu_ms_per_1000"][SERVER[n]] for n in names]
    add("CPU ms / 1,000 chunks (server)", cpu_per_chunk, ".0f", "ratio")
    add("CPU busy % then (cpu1 | proxy)", _busy({n: tput[n]["cpu_busy_pct"] for n in names}), ".0f", "")
    add("chunks/s one core could serve (1 s / CPU)", [_capacity(tput[n], n) for n in names], ".0f", "ratio")
    add(
        f"requests/s, 1 token, c={rps['direct']['concurrency']}",
        [rps[n]["requests_per_s"] for n in names],
        ".0f",
        "ratio",
    )
    add("CPU ms / request (server)", [rps[n]["cpu_ms_per_1"][SERVER[n]] for n in names], ".2f", "ratio")
    width = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(f"{v:<{width[0]}}" if i == 0 else f"{v:>{width[i]}}" for i, v in enumerate(row)).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main() -> int:
    """Run the benchmark; print the table; write the JSON report if asked. Exit 1 on request errors."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 32 only, fewer requests")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--decode-tps", type=float, default=2000.0, help="simulator decode speed per stream")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM proxy comparison")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    pinned = hasattr(os, "sched_setaffinity") and {GATEWAY_CPU, LOAD_CPU} <= os.sched_getaffinity(0)
    if not pinned:
        print("warning: CPUs 0 and 1 are not both available; running unpinned", file=sys.stderr)
    litellm = not args.no_litellm and litellm_available()
    if not litellm and not args.no_litellm:
        print(
            "warning: LiteLLM is not installed (bash scripts/install-litellm.sh); skipping it",
            file=sys.stderr,
        )
    before = _contention()
    with (
        tempfile.TemporaryDirectory(prefix="bench-gw-") as workdir,
        servers(Path(workdir), args.decode_tps, litellm) as (targets, pids),
    ):
        if pinned:
            os.sched_setaffinity(0, {LOAD_CPU})
        started = time.time()
        figures = asyncio.run(measure(plan, targets, pids | {"load": os.getpid()}))
        logs = {name: _log_problems(Path(workdir) / f"{name}.log") for name in pids}
    report = {
        "command": shlex.join(
            [os.path.relpath(sys.executable), "-m", "tests.perf.bench_gateway", *sys.argv[1:]]
        ),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "pinned": {"gateway": GATEWAY_CPU, "simulator+load": LOAD_CPU} if pinned else None,
        },
        "contention": {k: v or _contention()[k] for k, v in before.items()},
        "plan": asdict(plan) | {"decode_tps": args.decode_tps, "slots": SLOTS},
        **figures,
        "log_problems": logs,
    }
    print(table(report))
    phases = [v["stream_phase_cpu_busy_pct"] for lvl in figures["levels"].values() for v in lvl.values()]
    phases += [v["cpu_busy_pct"] for part in ("throughput", "rps") for v in figures[part].values()]
    report["others_cpu_pct_max"] = max(busy["others"] for busy in phases)
    print(f"\n{report['command']}  ({report['duration_s']} s; contention: {report['contention']};")
    print(f"  most CPU used by other processes + kernel in a phase: {report['others_cpu_pct_max']:.0f} %)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    errors = [lvl[n]["error_count"] for lvl in figures["levels"].values() for n in lvl]
    errors += [figures[p][n]["error_count"] for p in ("throughput", "rps") for n in figures[p]]
    if any(errors):
        print(f"request errors: {sum(errors)} (see the JSON)", file=sys.stderr)
    return 1 if any(errors) else 0


if __name__ == "__main__":
    sys.exit(main())
