"""Parts 1, 2 and 4 of the benchmark: what the gateway adds to latency and costs in CPU, against direct
access to the simulator and against the LiteLLM proxy in the gateway's place.

Every figure is measured on each path in turn with the same request bodies (hence the same token
plans): straight to the simulator ("direct"), through a zero-work TCP relay on the gateway's CPU
("relay": what any proxy there adds), through nginx as a pure HTTP relay on that CPU ("nginx": a C
proxy's cost, :mod:`bench.nginx_relay`), through the gateway, through LiteLLM. Measured: TTFT,
inter-chunk gaps (ITL) and non-stream latency at several concurrencies; relayed SSE chunks/s at
saturation with the CPU each server spends per 1,000 chunks; requests/s of short non-stream requests.
See docs/performance.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import nginx_relay
from bench.common import (
    GATEWAY_CPU,
    LOAD_CPU,
    MODEL,
    BenchError,
    Meter,
    Target,
    chat_body,
    cpu_seconds,
    gateway,
    machine_busy_seconds,
    make_keys,
    pct,
    pinned,
    simulator_and_gateway,
    sse_events,
)
from bench.litellm_proxy import litellm_proxy
from bench.sse_counter import TEXT, run_streams
from bench.tcp_relay import tcp_relay
from tests.support.servers import free_port

SLOTS = 512
#: What the OTLP receiver of the traced gateway got: ``{"exports": n, "spans": n}``, in the workdir.
OTLP_COUNTS = "otlp-counts.json"


@dataclass(frozen=True)
class Plan:
    """How much to measure: (concurrency, requests, rounds) per level, token counts, throughput load.

    A level's requests run in ``rounds`` interleaved rounds per path (direct, relay, gateway, LiteLLM,
    then the reverse order, ...), so a drift of the machine weighs on every path alike: 8 at 32 streams,
    where the gateway's TTFT target is decided (4 rounds gave per-round added p50s from -0.4 to +2.2 ms),
    each of 240 streams as before (7.5 per worker: fewer would put more of each round in its ramp).
    """

    levels: tuple[tuple[int, int, int], ...]
    decode_tps: float = 2000.0  # the simulator's decode speed per stream, tokens/s (--decode-tps)
    #: What a latency level's streams decode together at most, tokens/s: each stream of level c runs at
    #: min(decode_tps, this / c), so every level offers ~2,200 chunks/s, which CPU 1 (simulator + load
    #: generator) serves without saturating; the saturated case is the throughput phase.
    level_tokens_per_s: float = 6400.0
    stream_tokens: int = 64  # max_tokens (with ignore_eos) of the latency streams
    e2e_tokens: int = 32  # max_tokens of the non-stream latency requests
    tput_streams: int = 64
    tput_tokens: int = 4000
    tput_s: float = 15.0
    rps_concurrency: int = 64
    rps_requests: int = 3000


FULL = Plan(levels=((1, 200, 4), (32, 1920, 8), (256, 2048, 4)))
QUICK = Plan(levels=((1, 32, 2), (32, 128, 2)), tput_s=4.0, rps_requests=400)
#: The ``x-request-id`` the simulator got for a latency stream, which its trace line carries: the one the
#: client sent (``bench-<path>-c<concurrency>-r<round>-<index>``) when the direct path and the relay pass
#: it on, the gateway's own (``req-<32 hex>``, its answer's ``x-request-id``) through the gateway.
_BENCH_ID = re.compile(r"bench-[a-z]+-c\d+-r\d+-\d+|req-[0-9a-f]{32}")

#: The parts of :func:`ttft_split`, in order, with the table's labels.
SPLIT_PARTS = {
    "to_backend": "request to backend",
    "backend": "backend to 1st token",
    "to_client": "1st token to client",
}


Clients = list[httpx.AsyncClient]


async def stream_once(
    client: httpx.AsyncClient,
    target: Target,
    body: dict[str, Any],
    deadline: float | None = None,
    answered: dict[str, str] | None = None,
) -> tuple[float, list[float], int, float]:
    """One streamed request: (TTFT s, gaps between text chunks s, text chunks, ``perf_counter`` time it
    was sent), stopping at ``deadline`` (TTFT NaN and no chunks if that came first); its response's
    headers into ``answered``.

    TTFT ends at the read holding the first ``data:`` event with non-empty content/reasoning; a gap is
    the time between the reads holding two consecutive such events (0 when they arrive together).
    """
    start = time.perf_counter()
    first: float | None = None
    gaps: list[float] = []
    last, chunks = 0.0, 0
    async with contextlib.aclosing(sse_events(client, target, body, answered)) as events:
        async for now, event in events:
            if TEXT.search(event):
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
            return float("nan"), [], 0, start  # cut at the deadline before its first token: not a failure
        raise BenchError("stream ended without content")
    return first - start, gaps, chunks, start


async def complete_once(client: httpx.AsyncClient, target: Target, body: dict[str, Any]) -> float:
    """One non-stream request; its end-to-end latency (request sent to body read), s."""
    start = time.perf_counter()
    response = await client.post(target[0], json=body, headers=target[1])
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        raise BenchError(f"status {response.status_code}: {response.text[:200]}")
    return elapsed


Job = Callable[[httpx.AsyncClient, int], Awaitable[Any]]


async def run_jobs(
    clients: Clients, n: int, concurrency: int, job: Job, ramp_s: float = 0.0
) -> tuple[list[Any], list[str]]:
    """``job(client, 0..n-1)`` by ``concurrency`` workers, worker k with ``clients[k]``; (results, errors).

    A client per worker: httpcore scans its whole pool on every request, so one client with hundreds of
    connections costs the load generator more CPU than the simulator spends answering. ``ramp_s``:
    worker k starts ``k / concurrency * ramp_s`` seconds late, so the workers don't all start (and,
    with equal requests, keep restarting) in one burst.
    """
    indices = iter(range(n))
    results: list[Any] = []
    errors: list[str] = []

    async def worker(k: int) -> None:
        client = clients[k]
        await asyncio.sleep(k / concurrency * ramp_s)
        for index in indices:
            try:
                results.append(await job(client, index))
            except (BenchError, httpx.HTTPError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    return results, errors


async def settle(pids: dict[str, int], quiet_pct: float = 10.0, timeout_s: float = 10.0) -> float | None:
    """Wait until every process of ``pids`` used under ``quiet_pct`` % of a CPU over the last 0.25 s,
    and the whole machine under twice that, at most ``timeout_s``: a proxy still winding down its
    last round (LiteLLM keeps its core busy for seconds after a round at 256 streams) must not run
    into the next path's round. Returns the seconds it waited, None if the machine never got quiet."""
    start = time.monotonic()
    while time.monotonic() < start + timeout_s:
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        machine = machine_busy_seconds()
        await asyncio.sleep(0.25)
        quiet = all(cpu_seconds(pid) - before[name] < quiet_pct / 400 for name, pid in pids.items())
        if quiet and machine_busy_seconds() - machine < 2 * quiet_pct / 400:  # nor anything else
            return round(time.monotonic() - start, 2)
    return None


