"""Part 5 of the gateway benchmark: a real vLLM (CPU build) with and without the gateway in front.

One vLLM OpenAI server serves the scripted tiny model exactly as the end-to-end tests start it
(``tests/e2e/conftest.py``: ``--max-num-seqs 2``, deepseek_r1 reasoning parser, ngram speculation,
per-request metrics), and one ``dspark-gateway serve`` sits in front of it (``GATEWAY_SLOTS=2``,
``GATEWAY_SPEC_COUNTERS=never``, an SQLite ledger in the work directory). Nothing is pinned: vLLM needs
the cores, so the gateway (and this load generator) share them with vLLM, and what the gateway costs
shows up as lost throughput: its CPU time (vLLM's engine core keeps one core busy; its API server,
the gateway and the load generator share the other) and its added latency per request (the closed
loop leaves a sequence slot idle a little longer between two requests). That loss is what is measured.

Method: 2 concurrent streams (``stream: true``, ``ignore_eos: true``, a fixed ``max_tokens``,
temperature 0, ``stream_options.include_usage``), each running the same number of requests one after
the other, make a *round*; aggregate tokens/s = completion tokens of all requests of the round (from
each final ``usage`` chunk) / the round's wall time. After a warm-up of both paths, which also sizes
the rounds (about ``round_s`` seconds each), rounds run interleaved in pairs, the order flipping from
one pair to the next (direct-gateway, gateway-direct, ...), so a drift of the machine weighs on both
paths alike; the ratio gateway/direct is taken per pair, and reported with its spread and a 95 %
confidence interval: on these VMs even a plain CPU loop varies by +-15 % from one second to the next
(no steal shows), so single rounds scatter by about 10 % and only many pairs resolve a few per cent.
Both paths send byte-identical bodies (the thinking mode is spelled out as ``chat_template_kwargs``,
so the gateway's default does not change the prompt); the one difference left is the gateway's own:
it always asks vLLM for usage on every chunk (``continuous_usage_stats``) for its telemetry. Every
request must return exactly ``max_tokens`` completion tokens, so both paths decode the same tokens.

Usage::

    .venv/bin/python -m tests.perf.real_vllm [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from tests.e2e.conftest import DEFAULT_ARGS
from tests.perf.common import BenchError, Target, cpu_seconds, make_keys, pct, sse_events
from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.vllm_server import CACHE_DIR, TINY_MODEL_NAME, VLLMServer, ensure_tiny_model

STREAMS = 2  # concurrent streams = vLLM --max-num-seqs = GATEWAY_SLOTS
#: Spelled out in both paths' bodies: what the gateway would otherwise add (its default, "low").
THINKING = {"thinking": True, "reasoning_effort": "low"}
PATHS = ("direct", "gateway")
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
    """Wall time and CPU seconds of the gateway, vLLM's process group, this load generator, everything
    else on the machine ("others": e.g. a CI run, plus kernel work charged to no process) and steal."""

    def __init__(self, gateway_pid: int, vllm_pgid: int) -> None:
        self.gateway_pid, self.vllm_pgid = gateway_pid, vllm_pgid
        self.start_cpu = self._cpu()
        self.start = time.perf_counter()

    def _cpu(self) -> dict[str, float]:
        busy, steal = machine_seconds()
        return {
            "gateway": cpu_seconds(self.gateway_pid),
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
        used["others"] = used.pop("machine") - used["gateway"] - used["vllm"] - used["load"]
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
    targets: dict[str, Target], gateway_pid: int, vllm_pgid: int, rounds: int, max_tokens: int, round_s: float
) -> dict[str, Any]:
    """Warm up both paths, size the rounds from the warm-up rates, then the interleaved rounds."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(timeout=300)) for _ in range(STREAMS)]
        warm: dict[str, dict[str, Any]] = {}
        for per_stream in (1, 2):  # the first pass opens connections and pays one-off costs
            for name, target in targets.items():
                meter = Meter(gateway_pid, vllm_pgid)
                warm[name] = await run_round(clients, target, per_stream, max_tokens, meter)
        fastest = max(r["tokens_per_s"] for r in warm.values())  # rounds of >= round_s at that rate
        per_stream = max(1, math.ceil(round_s * fastest / (STREAMS * max_tokens)))
        order: list[str] = []
        for pair in range(rounds):
            order += list(PATHS if pair % 2 == 0 else reversed(PATHS))
        measured: list[tuple[str, dict[str, Any]]] = []
        for name in order:
            meter = Meter(gateway_pid, vllm_pgid)
            measured.append((name, await run_round(clients, targets[name], per_stream, max_tokens, meter)))
    return {
        "per_stream_requests": per_stream,
        "warmup_tokens_per_s": {k: round(v["tokens_per_s"], 1) for k, v in warm.items()},
        "rounds": measured,
    }


