"""Queue scale: thousands of clients waiting on 2 slots — gateway memory, slot idle gap, fairness.

Setup (2-core machine, as in ``bench_gateway``): ``dspark-gateway serve`` pinned to CPU 0 with
``GATEWAY_SLOTS=2``; the simulator (``--slots 2 --decode-tps 2000 --ttft-base-s 0 --prefill-tps 1e7
--trace-file``) and this load generator share CPU 1. The queue limits are raised to the client count
and the keys have no rate limits.

Load: ``clients`` non-stream chat requests (``max_tokens`` 4, ``ignore_eos``), each on its own
connection (plain asyncio streams, hand-written HTTP/1.1 with ``Connection: close``, read to EOF),
spread over ``keys`` API keys of very unequal size: key ``k0`` has half the clients, the others share
the rest equally. First two *holder* requests of a ninth key take both slots and keep them (their
prompt carries ``#sim:stall=3600``: the simulator sleeps before the request reaches its engine, so the
slots are held at the gateway while no sequence runs). The clients are then opened in batches (the
gateway's accept backlog is 2,048) until ``/metrics`` shows ``gateway_queue_depth == clients``. The
holders then disconnect, which frees both slots, and the queue drains.

Figures:

- **Memory**: the gateway's ``VmRSS`` and ``VmHWM`` (``/proc/<pid>/status``) idle, with the whole queue
  waiting, and sampled every 0.5 s until the drain starts (max), MB (10^6 bytes); ``VmHWM`` at the end
  covers the drain. Not sampled during the drain: reading the gateway's ``/proc/<pid>/status`` every
  0.5 s then put the slot idle gap p99 at 1.66, 2.00, 1.99 ms against 1.58, 1.71, 1.80 without
  (3 alternating pairs, 2026-12-01), a stall of the gateway the benchmark itself caused.
- **Slot idle gap**: measured at the simulator from its sequence trace (``dspark_sim.trace``; all
  times ``CLOCK_MONOTONIC``). Every sequence's ``finish`` (it left the engine, its slot given back)
  frees a slot; every ``arrival`` (the simulator parsed the request and built its sequence) takes one.
  Walking the events in time order, each arrival is matched to the earliest unmatched finish before
  it; gap = arrival - finish. Arrivals with no finish to match took a never-used slot (the first
  two) and have no gap. The gap thus spans: the simulator writing the response, the gateway reading
  it, closing the exchange and releasing the lease, the admission waking the next waiter, that
  request's task resuming and sending it upstream, and the simulator parsing it. The *direct floor*
  is the same gap without the gateway: before the gateway phase, 1,000 of the same requests straight
  to the simulator by 2 closed-loop clients on keep-alive connections (the gateway's upstream
  pattern), run on CPU 0 (where the gateway runs; it is idle then).
- **Fairness**: the order of arrivals at the simulator is the admission order. The window is from
  the first admission to the admission of the first key's last request: throughout it every key still
  had waiters (all were queued before the first admission). Per key: its share of the window's
  admissions, and Jain's index over the shares ((sum x)^2 / (n sum x^2); 1 = equal shares, 1/n = one
  key takes all); the longest run of consecutive admissions of one key; queue wait = arrival at the
  simulator - max(request sent, holders released) (time waiting while slots were available to anyone).
- **Drain**: from the holders' release to the last answer: requests/s, CPU per request of each process
  (``bench_gateway.Meter``), and how long each process's main thread was runnable but waiting for a
  CPU (``/proc/<pid>/schedstat``): other load on the machine shows there first, and it inflates the
  idle gap directly (the gateway or the simulator waking late).

Statuses other than 200, connection errors and direct-floor errors are counted in ``error_count``;
the script exits 1 if there are any.

Usage::

    .venv/bin/python -m bench.queue_scale [--clients N] [--keys K] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shlex
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    GATEWAY_CPU,
    LOAD_CPU,
    Meter,
    Target,
    chat_body,
    contention,
    log_problems,
    make_keys,
    pct,
    raw_post,
    simulator_and_gateway,
)

SLOTS = 2
MAX_TOKENS = 4
HOLDER_KEY = "holder"
HOLD = "#sim:stall=3600"
DIRECT_REQUESTS = 1000  # of the direct floor
BATCH = 250  # connections opened at once during the ramp
UNACCEPTED = 500  # at most this many sent requests not yet queued at the gateway (backlog: 2,048)
#: The x-request-id the simulator got, inside its sequence id (chatcmpl-<id>-<8 hex>): the gateway's own
#: id (its answer's x-request-id) for the gateway's calls, the client's for the direct floor's.
_SEQUENCE = re.compile(r"^chatcmpl-(.+)-[0-9a-f]{8}$")
_DIRECT_ID = re.compile(r"-dr\d+-")
_ANSWER_ID = re.compile(rb"\r\nx-request-id: ([^\r]+)\r\n", re.IGNORECASE)


@dataclass(slots=True)
class Call:
    """One client: its key, and what happened to its request (monotonic s)."""

    index: int
    key: str
    sent: float | None = None
    done: float | None = None
    status: int | None = None
    error: str | None = None
    #: The gateway's id of the request (its answer's x-request-id), which the simulator saw.
    upstream_id: str | None = None

    @property
    def request_id(self) -> str:
        return f"qs{self.index:05d}"


def key_sizes(clients: int, keys: int) -> list[int]:
    """Clients per key: the first key half of them, the other keys the rest in equal parts."""
    if keys == 1:
        return [clients]
    big = clients // 2
    small, extra = divmod(clients - big, keys - 1)
    return [big] + [small + (1 if k < extra else 0) for k in range(keys - 1)]


def memory_mb(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of ``pid`` now, MB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            out[name] = round(int(value.split()[0]) * 1024 / 1e6, 1)
    return out


def run_delay_s(pid: int) -> float:
    """Time the main thread of ``pid`` spent runnable but waiting for a CPU so far, s (schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def _target(port: int, secret: str, request_id: str) -> Target:
    """The gateway's chat completions on ``port``, with the key ``secret`` and an ``x-request-id``."""
    headers = {"Authorization": f"Bearer {secret}", "x-request-id": request_id}
    return f"http://127.0.0.1:{port}/v1/chat/completions", headers


async def _call(port: int, secret: str, call: Call, sent: asyncio.Event | None = None) -> None:
    """Send ``call``'s request on a new connection and read the answer to EOF; fill in ``call``."""
    request = raw_post(
        _target(port, secret, call.request_id), chat_body(call.index, MAX_TOKENS, stream=False)
    )
    writer: asyncio.StreamWriter | None = None
    try:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            call.sent = time.monotonic()
        finally:
            if sent is not None:
                sent.set()  # sent, or failed to
        answer = await reader.read()
        call.done = time.monotonic()
        status_line = answer.split(b"\r\n", 1)[0].split()
        if len(status_line) < 2:
            call.error = f"no status line ({len(answer)} bytes before EOF)"
            return
        call.status = int(status_line[1])
        answered_id = _ANSWER_ID.search(answer.partition(b"\r\n\r\n")[0])
        call.upstream_id = answered_id[1].decode() if answered_id else None
        if call.status != 200:
            body = answer.partition(b"\r\n\r\n")[2]
            call.error = f"{call.status}: {body[:200].decode(errors='replace')}"
    except OSError as exc:
        call.error = f"{type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.close()


async def direct_floor(sim_url: str, requests: int) -> list[str]:
    """``requests`` calls straight to the simulator by 2 closed-loop clients, one keep-alive connection
    each (the gateway's upstream pattern, minus the gateway); their errors."""
    host, port = sim_url.rsplit("/", 1)[1].split(":")
    indices = iter(range(requests))
    errors: list[str] = []

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for index in indices:
                payload = json.dumps(chat_body(index, MAX_TOKENS, stream=False)).encode()
                writer.write(
                    f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                    f"x-request-id: dr{index:05d}\r\n\r\n".encode()
                    + payload
                )
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
                if not head.startswith(b"HTTP/1.1 200"):
                    errors.append(head.split(b"\r\n", 1)[0].decode())
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(SLOTS)))
    return errors


