"""Clients that stop reading their streams, against the gateway and the simulator, in one run.

Three parts, one gateway (``GATEWAY_SLOTS=2``, the default ``GATEWAY_STREAM_BUFFER_BYTES`` of 1 MiB and
``GATEWAY_CLIENT_WRITE_TIMEOUT_S`` of 30 s unless given) and one simulator (2 slots, decode
``--decode-tps`` tokens/s a sequence):

1. **another key's TTFT**: ``--chats`` short streamed chats of key ``other``, one after another, alone;
   then the same while two stalled readers (raw sockets with a 4 KB receive buffer that read the
   response head and then nothing) each hold a stream whose answer (``--stalled-text``, ~400 KB of
   SSE) fits the buffer. Printed: TTFT p50 / max of each, and their ratio;
2. **slot held without the backend working**: over each half of part 1, ``gateway_slots_in_use``
   minus the simulator's ``vllm:num_requests_running``, sampled every 10 ms and integrated: the
   slot-seconds the gateway held a slot the backend was not using, per slot (alone, that is a
   request's way to the backend and back; a stalled reader holding its slot would add its whole
   stall);
3. **RSS with ``--stalled`` stalled readers**: the gateway's resident memory before and once each of
   them has its whole answer buffered (every sequence finished at the backend), per reader.

Usage::

    .venv/bin/python -m bench.slow_readers [--chats 30] [--stalled 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import MODEL, make_keys, pct, simulator_and_gateway
from bench.overhead import stream_once
from tests.support.probes import scrape, wait_until

SHORT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}


def stalled_reader(gateway_url: str, key: str, text: str) -> socket.socket:
    """A streamed chat whose client reads the response head, then nothing; its socket."""
    host, port = gateway_url.rsplit("/", 1)[1].split(":")
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\ncontent-length: {len(body)}\r\n\r\n{body}".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        part = sock.recv(1024)
        if not part:
            raise RuntimeError("no response head")
        head += part
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head[:200].decode(errors="replace"))
    return sock


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def ttfts(gateway_url: str, key: str, count: int) -> list[float]:
    target = (gateway_url + "/v1/chat/completions", {"Authorization": f"Bearer {key}"})
    async with httpx.AsyncClient(timeout=120) as client:
        return [(await stream_once(client, target, SHORT))[0] for _ in range(count)]


class HeldIdle:
    """Integrates (gateway slots in use − backend sequences running), sampled every 10 ms, s."""

    def __init__(self, gateway_url: str, sim_url: str) -> None:
        self.urls = (gateway_url, sim_url)
        self.slot_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            gateway, sim = (scrape(url) for url in self.urls)
            now = time.monotonic()
            held = gateway["gateway_slots_in_use"] - sim["vllm:num_requests_running"]
            self.slot_s += max(0.0, held) * (now - last)
            last = now
            time.sleep(0.01)

    def __enter__(self) -> HeldIdle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = {"queue_max": 1000, "queue_max_per_key": 1000, **dict(s.split("=", 1) for s in args.setting)}
    with simulator_and_gateway(workdir, 2, ["--decode-tps", str(args.decode_tps)], **settings) as (
        sim_url,
        gateway_url,
        pids,
    ):
        names = ["other", *(f"stalled-{i}" for i in range(max(2, args.stalled)))]
        keys = asyncio.run(make_keys(f"sqlite+aiosqlite:///{workdir / 'gateway.db'}", names))
        with HeldIdle(gateway_url, sim_url) as held_alone:
            alone = asyncio.run(ttfts(gateway_url, keys["other"], args.chats))
        stalled = [stalled_reader(gateway_url, keys[f"stalled-{i}"], args.stalled_text) for i in range(2)]
        try:
            with HeldIdle(gateway_url, sim_url) as held:
                beside = asyncio.run(ttfts(gateway_url, keys["other"], args.chats))
        finally:
            for sock in stalled:
                sock.close()
        wait_until(lambda: scrape(gateway_url)["gateway_slots_in_use"] == 0, timeout_s=120, what="idle")
        before = rss_mb(pids["gateway"])
        text = args.stalled_text
        many = [stalled_reader(gateway_url, keys[f"stalled-{i}"], text) for i in range(args.stalled)]
        try:
            total = 2 * args.chats + 2 + args.stalled  # every sequence the simulator finished so far

            def served() -> bool:
                return scrape(sim_url)["vllm:request_success_total"] >= total

            wait_until(served, timeout_s=1800, what=f"{args.stalled} stalled readers' answers")
            wait_until(lambda: scrape(gateway_url)["gateway_slots_in_use"] == 0, timeout_s=60, what="slots")
            with_readers = rss_mb(pids["gateway"])
        finally:
            for sock in many:
                sock.close()
    return {
        "ttft_alone_s": {"p50": statistics.median(alone), "max": max(alone)},
        "ttft_beside_two_stalled_s": {"p50": statistics.median(beside), "max": max(beside)},
        "ttft_ratio_p50": statistics.median(beside) / statistics.median(alone),
        "ttft_p90_alone_s": pct(alone, 90),
        "slot_held_backend_idle_s_per_slot": {"alone": held_alone.slot_s / 2, "beside": held.slot_s / 2},
        "rss_mb": {"before": before, f"with_{args.stalled}_stalled": with_readers},
        "rss_mb_per_stalled_reader": (with_readers - before) / args.stalled,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=30)
    parser.add_argument("--stalled", type=int, default=200)
    parser.add_argument("--stalled-text", default="count from 1 to 2500")
    parser.add_argument("--decode-tps", type=float, default=20000)
    parser.add_argument("--setting", action="append", default=[], help="NAME=VALUE: a GATEWAY_* setting")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slow-readers-") as folder:
        figures = run(args, Path(folder))
    alone, beside = figures["ttft_alone_s"], figures["ttft_beside_two_stalled_s"]
    print(f"another key's TTFT alone: p50 {alone['p50'] * 1000:.1f} ms, max {alone['max'] * 1000:.1f} ms")
    print(
        f"  beside two stalled readers: p50 {beside['p50'] * 1000:.1f} ms, max {beside['max'] * 1000:.1f} ms"
    )
    print(f"  beside / alone: ttft_p50 x{figures['ttft_ratio_p50']:.2f}")
    idle = figures["slot_held_backend_idle_s_per_slot"]
    print(
        f"slot held while the backend idled, s per slot: {idle['alone']:.3f} alone, {idle['beside']:.3f} "
        "beside two stalled readers (the rest: a request on its way to the backend and back)"
    )
    rss = figures["rss_mb"]
    print(
        f"gateway RSS {rss['before']:.0f} MB -> {rss[f'with_{args.stalled}_stalled']:.0f} MB with "
        f"{args.stalled} stalled readers ({figures['rss_mb_per_stalled_reader']:.2f} MB each)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