#: Longest settle before a throughput or requests/s phase, s: after its throughput phase LiteLLM stayed
#: ~99 % busy past a 10 s settle, through the next phase's first path (runs C–G).
PHASE_SETTLE_S = 60.0


def _ms(values: list[float]) -> dict[str, float]:
    mean = 1000 * sum(values) / len(values) if values else float("nan")
    return {
        "p50": round(pct(values, 50) * 1000, 3),
        "p99": round(pct(values, 99) * 1000, 3),
        "mean": round(mean, 3),
    }


def _streams(target: Target, tokens: int, decode_tps: float | None = None, tag: str = "") -> Job:
    """Streams of ``tokens``: :func:`stream_once`'s figures and the request id the model server got;
    with a ``tag``, request i is sent with ``x-request-id: bench-<tag>-<i>``, which the direct path and
    the relay pass on and the gateway answers with its own, the one it passed on (else the id is "")."""

    async def job(client: httpx.AsyncClient, i: int) -> tuple[float, list[float], int, float, str]:
        url, headers = target
        request_id = f"bench-{tag}-{i}" if tag else ""
        tagged = (url, {**headers, "x-request-id": request_id}) if tag else target
        answered: dict[str, str] = {}
        figures = await stream_once(client, tagged, chat_body(i, tokens, True, decode_tps), answered=answered)
        return (*figures, answered.get("x-request-id", request_id) if tag else "")

    return job