class Holders:
    """Two requests that take both slots and keep them until :meth:`release` (client disconnect)."""

    def __init__(self, port: int, secret: str) -> None:
        self.port, self.secret = port, secret
        self._writers: list[asyncio.StreamWriter] = []

    async def hold(self) -> None:
        for index in range(SLOTS):
            body = chat_body(index, MAX_TOKENS, stream=False)
            body["messages"][0]["content"] += f" {HOLD}"
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            writer.write(raw_post(_target(self.port, self.secret, f"holder{index}"), body))
            await writer.drain()
            self._writers.append(writer)

    def release(self) -> None:
        for writer in self._writers:
            writer.transport.abort()  # reset: the gateway sees the client gone, releases the slot


async def _gauges(client: httpx.AsyncClient, gw_url: str) -> dict[str, float]:
    """The gateway's unlabelled ``gateway_*`` gauges (queue depth, slots in use)."""
    text = (await client.get(gw_url + "/metrics")).text
    return {m[1]: float(m[2]) for m in re.finditer(r"^(gateway_\w+) (\S+)$", text, re.M)}


async def _sample_memory(pid: int, samples: list[dict[str, float]], start: float) -> None:
    while True:
        samples.append({"t_s": round(time.monotonic() - start, 2), **memory_mb(pid)})
        await asyncio.sleep(0.5)


