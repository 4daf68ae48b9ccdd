"""Part 5 of the gateway benchmark: a real vLLM (CPU build) with and without the gateway in front.

One vLLM OpenAI server serves the scripted tiny model exactly as the end-to-end tests start it
(``tests/e2e/conftest.py``: ``--max-num-seqs 2``, deepseek_r1 reasoning parser, ngram speculation,
per-request metrics), and one ``dspark-gateway serve`` sits in front of it (``GATEWAY_SLOTS=2``,
``GATEWAY_SPEC_COUNTERS=never``, an SQLite ledger in the work directory), beside the zero-work TCP
relay of parts 1-2 (``bench/tcp_relay.py``) as a third path. Nothing is pinned: vLLM needs the
cores, so the gateway, the relay and this load generator share them with vLLM, and what a proxy costs
shows up as lost throughput: its CPU time (vLLM's engine core keeps one core busy; its API server,
the proxy and the load generator share the other; every relayed chunk is a loopback read and write
more) and its added latency per request (the closed loop leaves a sequence slot idle a little longer
between two requests). That loss is what is measured; the relay's is what *any* process in the path
costs vLLM on this machine, the gateway's beyond it is its own.

Method: 2 concurrent streams (``stream: true``, ``ignore_eos: true``, a fixed ``max_tokens``,
temperature 0, ``stream_options.include_usage``), each running the same number of requests one after
the other, make a *round*; aggregate tokens/s = completion tokens of all requests of the round (from
each final ``usage`` chunk) / the round's wall time. After a warm-up of every path, which also sizes
the rounds (about ``round_s`` seconds each), rounds run interleaved in *groups* of one round per
path, the order within a group cycling through the six permutations of the three paths, so a drift
of the machine weighs on all paths alike; the ratios to direct are taken per group, and reported with
their spread and a 95 % confidence interval: on these VMs even a plain CPU loop varies by +-15 %
from one second to the next (no steal shows), so single rounds scatter by about 10 % and only many
groups resolve a few per cent. All paths send byte-identical bodies (the thinking mode is spelled
out as ``chat_template_kwargs``, so the gateway's default does not change the prompt); the one
difference left is the gateway's own: it always asks vLLM for usage on every chunk
(``continuous_usage_stats``) for its telemetry. Every request must return exactly ``max_tokens``
completion tokens, so all paths decode the same tokens.

Usage::

    .venv/bin/python -m bench.real_vllm [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import BenchError, Target, cpu_seconds, make_keys, pct, sse_events
from bench.tcp_relay import tcp_relay
from tests.e2e.conftest import DEFAULT_ARGS
from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.vllm_server import CACHE_DIR, TINY_MODEL_NAME, VLLMServer, ensure_tiny_model

STREAMS = 2  # concurrent streams = vLLM --max-num-seqs = GATEWAY_SLOTS
#: Spelled out in both paths' bodies: what the gateway would otherwise add (its default, "low").
THINKING = {"thinking": True, "reasoning_effort": "low"}
PATHS = ("direct", "relay", "gateway")
PROXIES = ("relay", "gateway")  # the paths with a process of their own in front of vLLM
TARGET = 0.97  # gateway tokens/s >= 97 % of direct
#: Student's t, two-sided 95 %, for 1..30 degrees of freedom (then the normal 1.96).
# fmt: off
T95: tuple[float, ...] = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
# fmt: on


def chat_body(index: int, max_tokens: int) -> dict[str, Any]:
    """A streamed chat request decoding exactly ``max_tokens`` tokens (the scripted chain, looped)."""
    return {
        "model": TINY_MODEL_NAME,
        "messages": [{"role": "user", "content": f"Benchmark request {index}: write a paragraph."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": THINKING,
    }


async def stream_tokens(
    client: httpx.AsyncClient, target: Target, body: dict[str, Any]
) -> tuple[float, float, int, int]:
    """One streamed request: (TTFT s, whole request s, completion tokens from the final usage, text chunks).

    TTFT ends at the read holding the first ``data:`` event with a choice delta that has text.
    """
    start = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] | None = None
    chunks = 0
    async for now, event in sse_events(client, target, body):
        if not event.startswith(b"data: {"):
            continue  # [DONE], keep-alive comments
        chunk = json.loads(event[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        delta = chunk["choices"][0].get("delta", {}) if chunk.get("choices") else {}
        if any(delta.get(f) for f in ("content", "reasoning", "reasoning_content")):
            chunks += 1
            if first is None:
                first = now
    if first is None or usage is None:
        raise BenchError(f"stream ended without {'content' if first is None else 'usage'}")
    return first - start, time.perf_counter() - start, int(usage["completion_tokens"]), chunks


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every live process in process group ``pgid`` (vLLM's), seconds."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def machine_seconds() -> tuple[float, float]:
    """(busy, steal) CPU time of the whole machine so far, seconds: busy is neither idle, I/O wait nor
    steal (time the hypervisor gave this VM's vCPUs to someone else)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - fields[3] - fields[4] - fields[7]) / tick, fields[7] / tick


class Meter:
    """Wall time and CPU seconds of the proxies (``proxy_pids``: name -> pid), vLLM's process group,
    this load generator, everything else on the machine ("others": e.g. a CI run, plus kernel work
    charged to no process) and steal."""

    def __init__(self, proxy_pids: dict[str, int], vllm_pgid: int) -> None:
        self.proxy_pids, self.vllm_pgid = proxy_pids, vllm_pgid
        self.start_cpu = self._cpu()
        self.start = time.perf_counter()

    def _cpu(self) -> dict[str, float]:
        busy, steal = machine_seconds()
        return {
            **{name: cpu_seconds(pid) for name, pid in self.proxy_pids.items()},
            "vllm": group_cpu_seconds(self.vllm_pgid),
            "load": cpu_seconds(os.getpid()),
            "machine": busy,
            "steal": steal,
        }

    def read(self) -> tuple[float, dict[str, float]]:
        """(wall seconds, CPU seconds per part since creation, "others" included)."""
        wall = time.perf_counter() - self.start
        now = self._cpu()
        used = {k: now[k] - self.start_cpu[k] for k in now}
        processes = sum(used[k] for k in (*self.proxy_pids, "vllm", "load"))
        used["others"] = used.pop("machine") - processes
        return wall, used


async def run_round(
    clients: list[httpx.AsyncClient],
    target: Target,
    per_stream: int,
    max_tokens: int,
    meter: Meter,
) -> dict[str, Any]:
    """``STREAMS`` workers, ``per_stream`` requests each back to back; tokens/s, TTFTs, CPU.

    Request ``j`` of worker ``k`` has the same body in every round of either path.
    """

    async def worker(k: int) -> list[tuple[float, float, int, int]]:
        bodies = [chat_body(k * per_stream + j, max_tokens) for j in range(per_stream)]
        return [await stream_tokens(clients[k], target, body) for body in bodies]

    results = await asyncio.gather(*(worker(k) for k in range(len(clients))))
    wall, cpu = meter.read()
    done = [r for worker_results in results for r in worker_results]
    wrong = [r[2] for r in done if r[2] != max_tokens]
    if wrong:
        raise BenchError(f"completion tokens {wrong[:5]} instead of {max_tokens}")
    tokens = sum(r[2] for r in done)
    return {
        "requests": len(done),
        "tokens": tokens,
        "text_chunks": sum(r[3] for r in done),
        "seconds": wall,
        "tokens_per_s": tokens / wall,
        "ttft_s": [r[0] for r in done],
        "request_s": [r[1] for r in done],
        "cpu_s": cpu,
    }


async def measure(
    targets: dict[str, Target],
    proxy_pids: dict[str, int],
    vllm_pgid: int,
    rounds: int,
    max_tokens: int,
    round_s: float,
) -> dict[str, Any]:
    """Warm up every path, size the rounds from the warm-up rates, then ``rounds`` groups of one round
    per path, each group's order the next of the paths' permutations."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(timeout=300)) for _ in range(STREAMS)]
        warm: dict[str, dict[str, Any]] = {}
        for per_stream in (1, 2):  # the first pass opens connections and pays one-off costs
            for name, target in targets.items():
                meter = Meter(proxy_pids, vllm_pgid)
                warm[name] = await run_round(clients, target, per_stream, max_tokens, meter)
        fastest = max(r["tokens_per_s"] for r in warm.values())  # rounds of >= round_s at that rate
        per_stream = max(1, math.ceil(round_s * fastest / (STREAMS * max_tokens)))
        orders = itertools.cycle(itertools.permutations(PATHS))
        order = [name for _ in range(rounds) for name in next(orders)]
        measured: list[tuple[str, dict[str, Any]]] = []
        for name in order:
            meter = Meter(proxy_pids, vllm_pgid)
            measured.append((name, await run_round(clients, targets[name], per_stream, max_tokens, meter)))
    return {
        "per_stream_requests": per_stream,
        "warmup_tokens_per_s": {k: round(v["tokens_per_s"], 1) for k, v in warm.items()},
        "rounds": measured,
    }


def summarize(measured: list[tuple[str, dict[str, Any]]], max_tokens: int) -> dict[str, Any]:
    """Per-path means and per-round figures; per group, each proxy's tokens/s over direct's and the
    gateway's over the relay's, with their spread; TTFT, CPU per 1,000 tokens."""
    by_path: dict[str, list[dict[str, Any]]] = {name: [r for n, r in measured if n == name] for name in PATHS}
    groups = [dict(measured[i : i + len(PATHS)]) for i in range(0, len(measured), len(PATHS))]
    out: dict[str, Any] = {"paths": {}, "order": [n for n, _ in measured]}
    for name, runs in by_path.items():
        tokens = sum(r["tokens"] for r in runs)
        seconds = sum(r["seconds"] for r in runs)
        cpu = {k: sum(r["cpu_s"][k] for r in runs) for k in runs[0]["cpu_s"]}
        ttfts = [t for r in runs for t in r["ttft_s"]]
        request_s = [t for r in runs for t in r["request_s"]]
        out["paths"][name] = {
            "rounds": len(runs),
            "requests": sum(r["requests"] for r in runs),
            "tokens": tokens,
            "tokens_per_request": sorted({r["tokens"] // r["requests"] for r in runs}),
            "text_chunks_per_request": round(
                sum(r["text_chunks"] for r in runs) / sum(r["requests"] for r in runs), 1
            ),
            "tokens_per_s_mean": round(statistics.fmean(r["tokens_per_s"] for r in runs), 2),
            "tokens_per_s_rounds": [round(r["tokens_per_s"], 2) for r in runs],
            "round_seconds": [round(r["seconds"], 2) for r in runs],
            "others_cpu_pct_rounds": [round(100 * r["cpu_s"]["others"] / r["seconds"]) for r in runs],
            "steal_cpu_pct_rounds": [round(100 * r["cpu_s"]["steal"] / r["seconds"]) for r in runs],
            "ttft_ms": {"p50": round(pct(ttfts, 50) * 1000, 1), "p90": round(pct(ttfts, 90) * 1000, 1)},
            "request_ms": {
                "p50": round(pct(request_s, 50) * 1000, 1),
                "p90": round(pct(request_s, 90) * 1000, 1),
            },
            "cpu_s_per_1000_tokens": {k: round(v * 1000 / tokens, 4) for k, v in cpu.items()},
            "cpu_busy_pct": {k: round(100 * v / seconds, 1) for k, v in cpu.items()},
        }
    paths = out["paths"]

    def ratio(over: str, under: str) -> dict[str, Any]:
        per_group = [g[over]["tokens_per_s"] / g[under]["tokens_per_s"] for g in groups]
        return {
            "of_means": round(paths[over]["tokens_per_s_mean"] / paths[under]["tokens_per_s_mean"], 4),
            "per_group": [round(r, 4) for r in per_group],
            "mean": round(statistics.fmean(per_group), 4),
            "median": round(statistics.median(per_group), 4),
            "min": round(min(per_group), 4),
            "max": round(max(per_group), 4),
            "stdev": round(statistics.stdev(per_group), 4) if len(per_group) > 1 else 0.0,
            "ci95": [round(v, 4) for v in mean_ci95(per_group)],
        }

    out["ratio"] = ratio("gateway", "direct")  # the target's
    out["relay_ratio"] = ratio("relay", "direct")
    out["gateway_vs_relay"] = ratio("gateway", "relay")
    low, high = out["ratio"]["ci95"]
    out["target"] = {
        "ratio": TARGET,
        "met": out["ratio"]["of_means"] >= TARGET,  # by the point estimate
        "resolved": not low < TARGET <= high,  # the per-group 95 % CI lies on one side of it
    }
    out["same_tokens"] = all(
        paths[name]["tokens"] == paths["direct"]["tokens"]
        and paths[name]["tokens_per_request"] == [max_tokens]
        for name in PATHS
    )
    return out


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """95 % confidence interval of the mean of ``values`` (Student's t); the mean twice for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean
    half = T95[min(len(values) - 1, len(T95)) - 1] * statistics.stdev(values) / math.sqrt(len(values))
    if len(values) - 1 > len(T95):
        half *= 1.96 / T95[-1]
    return mean - half, mean + half


def measure_real_vllm(
    workdir: Path, rounds: int = 12, max_tokens: int = 400, round_s: float = 10.0
) -> dict[str, Any]:
    """Start vLLM (tiny model) and the gateway in front of it, warm up, then ``rounds`` rounds per path
    (interleaved) of 2 streams of ``max_tokens`` tokens, each round about ``round_s`` s. Returns every figure.

    Raises :class:`BenchError` on a failed request or a token count other than ``max_tokens``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    database_url = f"sqlite+aiosqlite:///{workdir / 'ledger.db'}"
    key = asyncio.run(make_keys(database_url, ["bench-real-vllm"]))["bench-real-vllm"]
    model = ensure_tiny_model(CACHE_DIR / "models")
    began = time.monotonic()
    with VLLMServer(model, TINY_MODEL_NAME, DEFAULT_ARGS, log_dir=workdir) as vllm:
        assert vllm.proc is not None and vllm.port is not None
        env = clean_env(
            upstream=vllm.base_url,
            served_model=TINY_MODEL_NAME,
            database_url=database_url,
            slots=STREAMS,
            spec_counters="never",
        )
        gateway = GatewayProcess(env, workdir / "gateway.log").start()
        try:
            with tcp_relay(workdir, vllm.port, cpu=None) as (relay_url, relay_pid):
                path = "/v1/chat/completions"
                targets = {
                    "direct": (vllm.base_url + path, {}),
                    "relay": (relay_url + path, {}),
                    "gateway": (gateway.url + path, {"Authorization": f"Bearer {key}"}),
                }
                pids = {"relay": relay_pid, "gateway": gateway.pid}
                started = time.monotonic()
                raw = asyncio.run(measure(targets, pids, vllm.proc.pid, rounds, max_tokens, round_s))
                measure_s = time.monotonic() - started
        finally:
            gateway.stop()
        vllm_startup_s = vllm.startup_seconds
    logs = {
        name: [
            line
            for line in (workdir / log).read_text(errors="replace").splitlines()
            if any(w in line for w in ("WARNING", "ERROR", "Traceback"))
        ][-10:]
        for name, log in (("gateway", "gateway.log"), ("vllm", Path(vllm.log_path or "").name))
    }
    return {
        "setup": {
            "model": TINY_MODEL_NAME,
            "vllm_args": list(DEFAULT_ARGS),
            "streams": STREAMS,
            "max_tokens": max_tokens,
            "rounds_per_path": rounds,
            "round_s_target": round_s,
            "requests_per_stream_per_round": raw["per_stream_requests"],
        },
        "warmup_tokens_per_s": raw["warmup_tokens_per_s"],
        **summarize(raw["rounds"], max_tokens),
        "vllm_startup_s": round(vllm_startup_s or 0, 1),
        "measure_s": round(measure_s, 1),
        "total_s": round(time.monotonic() - began, 1),
        "log_problems": logs,
    }


def table(report: dict[str, Any]) -> str:
    """The figures as a fixed-width table: metric, one column per path, then relay/direct and
    gateway/direct (ratios, or differences for latencies)."""
    paths = report["paths"]
    d, r, g = (paths[name] for name in PATHS)
    header = ("metric", *PATHS, "relay/direct", "gateway/direct")
    rows: list[tuple[str, ...]] = [header]

    def add(
        label: str, values: tuple[float | str, ...], last: tuple[str, str] = ("", ""), fmt: str = ".1f"
    ) -> None:
        rows.append((label, *(f"{v:{fmt}}" if isinstance(v, float) else v for v in values), *last))

    def both(key: str, form: str) -> tuple[str, str]:
        return form.format(**report["relay_ratio"]), form.format(**report[key])

    add(
        f"aggregate tokens/s, c={STREAMS}, mean",
        tuple(p["tokens_per_s_mean"] for p in (d, r, g)),
        both("ratio", "{of_means:.3f}"),
    )
    for i in range(len(report["ratio"]["per_group"])):
        order = report["order"][len(PATHS) * i : len(PATHS) * (i + 1)]
        label = f"  group {i + 1} ({'-'.join(name[0] for name in order)})"
        values = tuple(p["tokens_per_s_rounds"][i] for p in (d, r, g))
        add(
            label,
            values,
            (f"{report['relay_ratio']['per_group'][i]:.3f}", f"{report['ratio']['per_group'][i]:.3f}"),
        )
    add(
        "ratio per group: median [min, max]",
        ("", "", ""),
        both("ratio", "{median:.3f} [{min:.3f}, {max:.3f}]"),
    )
    add("ratio per group: sd", ("", "", ""), both("ratio", "{stdev:.3f}"))
    ci = "{mean:.3f} [{ci95[0]:.3f}, {ci95[1]:.3f}]"
    add("ratio per group: mean, 95 % CI", ("", "", ""), both("ratio", ci))
    vs_relay = report["gateway_vs_relay"]
    add("gateway/relay per group: mean, 95 % CI", ("", "", ""), ("", ci.format(**vs_relay)))

    def added(key: str) -> tuple[str, str]:
        return (f"{r[key]['p50'] - d[key]['p50']:+.1f}", f"{g[key]['p50'] - d[key]['p50']:+.1f}")

    add("TTFT p50 (ms)", tuple(p["ttft_ms"]["p50"] for p in (d, r, g)), added("ttft_ms"))
    add("whole request p50 (ms)", tuple(p["request_ms"]["p50"] for p in (d, r, g)), added("request_ms"))
    cpu = [p["cpu_s_per_1000_tokens"] for p in (d, r, g)]
    add("proxy CPU s / 1,000 tokens", ("", f"{cpu[1]['relay']:.3f}", f"{cpu[2]['gateway']:.3f}"))
    add("vLLM CPU s / 1,000 tokens", tuple(c["vllm"] for c in cpu), fmt=".3f")
    parts = ("relay", "gateway", "vllm", "load", "others", "steal")
    busy = tuple(" | ".join(f"{p['cpu_busy_pct'][k]:.0f}" for k in parts) for p in (d, r, g))
    add("CPU % relay | gw | vLLM | load | others | steal", busy)
    add(
        "tokens, all requests",
        tuple(str(p["tokens"]) for p in (d, r, g)),
        ("", "same" if report["same_tokens"] else "DIFFER"),
    )
    add("text chunks / request", tuple(p["text_chunks_per_request"] for p in (d, r, g)))
    width = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            [f"{row[0]:<{width[0]}}", *(f"{v:>{w}}" for v, w in zip(row[1:], width[1:], strict=True))]
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main() -> int:
    """Run it; print the table; write the JSON report if asked. Exit 1 if a request failed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 rounds per path of about 4 s")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    rounds, round_s = (2, 4.0) if args.quick else (12, 10.0)
    started = time.time()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-real-vllm-") as workdir:
        try:
            figures = measure_real_vllm(Path(workdir), rounds=rounds, round_s=round_s)
        except BenchError as exc:
            print(f"request failed: {exc}", file=sys.stderr)
            return 1
    report = {
        "command": shlex.join([os.path.relpath(sys.executable), "-m", "bench.real_vllm", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_1m_before": round(load_before, 2),
        },
        **figures,
    }
    print(table(report))
    ratio, target = report["ratio"], report["target"]
    verdict = "met" if target["met"] else "NOT met"
    resolved = "clear of" if target["resolved"] else "straddling"
    ci = f"{ratio['ci95'][0]:.3f} .. {ratio['ci95'][1]:.3f}"
    head = f"target gateway >= {TARGET * 100:.0f} % of direct: {verdict}"
    print(f"\n{head} (ratio of means {ratio['of_means']:.3f});")
    print(f"  95 % CI of the per-group ratio {ci}, {resolved} the target")
    relay = report["relay_ratio"]
    spread = f"per group {relay['min']:.3f} .. {relay['max']:.3f}"
    print(f"  the zero-work relay: {relay['of_means']:.3f} of direct ({spread})")
    others = max(v for p in report["paths"].values() for v in p["others_cpu_pct_rounds"])
    steal = max(v for p in report["paths"].values() for v in p["steal_cpu_pct_rounds"])
    print(f"  most CPU % of other processes + kernel in a round: {others}; most steal: {steal}")
    times = f"{report['duration_s']} s; vLLM start {report['vllm_startup_s']} s"
    print(f"{report['command']}  ({times}; load average 1 min before: {load_before:.2f})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