def _completions(target: Target, tokens: int, decode_tps: float | None = None) -> Job:
    return lambda client, i: complete_once(client, target, chat_body(i, tokens, False, decode_tps))


def level_decode_tps(plan: Plan, concurrency: int) -> float | None:
    """Per-stream decode speed of a latency level, tokens/s (None: the simulator's own speed)."""
    speed = plan.level_tokens_per_s / concurrency
    return speed if speed < plan.decode_tps else None


async def sample_level(
    clients: Clients, target: Target, plan: Plan, pids: dict[str, int], concurrency: int, n: int, tag: str
) -> dict[str, Any]:
    """One round of a latency level on one path: ``n`` streams (request ids tagged ``tag``) then ``n``
    non-stream requests at ``concurrency``; the raw samples (s), each stream's request id and send
    time, and the stream phase's CPU busy %."""
    speed = level_decode_tps(plan, concurrency)
    await run_jobs(clients, max(concurrency, 8), concurrency, _streams(target, 8))  # connections first
    meter = Meter(pids)
    job = _streams(target, plan.stream_tokens, speed, tag)
    ramp_s = plan.stream_tokens / (speed or plan.decode_tps)  # starts spread over one stream's length
    streams, stream_errors = await run_jobs(clients, n, concurrency, job, ramp_s)
    load = meter.read(n)  # CPU per stream of each process, ms
    job = _completions(target, plan.e2e_tokens, speed)
    e2e, e2e_errors = await run_jobs(clients, n, concurrency, job, ramp_s / 2)
    return {
        "ttft": [s[0] for s in streams],
        "sent": {s[4]: (s[3], s[0]) for s in streams},
        "gaps": [g for s in streams for g in s[1]],
        "e2e": e2e,
        "busy": load["cpu_busy_pct"],
        "cpu_ms": load["cpu_ms_per_1"],
        "errors": stream_errors + e2e_errors,
    }


def summarize_level(rounds: list[dict[str, Any]], plan: Plan, concurrency: int) -> dict[str, Any]:
    """A path's figures at one level, pooled over its rounds (ms); per-round TTFT p50s alongside."""
    pooled = {k: [v for r in rounds for v in r[k]] for k in ("ttft", "gaps", "e2e")}
    errors = [e for r in rounds for e in r["errors"]]
    busy = {k: round(statistics.fmean(r["busy"][k] for r in rounds), 1) for k in rounds[0]["busy"]}
    cpu_ms = {k: round(statistics.fmean(r["cpu_ms"][k] for r in rounds), 3) for k in rounds[0]["cpu_ms"]}
    return {
        "requests": len(pooled["ttft"]),
        "rounds": len(rounds),
        "decode_tps": level_decode_tps(plan, concurrency) or plan.decode_tps,
        "ttft_ms": _ms(pooled["ttft"]),
        "ttft_p50_ms_rounds": [round(pct(r["ttft"], 50) * 1000, 3) for r in rounds],
        "itl_ms": _ms(pooled["gaps"]) | {"gaps": len(pooled["gaps"])},
        "e2e_ms": _ms(pooled["e2e"]),
        "stream_phase_cpu_busy_pct": busy,
        "stream_phase_cpu_ms_per_stream": cpu_ms,
        "error_count": len(errors),
        "errors": errors[:5],
    }


async def measure_throughput(target: Target, plan: Plan, pids: dict[str, int]) -> dict[str, Any]:
    """Text chunks/s of ``plan.tput_streams`` long streams for ``plan.tput_s`` s (the lean load generator,
    :mod:`bench.sse_counter`), CPU per 1,000 chunks, and the gaps between a stream's chunks (ITL)."""
    deadline = time.perf_counter() + plan.tput_s

    def body(serial: int) -> dict[str, Any]:
        return chat_body(serial, plan.tput_tokens, True)

    meter = Meter(pids)
    counts, errors = await run_streams(target, plan.tput_streams, deadline, body)
    chunks = sum(count.chunks for count in counts)
    load = meter.read(chunks, per=1000)
    out = {
        "streams": plan.tput_streams,
        "chunks": chunks,
        "chunks_per_s": round(chunks / load["seconds"], 1),
        "itl_ms": _ms([gap for count in counts for gap in count.gaps]),
    }
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
SERVER = {
    "direct": "simulator",
    "relay": "relay",
    "nginx": "nginx",
    "gateway": "gateway",
    "traced": "traced",
    "before": "before",
    "litellm": "litellm",
}