async def _wait_for(what: str, predicate: Any, timeout_s: float, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(poll_s)


async def run_load(
    gw_url: str, secrets: dict[str, str], calls: list[Call], pids: dict[str, int]
) -> dict[str, Any]:
    """Hold the slots, queue every call, sample memory, release, drain. Phase figures."""
    port = int(gw_url.rsplit(":", 1)[1])
    gw_pid = pids["gateway"]
    start = time.monotonic()
    samples: list[dict[str, float]] = []
    out: dict[str, Any] = {"memory_idle": memory_mb(gw_pid)}
    sampler = asyncio.create_task(_sample_memory(gw_pid, samples, start))
    async with httpx.AsyncClient(timeout=30) as metrics:
        holders = Holders(port, secrets[HOLDER_KEY])
        await holders.hold()

        async def slots_held() -> bool:
            return (await _gauges(metrics, gw_url))["gateway_slots_in_use"] == SLOTS

        await _wait_for("the holders to take both slots", slots_held, 30)
        ramp = Meter(pids)
        tasks: list[asyncio.Task[None]] = []
        for first in range(0, len(calls), BATCH):
            events = []
            for call in calls[first : first + BATCH]:
                events.append(asyncio.Event())
                tasks.append(asyncio.create_task(_call(port, secrets[call.key], call, events[-1])))
            await asyncio.gather(*(event.wait() for event in events))  # the batch is sent
            sent = first + len(events)

            async def caught_up(sent: int = sent) -> bool:
                queued = (await _gauges(metrics, gw_url))["gateway_queue_depth"]
                return queued >= sent - UNACCEPTED or any(t.done() for t in tasks)

            await _wait_for("the gateway to catch up", caught_up, 120)

        async def all_queued() -> bool:
            return (await _gauges(metrics, gw_url))["gateway_queue_depth"] >= len(calls) or any(
                t.done() for t in tasks
            )

        await _wait_for("every request to be queued", all_queued, 300)
        gauges = await _gauges(metrics, gw_url)
        out["ramp"] = ramp.read(len(calls)) | {"queue_depth_reached": int(gauges["gateway_queue_depth"])}
        out["memory_full_queue"] = memory_mb(gw_pid)
        await asyncio.sleep(2.0)  # a few more samples at full queue
        out["memory_full_queue_2s"] = memory_mb(gw_pid)
        sampler.cancel()  # no /proc reads of the gateway while the idle gap is measured (module doc)
        drain, waited = Meter(pids), {name: run_delay_s(pid) for name, pid in pids.items()}
        out["released_at"] = time.monotonic()
        holders.release()
        await asyncio.gather(*tasks)
        out["drain"] = drain.read(len(calls))
        out["drain"]["requests_per_s"] = round(len(calls) / out["drain"]["seconds"], 1)
        out["drain"]["runnable_waiting_s"] = {
            name: round(run_delay_s(pid) - waited[name], 2) for name, pid in pids.items()
        }
    await asyncio.sleep(1.0)
    out["memory_end"] = memory_mb(gw_pid)
    out["memory_samples"] = samples
    return out


def idle_gaps(trace: list[dict[str, Any]]) -> tuple[list[float], dict[str, int]]:
    """Slot idle gaps, s (see the module doc), and counts of what had no gap."""
    events = sorted(
        [(line["finish"], 0) for line in trace] + [(line["arrival"], 1) for line in trace],
    )  # at equal times a finish comes first
    freed: deque[float] = deque()
    gaps: list[float] = []
    busy, fresh_slot, over = 0, 0, 0
    for when, is_arrival in events:
        if not is_arrival:
            freed.append(when)
            busy -= 1
            continue
        if busy >= SLOTS:
            over += 1  # would wait inside the simulator: the gateway let more than SLOTS through
        if freed:
            gaps.append(when - freed.popleft())
        else:
            fresh_slot += 1
        busy += 1
    return gaps, {"no_gap_fresh_slot": fresh_slot, "arrivals_with_sim_full": over}


def fairness(
    order: list[str], calls: list[Call], arrival: dict[str, float], released: float
) -> dict[str, Any]:
    """Shares of admissions while every key had waiters, Jain's index, runs, waits per key."""
    last = {key: i for i, key in enumerate(order)}
    window = order[: min(last.values()) + 1]
    counts = Counter(window)
    keys = sorted({call.key for call in calls}, key=lambda k: int(k[1:]))
    shares = [counts[k] / len(window) for k in keys]
    jain = sum(shares) ** 2 / (len(shares) * sum(s * s for s in shares))
    longest, run = 1, 1
    for a, b in zip(window, window[1:], strict=False):
        run = run + 1 if a == b else 1
        longest = max(longest, run)
    waits: dict[str, list[float]] = {k: [] for k in keys}
    for call in calls:
        if call.request_id in arrival and call.sent is not None:
            waits[call.key].append(arrival[call.request_id] - max(call.sent, released))
    per_key = {
        k: {
            "clients": sum(1 for c in calls if c.key == k),
            "admitted_in_window": counts[k],
            "share": round(counts[k] / len(window), 4),
            "wait_p50_ms": round(pct(waits[k], 50) * 1000, 1),
            "wait_max_ms": round(max(waits[k], default=float("nan")) * 1000, 1),
        }
        for k in keys
    }
    return {
        "window_admissions": len(window),
        "window_ends_with": window[-1],
        "jain_index": round(jain, 5),
        "longest_run_one_key": longest,
        "keys": per_key,
    }


def _ms_stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "count": len(ms),
        "p50": round(pct(ms, 50), 3),
        "p90": round(pct(ms, 90), 3),
        "p99": round(pct(ms, 99), 3),
        "max": round(max(ms, default=float("nan")), 3),
        "mean": round(sum(ms) / len(ms), 3) if ms else float("nan"),
    }


