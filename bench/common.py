"""What the benchmark's parts share: CPU placement, request bodies, CPU meters, servers, keys.

The gateway (``dspark-gateway serve``) runs pinned to CPU 0; the simulator and the load generator share
CPU 1 (``taskset``), so everything the gateway costs shows on CPU 0. CPU time comes from
``/proc/<pid>/stat`` (utime + stime, all threads) and ``/proc/stat``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.auth import KeyStore
from tests.support.gateway_process import BIN, clean_env
from tests.support.probes import wait_until
from tests.support.servers import free_port

MODEL = "deepseek-v4-flash-0731"
Target = tuple[str, dict[str, str]]  # chat completions URL, headers
GATEWAY_CPU, LOAD_CPU = 0, 1  # the simulator and the load generator share LOAD_CPU


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


async def sse_events(
    client: httpx.AsyncClient, target: Target, body: dict[str, Any], answered: dict[str, str] | None = None
) -> AsyncGenerator[tuple[float, bytes], None]:
    """POST ``body`` as a stream; yield (``perf_counter`` time of the read that completed it, event)
    for each SSE event, without its blank line; the response's headers go into ``answered``. Raises
    :class:`BenchError` on a status other than 200 or an error event. Close it
    (``contextlib.aclosing``) when leaving early."""
    async with client.stream("POST", target[0], json=body, headers=target[1]) as response:
        if answered is not None:
            answered.update(response.headers)
        if response.status_code != 200:
            await response.aread()
            raise BenchError(f"status {response.status_code}: {response.text[:200]}")
        buffer = b""
        async for data in response.aiter_raw():
            now = time.perf_counter()
            events = (buffer + data).split(b"\n\n")
            buffer = events.pop()
            for event in events:
                if event.startswith(b'data: {"error"'):
                    raise BenchError(event[:200].decode(errors="replace"))
                yield now, event


def chat_body(index: int, max_tokens: int, stream: bool, decode_tps: float | None = None) -> dict[str, Any]:
    """A chat request producing exactly ``max_tokens`` tokens; ``index`` varies the text (and the plan).
    ``decode_tps``: the simulator decodes it at that speed, tokens/s (``#sim:decode_tps``)."""
    text = f"Benchmark request {index}: write a paragraph."
    if decode_tps is not None:
        text += f" #sim:decode_tps={decode_tps:g}"
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }


def raw_post(target: Target, body: dict[str, Any]) -> bytes:
    """``body`` as an HTTP/1.1 ``POST`` to ``target`` (URL, extra headers), ``Connection: close``: for
    load generators that write requests on plain sockets."""
    url = urlsplit(target[0])
    payload = json.dumps(body).encode()
    headers = {
        "Host": url.netloc,
        "Content-Type": "application/json",
        "Content-Length": str(len(payload)),
        "Connection": "close",
        **target[1],
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"POST {url.path} HTTP/1.1\r\n{head}\r\n".encode() + payload


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


async def make_keys(database_url: str, names: list[str]) -> dict[str, str]:
    """One API key per name (admission queues by key name: distinct names, distinct queues)."""
    store = await KeyStore.open(database_url)
    try:
        return {name: (await store.create(name))[1] or "" for name in names}
    finally:
        await store.close()


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def pinned(
    workdir: Path, name: str, cpu: int, cmd: list[str], env: dict[str, str] | None, ready: str
) -> Iterator[int]:
    """``cmd`` pinned to ``cpu`` (``taskset``), its output in ``workdir/<name>.log``, until it answers
    200 on the ``ready`` URL (30 s at most); yield its pid; terminate it (then kill after 20 s)."""
    with (workdir / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(["taskset", "-c", str(cpu), *cmd], env=env, stdout=log, stderr=log)
    try:
        wait_until(functools.partial(answers, ready), timeout_s=30, what=f"{name} ready")
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def gateway(
    workdir: Path,
    name: str,
    sim_url: str,
    slots: int,
    settings: dict[str, object],
    environ: dict[str, str] | None = None,
) -> Iterator[tuple[str, int]]:
    """A gateway (CPU 0) in front of the simulator at ``sim_url``: ``GATEWAY_SLOTS=slots``, SQLite
    ``workdir/<name>.db``, no spec-counter scrapes, ``settings`` as ``GATEWAY_*``, no ``OTEL_*`` of this
    shell (:func:`clean_env`) and ``environ`` added to its environment; its log ``workdir/<name>.log``.
    Yield (its url, its pid)."""
    port = free_port()
    env = clean_env(
        upstream=sim_url,
        database_url=f"sqlite+aiosqlite:///{workdir / f'{name}.db'}",
        slots=slots,
        spec_counters="never",
        **settings,
    )
    url = f"http://127.0.0.1:{port}"
    cmd = [BIN, "serve", "--port", str(port)]
    with pinned(workdir, name, GATEWAY_CPU, cmd, env | (environ or {}), url + "/ready") as pid:
        yield url, pid


@contextlib.contextmanager
def simulator_and_gateway(
    workdir: Path, slots: int, sim_args: list[str], **gateway_settings: object
) -> Iterator[tuple[str, str, dict[str, int]]]:
    """The simulator (CPU 1; ``--slots slots``, instant prefill, plus ``sim_args``) and the gateway in
    front of it (:func:`gateway` named "gateway": its keys in ``workdir/gateway.db``); yield
    (simulator url, gateway url, pids). Logs in ``workdir``. The gateway stops first, so the
    simulator sees its last requests end."""
    port = free_port()
    sim_cmd = [sys.executable, "-m", "dspark_sim", "--port", str(port), "--log-level", "warning"]
    sim_cmd += ["--slots", str(slots), "--ttft-base-s", "0", "--prefill-tps", "1e7", *sim_args]
    sim_url = f"http://127.0.0.1:{port}"
    with (
        pinned(workdir, "simulator", LOAD_CPU, sim_cmd, None, sim_url + "/health") as sim_pid,
        gateway(workdir, "gateway", sim_url, slots, gateway_settings) as (gw_url, gw_pid),
    ):
        yield sim_url, gw_url, {"simulator": sim_pid, "gateway": gw_pid}


def machine_speed() -> dict[str, dict[str, float]]:
    """Per CPU, :mod:`bench.speed_probe`'s figures (a Python loop, a socketpair round trip, the
    gateway's work for one chunk hot and after an idle spell), run pinned to it. Taken at a run's
    start and end, they tell which runs' absolute figures compare."""
    speed: dict[str, dict[str, float]] = {}
    for cpu in (GATEWAY_CPU, LOAD_CPU):
        command = ["taskset", "-c", str(cpu), sys.executable, "-m", "bench.speed_probe"]
        result = subprocess.run(command, capture_output=True, check=True, cwd=Path(__file__).parents[1])
        speed[f"cpu{cpu}"] = json.loads(result.stdout)
    return speed


def log_problems(path: Path) -> list[str]:
    """The last 20 warning, error and traceback lines of a server log."""
    lines = path.read_text(errors="replace").splitlines()
    return [line for line in lines if any(w in line for w in ("WARNING", "ERROR", "Traceback"))][-20:]


def contention() -> dict[str, bool]:
    """Other load on the machine now: a test run (pytest), a soak, a vLLM server."""
    found = {"pytest_running": False, "soak_running": False, "vllm_running": False}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            argv = cmdline.read_bytes()
            found["pytest_running"] |= b"pytest" in argv
            found["soak_running"] |= b"bench.soak" in argv
            found["vllm_running"] |= b"vllm.entrypoints" in argv
    return found