def ttft_split(sent: dict[str, tuple[float, float]], trace: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Where a path's TTFT goes, from each stream's send time and TTFT (``sent``: request id ->
    (``perf_counter`` s, TTFT s)) and the simulator's trace line of it (``trace``, by request id;
    ``dspark_sim.trace``: ``arrival`` once its request was parsed, ``first_token`` when the engine
    emitted its first token, both ``time.monotonic()``): per stream, ``to_backend`` = arrival - sent
    (the request's way to the model server, through the path), ``backend`` = first_token - arrival,
    ``to_client`` = the client's first content - first_token; the three add up to its TTFT. Reported
    as each part's p50 and mean, ms (means add up to the mean TTFT; p50s need not add up to the
    p50), None when no stream matched. ``requests`` counts the streams, ``matched`` those with a
    trace line: a proxy that does not pass ``x-request-id`` on (LiteLLM) has none. Needs
    ``perf_counter`` and ``monotonic`` to be one clock (CPython on Linux: ``CLOCK_MONOTONIC``, which
    all processes share): :func:`add_ttft_split` checks that."""
    parts: dict[str, list[float]] = {part: [] for part in SPLIT_PARTS}
    for request_id, (start, ttft) in sent.items():
        line = trace.get(request_id)
        if line is None or line["first_token"] is None or math.isnan(ttft):
            continue
        parts["to_backend"].append(line["arrival"] - start)
        parts["backend"].append(line["first_token"] - line["arrival"])
        parts["to_client"].append(start + ttft - line["first_token"])
    split: dict[str, Any] = {"requests": len(sent), "matched": len(parts["backend"])}
    for name, values in parts.items():
        split[name] = _ms(values) if values else None
    return split


def read_trace(path: Path) -> dict[str, dict[str, Any]]:
    """The simulator's trace lines of the latency streams, by their ``x-request-id`` (:data:`_BENCH_ID`).
    Read once the simulator has stopped (it writes what it buffered then)."""
    lines: dict[str, dict[str, Any]] = {}
    for text in path.read_text().splitlines():
        found = _BENCH_ID.search(text)
        if found:
            lines[found.group()] = json.loads(text)
    return lines


#: Streams sent on each level and path: (concurrency, path) -> ``ttft_split``'s ``sent``.
Sent = dict[tuple[str, str], dict[str, tuple[float, float]]]


def add_ttft_split(figures: dict[str, Any], sent: Sent, trace: Path) -> list[str]:
    """Put each level and path's :func:`ttft_split` (``ttft_split_ms``) into ``figures`` (what
    :func:`measure` returned), from the simulator's ``trace`` file (read it after the simulator
    stopped); return what is incomplete: the direct path, the relays and the gateway pass every
    request id on, so a stream of theirs without a trace line is a fault of the measurement. Raises
    :class:`BenchError` if ``perf_counter`` and ``monotonic`` are different clocks here."""
    clocks = {time.get_clock_info(name).implementation for name in ("perf_counter", "monotonic")}
    if len(clocks) != 1:
        raise BenchError(f"perf_counter and monotonic are different clocks here: {clocks}")
    lines = read_trace(trace)
    incomplete = []
    for (concurrency, name), streams in sent.items():
        split = figures["levels"][concurrency][name]["ttft_split_ms"] = ttft_split(streams, lines)
        if name != "litellm" and split["matched"] < split["requests"]:
            incomplete.append(f"{name} at c={concurrency}: {split['matched']} of {split['requests']} streams")
    return incomplete


async def measure(
    plan: Plan, targets: dict[str, Target], pids: dict[str, int]
) -> tuple[dict[str, Any], Sent]:
    """Every measurement, on each path in turn (direct, relay, gateway, LiteLLM if there) with the same
    bodies, the latency levels in interleaved rounds; (the figures, the latency streams sent, for
    :func:`add_ttft_split`)."""
    workers = max([c for c, _, _ in plan.levels] + [plan.rps_concurrency])
    out: dict[str, Any] = {"levels": {}, "throughput": {}, "rps": {}}
    sent: Sent = {}
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx.AsyncClient(timeout=120)) for _ in range(workers)]
        for concurrency, n, level_rounds in plan.levels:
            # interleaved rounds, the path order reversed every other round: drift hits every path
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
            for index in range(level_rounds):
                order = list(targets) if index % 2 == 0 else list(reversed(targets))
                for name in order:
                    await settle(pids)
                    tag = f"{name}-c{concurrency}-r{index}"
                    sample = await sample_level(
                        clients, targets[name], plan, pids, concurrency, n // level_rounds, tag
                    )
                    rounds[name].append(sample)
                    sent.setdefault((str(concurrency), name), {}).update(sample.pop("sent"))
            out["levels"][str(concurrency)] = {
                name: summarize_level(samples, plan, concurrency) for name, samples in rounds.items()
            }
        for name, target in targets.items():
            settled = await settle(pids, timeout_s=PHASE_SETTLE_S)  # also lets cut streams wind down
            out["throughput"][name] = await measure_throughput(target, plan, pids) | {"settled_s": settled}
        for name, target in targets.items():
            settled = await settle(pids, timeout_s=PHASE_SETTLE_S)
            out["rps"][name] = await measure_rps(clients, target, plan, pids) | {"settled_s": settled}
    return out, sent


@contextlib.contextmanager
def servers(
    workdir: Path, decode_tps: float, litellm: bool, tracing: bool, before: Path | None = None
) -> Iterator[tuple[dict[str, Target], dict[str, int], Path]]:
    """The simulator (its sequence trace in ``workdir``) and the gateway with :data:`SLOTS` slots
    (nothing queues), the zero-work TCP relay (:mod:`bench.tcp_relay`, CPU 0), nginx as an HTTP relay
    (:mod:`bench.nginx_relay`, CPU 0) when it is installed, if ``tracing`` a second
    gateway ("traced") exporting its traces to an OTLP/HTTP receiver on CPU 1
    (:mod:`tests.support.otlp_receiver`, counts in ``workdir/otlp-counts.json``), with ``before`` (another
    checkout of the gateway) that checkout's gateway ("before": the same command with ``PYTHONPATH``
    at it, CPU 0), and, if ``litellm``,
    the LiteLLM proxy (CPU 0; each idle while another path is measured); yield (chat completions
    target per path, pid per server, the trace file)."""
    keys = asyncio.run(make_keys(f"sqlite+aiosqlite:///{workdir / 'gateway.db'}", ["bench"]))
    limits: dict[str, object] = {
        "queue_max": 100_000,
        "queue_max_per_key": 100_000,
        "max_connections": 100_000,
    }
    trace = workdir / "sim-trace.jsonl"
    sim_args = ["--decode-tps", str(decode_tps), "--trace-file", str(trace)]
    bearer = {"Authorization": f"Bearer {keys['bench']}"}
    with (
        simulator_and_gateway(workdir, SLOTS, sim_args, **limits) as (sim_url, gw_url, pids),
        contextlib.ExitStack() as stack,
    ):
        path = "/v1/chat/completions"
        relay_url, pids["relay"] = stack.enter_context(
            tcp_relay(workdir, int(sim_url.rsplit(":", 1)[1]), GATEWAY_CPU)
        )
        targets = {
            "direct": (sim_url + path, {}),
            "relay": (relay_url + path, {}),
            "gateway": (gw_url + path, bearer),
        }
        if nginx_relay.available():
            nginx_url, pids["nginx"] = stack.enter_context(
                nginx_relay.nginx_relay(workdir, int(sim_url.rsplit(":", 1)[1]), GATEWAY_CPU)
            )
            targets["nginx"] = (nginx_url + path, {})
        if tracing:
            otlp_url, pids["otlp"] = stack.enter_context(otlp_receiver(workdir))
            shutil.copy(workdir / "gateway.db", workdir / "traced.db")  # the same key
            traced = gateway(workdir, "traced", sim_url, SLOTS, limits, traced_env(otlp_url))
            traced_url, pids["traced"] = stack.enter_context(traced)
            targets["traced"] = (traced_url + path, bearer)
        if before is not None:
            shutil.copy(workdir / "gateway.db", workdir / "before.db")
            earlier = gateway(workdir, "before", sim_url, SLOTS, limits, {"PYTHONPATH": str(before)})
            before_url, pids["before"] = stack.enter_context(earlier)
            targets["before"] = (before_url + path, bearer)
        if litellm:
            ll_url, ll_key, pids["litellm"] = stack.enter_context(
                litellm_proxy(workdir, sim_url, MODEL, GATEWAY_CPU)
            )
            targets["litellm"] = (ll_url + path, {"Authorization": f"Bearer {ll_key}"})
        yield targets, pids, trace


def traced_env(otlp_url: str) -> dict[str, str]:
    """The traced gateway's tracing: to ``otlp_url``, each batch sent within 100 ms (the SDK waits up to
    5 s), so a round's spans are exported while :func:`settle` waits, not during the next path's."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_url, "OTEL_BSP_SCHEDULE_DELAY": "100"}