def analyse(load: dict[str, Any], calls: list[Call], trace: list[dict[str, Any]]) -> dict[str, Any]:
    """Every figure from the load phases, the calls and the simulator's trace."""
    by_upstream = {call.upstream_id: call.request_id for call in calls if call.upstream_id}
    sequences = [(line, _SEQUENCE.fullmatch(line["request_id"])) for line in trace]
    ours = [line for line, seq in sequences if seq and seq[1] in by_upstream]
    direct = [line for line in trace if _DIRECT_ID.search(line["request_id"])]
    arrival = {
        by_upstream[seq[1]]: line["arrival"] for line, seq in sequences if seq and seq[1] in by_upstream
    }
    gaps, no_gap = idle_gaps(ours)
    direct_gaps, _ = idle_gaps(direct)
    by_key = {call.request_id: call.key for call in calls}
    order = [by_key[rid] for rid, _ in sorted(arrival.items(), key=lambda item: item[1])]
    statuses = Counter(str(call.status) if call.status else "none" for call in calls)
    errors = [f"{call.request_id} ({call.key}): {call.error}" for call in calls if call.error]
    service = [line["finish"] - line["arrival"] for line in ours]
    span = max(line["finish"] for line in ours) - min(line["arrival"] for line in ours) if ours else 0
    samples = load["memory_samples"]
    return {
        "memory_mb": {
            "idle_rss": load["memory_idle"]["VmRSS"],
            "full_queue_rss": load["memory_full_queue"]["VmRSS"],
            "full_queue_rss_after_2s": load["memory_full_queue_2s"]["VmRSS"],
            "full_queue_hwm": load["memory_full_queue"]["VmHWM"],
            "sampled_rss_max": max(s.get("VmRSS", 0.0) for s in samples),
            "end_hwm": load["memory_end"]["VmHWM"],
            "end_rss": load["memory_end"]["VmRSS"],
            "kb_per_queued_request": round(
                (load["memory_full_queue"]["VmRSS"] - load["memory_idle"]["VmRSS"]) * 1000 / len(calls), 1
            ),
        },
        "idle_gap_ms": _ms_stats(gaps) | no_gap,
        "direct_idle_gap_ms": _ms_stats(direct_gaps),
        "sim_service_ms": _ms_stats(service),
        "slot_utilisation": round(sum(t["finish"] - t["arrival"] for t in ours) / (SLOTS * span), 4)
        if span
        else None,
        "fairness": fairness(order, calls, arrival, load["released_at"]),
        "ramp": load["ramp"],
        "drain": load["drain"],
        "statuses": dict(statuses),
        "sim_finish_reasons": dict(Counter(line["reason"] for line in ours)),
        "missing_from_trace": sum(1 for c in calls if c.status == 200 and c.request_id not in arrival),
        "error_count": len(errors),
        "errors": errors[:10],
        "memory_samples": samples,
    }