def summarize(measured: list[tuple[str, dict[str, Any]]], max_tokens: int) -> dict[str, Any]:
    """Per-path means and per-round figures, the per-pair ratio and its spread, TTFT, CPU per 1,000 tokens."""
    by_path: dict[str, list[dict[str, Any]]] = {name: [r for n, r in measured if n == name] for name in PATHS}
    pairs = [dict(measured[i : i + 2]) for i in range(0, len(measured), 2)]
    ratios = [p["gateway"]["tokens_per_s"] / p["direct"]["tokens_per_s"] for p in pairs]
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
    direct, gateway = out["paths"]["direct"], out["paths"]["gateway"]
    out["ratio"] = {
        "of_means": round(gateway["tokens_per_s_mean"] / direct["tokens_per_s_mean"], 4),
        "per_pair": [round(r, 4) for r in ratios],
        "mean": round(statistics.fmean(ratios), 4),
        "median": round(statistics.median(ratios), 4),
        "min": round(min(ratios), 4),
        "max": round(max(ratios), 4),
        "stdev": round(statistics.stdev(ratios), 4) if len(ratios) > 1 else 0.0,
        "ci95": [round(v, 4) for v in mean_ci95(ratios)],
    }
    low, high = out["ratio"]["ci95"]
    out["target"] = {
        "ratio": TARGET,
        "met": out["ratio"]["of_means"] >= TARGET,  # by the point estimate
        "resolved": not low < TARGET <= high,  # the per-pair 95 % CI lies on one side of it
    }
    out["same_tokens"] = (
        direct["tokens"] == gateway["tokens"]
        and direct["tokens_per_request"] == [max_tokens] == gateway["tokens_per_request"]
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
        assert vllm.proc is not None
        env = clean_env(
            upstream=vllm.base_url,
            served_model=TINY_MODEL_NAME,
            database_url=database_url,
            slots=STREAMS,
            spec_counters="never",
        )
        gateway = GatewayProcess(env, workdir / "gateway.log").start()
        try:
            path = "/v1/chat/completions"
            targets = {
                "direct": (vllm.base_url + path, {}),
                "gateway": (gateway.url + path, {"Authorization": f"Bearer {key}"}),
            }
            started = time.monotonic()
            raw = asyncio.run(measure(targets, gateway.pid, vllm.proc.pid, rounds, max_tokens, round_s))
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
    """The figures as a fixed-width table: metric, direct, gateway, ratio or difference."""
    d, g, ratio = report["paths"]["direct"], report["paths"]["gateway"], report["ratio"]
    rows: list[tuple[str, ...]] = [("metric", "direct", "gateway", "gateway/direct")]

    def add(label: str, a: float | str, b: float | str, last: str = "", fmt: str = ".1f") -> None:
        rows.append((label, *(f"{v:{fmt}}" if isinstance(v, float) else v for v in (a, b)), last))

    add(f"aggregate tokens/s, c={STREAMS}, mean", d["tokens_per_s_mean"], g["tokens_per_s_mean"])
    rows[-1] = (*rows[-1][:3], f"{ratio['of_means']:.3f}")
    pairs = zip(d["tokens_per_s_rounds"], g["tokens_per_s_rounds"], ratio["per_pair"], strict=True)
    for i, (a, b, r) in enumerate(pairs):
        add(f"  pair {i + 1} ({report['order'][2 * i]} first)", a, b, f"{r:.3f}")
    spread = f"{ratio['median']:.3f} [{ratio['min']:.3f}, {ratio['max']:.3f}] sd {ratio['stdev']:.3f}"
    add("ratio per pair: median [min, max] sd", "", "", spread)
    add(
        "ratio per pair: mean, 95 % CI",
        "",
        "",
        f"{ratio['mean']:.3f} [{ratio['ci95'][0]:.3f}, {ratio['ci95'][1]:.3f}]",
    )
    ttft = d["ttft_ms"]["p50"], g["ttft_ms"]["p50"]
    add("TTFT p50 (ms)", *ttft, f"{ttft[1] - ttft[0]:+.1f}")
    whole = d["request_ms"]["p50"], g["request_ms"]["p50"]
    add("whole request p50 (ms)", *whole, f"{whole[1] - whole[0]:+.1f}")
    cpu = d["cpu_s_per_1000_tokens"], g["cpu_s_per_1000_tokens"]
    add("gateway CPU s / 1,000 tokens", "", f"{cpu[1]['gateway']:.3f}")
    add("vLLM CPU s / 1,000 tokens", cpu[0]["vllm"], cpu[1]["vllm"], fmt=".3f")
    busy = [
        " | ".join(f"{p['cpu_busy_pct'][k]:.0f}" for k in ("gateway", "vllm", "load", "others", "steal"))
        for p in (d, g)
    ]
    add("CPU % gw | vLLM | load | others | steal", *busy)
    add(
        "tokens, all requests",
        str(d["tokens"]),
        str(g["tokens"]),
        "same" if report["same_tokens"] else "DIFFER",
    )
    add("text chunks / request", d["text_chunks_per_request"], g["text_chunks_per_request"])
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"{a:<{width[0]}}  {b:>{width[1]}}  {c:>{width[2]}}  {e:>{width[3]}}".rstrip() for a, b, c, e in rows
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
        "command": shlex.join([os.path.relpath(sys.executable), "-m", "tests.perf.real_vllm", *sys.argv[1:]]),
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
    print(f"  95 % CI of the per-pair ratio {ci}, {resolved} the target")
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