@contextlib.contextmanager
def otlp_receiver(workdir: Path) -> Iterator[tuple[str, int]]:
    """The OTLP/HTTP trace receiver on CPU 1 (where a deployment's collector is not: on another
    machine), counting into ``workdir/otlp-counts.json``; yield (its url, its pid)."""
    port = free_port()
    cmd = [sys.executable, "-m", "tests.support.otlp_receiver", "--port", str(port)]
    cmd += ["--counts", str(workdir / OTLP_COUNTS)]
    url = f"http://127.0.0.1:{port}"
    with pinned(workdir, "otlp", LOAD_CPU, cmd, None, url + "/health") as pid:
        yield url, pid


def capacity(phase: dict[str, Any], name: str) -> float:
    """Chunks/s one whole core could produce (simulator) or relay (a proxy) at the CPU cost per chunk
    measured in the throughput phase: what that phase would show if CPU 1 could feed it faster. NaN
    when the server used no CPU (the phase relayed nothing: its errors are in the report)."""
    cpu_ms = phase["cpu_ms_per_1000"][SERVER[name]]
    return 1e6 / cpu_ms if cpu_ms > 0 else math.nan


def _busy(by_path: dict[str, dict[str, float]]) -> list[float]:
    """CPU busy % per path: all of CPU 1 (simulator + load generator) direct, else the proxy's."""
    return [b["simulator"] + b["load"] if n == "direct" else b[SERVER[n]] for n, b in by_path.items()]