def measure_queue_scale(workdir: Path, clients: int = 5000, keys: int = 8) -> dict[str, Any]:
    """Run the whole measurement in ``workdir`` (DB, logs, trace); every figure (ms, MB, counts)."""
    names = [f"k{k}" for k in range(keys)]
    calls = [Call(i, names[k]) for k, n in enumerate(key_sizes(clients, keys)) for i in range(n)]
    random.Random(0).shuffle(calls)  # the ramp interleaves the keys
    for index, call in enumerate(calls):
        call.index = index
    secrets = asyncio.run(make_keys(f"sqlite+aiosqlite:///{workdir / 'gateway.db'}", [*names, HOLDER_KEY]))
    trace_file = workdir / "sim-trace.jsonl"
    affinity = os.sched_getaffinity(0)
    pinned = {GATEWAY_CPU, LOAD_CPU} <= affinity
    started = time.monotonic()
    sim_args = ["--decode-tps", "2000", "--trace-file", str(trace_file)]
    # the queue keeps a quarter of itself for keys with nothing waiting: twice the clients leave room
    limits = {
        "queue_max": 2 * clients + 100,
        "queue_max_per_key": clients + 100,
        "queue_timeout_s": 3600,
        "max_connections": 2 * clients + 100,
    }
    with simulator_and_gateway(workdir, SLOTS, sim_args, **limits) as (sim_url, gw_url, pids):
        try:
            if pinned:  # the floor's client where the gateway runs (idle meanwhile)
                os.sched_setaffinity(0, {GATEWAY_CPU})
            direct_errors = asyncio.run(direct_floor(sim_url, DIRECT_REQUESTS))
            if pinned:
                os.sched_setaffinity(0, {LOAD_CPU})
            load = asyncio.run(run_load(gw_url, secrets, calls, pids | {"load": os.getpid()}))
        finally:
            os.sched_setaffinity(0, affinity)
    trace = [json.loads(line) for line in trace_file.read_text().splitlines()]
    figures = analyse(load, calls, trace)
    figures["direct_idle_gap_ms"]["errors"] = direct_errors[:5]
    figures["error_count"] += len(direct_errors)
    logs = {name: log_problems(workdir / f"{name}.log") for name in ("gateway", "simulator")}
    return {
        "clients": clients,
        "keys": {name: n for name, n in zip(names, key_sizes(clients, keys), strict=True)},
        "pinned": {"gateway": GATEWAY_CPU, "simulator+load": LOAD_CPU} if pinned else None,
        "duration_s": round(time.monotonic() - started, 1),
        **figures,
        "log_problems": logs,
    }