def split_p50(level: dict[str, Any], part: str) -> float:
    """A part's p50 of one path's :func:`ttft_split` at a level (``level``: that path's figures), ms;
    NaN, printed as such, when nothing matched."""
    figures = level["ttft_split_ms"][part]
    return math.nan if figures is None else float(figures["p50"])


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
        rows.append((f"c={c}: {level[names[0]]['decode_tps']:g} tokens/s per stream",))
        for label, key in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("non-stream e2e", "e2e_ms")):
            for p in ("p50", "p99"):
                add(f"{label} {p}, c={c} (ms)", [level[n][key][p] for n in names], ".2f", "diff")
            if key == "ttft_ms":  # where the TTFT goes (ttft_split): each part's p50
                for part, what in SPLIT_PARTS.items():
                    values = [split_p50(level[n], part) for n in names]
                    add(f"  TTFT part p50: {what} (ms)", values, ".2f", "diff")
        busy = _busy({n: level[n]["stream_phase_cpu_busy_pct"] for n in names})
        add(f"CPU busy %, c={c} streams (cpu1 | proxy)", busy, ".0f", "")
        per_stream = [level[n]["stream_phase_cpu_ms_per_stream"][SERVER[n]] for n in names]
        add(f"CPU ms / stream, c={c} (server)", per_stream, ".2f", "ratio")
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
    add("ITL p99 then (ms)", [tput[n]["itl_ms"]["p99"] for n in names], ".2f", "diff")
    add("chunks/s one core could serve (1 s / CPU)", [capacity(tput[n], n) for n in names], ".0f", "ratio")
    add(
        f"requests/s, 1 token, c={rps['direct']['concurrency']}",
        [rps[n]["requests_per_s"] for n in names],
        ".0f",
        "ratio",
    )
    add("CPU ms / request (server)", [rps[n]["cpu_ms_per_1"][SERVER[n]] for n in names], ".2f", "ratio")
    width = [max(len(row[i]) for row in rows if len(row) > 1) for i in range(len(rows[0]))]
    lines = [
        "  ".join(f"{v:<{width[0]}}" if i == 0 else f"{v:>{width[i]}}" for i, v in enumerate(row)).rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