def table(report: dict[str, Any]) -> str:
    """The main figures, one per line."""
    mem, gap, fair = report["memory_mb"], report["idle_gap_ms"], report["fairness"]
    floor = report["direct_idle_gap_ms"]
    ramp, drain = report["ramp"], report["drain"]
    rows = [
        ("clients (keys)", f"{report['clients']} ({len(report['keys'])} + holder)"),
        ("gateway RSS idle / full queue (MB)", f"{mem['idle_rss']:.1f} / {mem['full_queue_rss']:.1f}"),
        ("gateway VmHWM full queue / end (MB)", f"{mem['full_queue_hwm']:.1f} / {mem['end_hwm']:.1f}"),
        ("gateway RSS sampled max (MB)", f"{mem['sampled_rss_max']:.1f}  (target < 300)"),
        ("memory per queued request (kB)", f"{mem['kb_per_queued_request']:.1f}"),
        ("slot idle gap p50 / p99 / max (ms)", f"{gap['p50']:.2f} / {gap['p99']:.2f} / {gap['max']:.2f}"),
        ("  (gaps; target p99 <= 2)", f"{gap['count']}"),
        (
            "  direct floor p50 / p99 / max (ms)",
            f"{floor['p50']:.2f} / {floor['p99']:.2f} / {floor['max']:.2f}",
        ),
        ("sim service time p50 (ms)", f"{report['sim_service_ms']['p50']:.2f}"),
        ("slot utilisation", f"{report['slot_utilisation']}"),
        ("ramp: s, gateway CPU ms / request", f"{ramp['seconds']} s, {ramp['cpu_ms_per_1']['gateway']:.2f}"),
        ("drain: s, requests/s", f"{drain['seconds']} s, {drain['requests_per_s']}"),
        ("drain: gateway CPU ms / request", f"{drain['cpu_ms_per_1']['gateway']:.2f}"),
        (
            "drain: s runnable but off-CPU gw | sim | load",
            " | ".join(f"{drain['runnable_waiting_s'][n]:.2f}" for n in ("gateway", "simulator", "load")),
        ),
        (
            "drain: CPU busy % gw | sim | load | others",
            " | ".join(
                f"{drain['cpu_busy_pct'][name]:.0f}" for name in ("gateway", "simulator", "load", "others")
            ),
        ),
        ("fairness window (admissions)", f"{fair['window_admissions']}"),
        ("Jain's index in window", f"{fair['jain_index']:.4f}"),
        ("longest run of one key", f"{fair['longest_run_one_key']}"),
    ]
    for key, v in fair["keys"].items():
        rows.append(
            (
                f"  {key}: clients, share, wait p50 / max (ms)",
                f"{v['clients']}, {v['share']:.3f}, {v['wait_p50_ms']:.0f} / {v['wait_max_ms']:.0f}",
            )
        )
    rows.append(("statuses", json.dumps(report["statuses"])))
    rows.append(("errors", str(report["error_count"])))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def main() -> int:
    """Run it; print the table; write the JSON report if asked. Exit 1 on request errors."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=5000, help="concurrent clients (default 5000)")
    parser.add_argument("--keys", type=int, default=8, help="API keys, the first with half the clients")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    before = contention()
    with tempfile.TemporaryDirectory(prefix="queue-scale-") as workdir:
        report = measure_queue_scale(Path(workdir), args.clients, args.keys)
    report = {
        "command": shlex.join([os.path.relpath(sys.executable), "-m", "bench.queue_scale", *sys.argv[1:]]),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "contention": {k: v or contention()[k] for k, v in before.items()},
        **report,
    }
    print(table(report))
    print(f"\n{report['command']}  ({report['duration_s']} s; contention: {report['contention']})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if report["error_count"]:
        print(f"request errors: {report['error_count']} (first: {report['errors'][:3]})", file=sys.stderr)
    return 1 if report["error_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
