"""Batch work in the idle slots, on the simulator: what a running batch costs interactive requests, and
how full it keeps the slots.

Two arms, each against a fresh simulator (2 slots, decode ``--decode-tps`` tokens/s a sequence) and
gateway:

- **alone**: interactive requests only — a streamed chat (~20 prompt tokens, ``max_tokens``
  ``--chat-tokens``) every ``--every`` s for ``--seconds`` s, from one key;
- **beside**: the same requests while a batch of ``--lines`` lines (``max_tokens`` ``--line-tokens``
  each) of another key runs (created first, measured once its lines flow; cancelled at the end).

Figures: interactive TTFT p50 / p95 per arm (sent -> first event with text); in the beside arm, the
slots' busy fraction (the simulator's ``vllm:num_requests_running`` / slots, sampled every 20 ms over
the measured window: batch work waits all along, so an idle slot is one it left), batch lines per
minute (the batch's ``request_counts.completed`` over the window), and one batch line's duration
(slots x window / lines answered: the time a line holds a slot). Then a ``--small-lines`` batch of
a third key, timed from its creation to its completion alone and beside a running ``--lines`` batch.
Targets (issue 59): interactive p95 beside <= 1.5 x p95 alone + 50 ms; busy fraction >= 90 %; the
small batch beside the large one within 2.5 x its time alone.

Usage::

    .venv/bin/python -m bench.batch_slots [--lines 10000] [--seconds 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.common import MODEL, make_keys, pct, simulator_and_gateway, sse_events
from bench.sse_counter import TEXT

SLOTS = 2


def batch_input(lines: int, tokens: int) -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Summarise."}], "max_tokens": tokens,
            "ignore_eos": True}  # fmt: skip
    rows = ({"custom_id": f"l{n}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            for n in range(lines))  # fmt: skip
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


async def chat_ttft(client: httpx.AsyncClient, url: str, secret: str, tokens: int) -> float:
    """One streamed chat's TTFT, s."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "What time is it?"}], "stream": True,
            "max_tokens": tokens, "ignore_eos": True}  # fmt: skip
    start = time.perf_counter()
    async with contextlib.aclosing(
        sse_events(client, (url, {"Authorization": f"Bearer {secret}"}), body)
    ) as events:
        async for now, event in events:
            if TEXT.search(event):
                return now - start
    raise RuntimeError("a chat ended without text")


async def completed(sdk: openai.AsyncOpenAI, batch_id: str, at_least: int = 0) -> int:
    """The batch's lines answered, once they are ``at_least``."""
    while True:
        counts = (await sdk.batches.retrieve(batch_id)).request_counts
        done = counts.completed if counts is not None else 0
        if done >= at_least:
            return done
        await asyncio.sleep(0.1)


async def sample_busy(sim_url: str, stop: asyncio.Event, samples: list[float]) -> None:
    """Every 20 ms, the simulator's running sequences / slots."""
    async with httpx.AsyncClient(timeout=5) as client:
        while not stop.is_set():
            text = (await client.get(sim_url + "/metrics")).text
            running = next(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:num_requests_running")
            )
            samples.append(running / SLOTS)
            await asyncio.sleep(0.02)


async def arm(workdir: Path, args: argparse.Namespace, with_batch: bool) -> dict[str, Any]:
    secrets = await make_keys(f"sqlite+aiosqlite:///{workdir / 'gateway.db'}", ["chat", "batcher"])
    sim_args = ["--decode-tps", str(args.decode_tps)]
    with simulator_and_gateway(workdir, SLOTS, sim_args, files_dir=workdir / "files") as (sim_url, gw_url, _):
        sdk = openai.AsyncOpenAI(base_url=gw_url + "/v1", api_key=secrets["batcher"], max_retries=0)
        batch_id = None
        if with_batch:
            batch_id = await start_batch(sdk, args.lines, args.line_tokens)
            await completed(sdk, batch_id, at_least=2 * SLOTS)  # its lines flow
        stop, samples = asyncio.Event(), list[float]()
        sampler = asyncio.create_task(sample_busy(sim_url, stop, samples))
        done_before = await completed(sdk, batch_id) if batch_id else 0
        began = time.perf_counter()
        url = gw_url + "/v1/chat/completions"
        async with httpx.AsyncClient(timeout=600) as client:
            chats = []
            for _ in range(int(args.seconds / args.every)):
                chats.append(asyncio.create_task(chat_ttft(client, url, secrets["chat"], args.chat_tokens)))
                await asyncio.sleep(args.every)
            ttfts = await asyncio.gather(*chats)
        window = time.perf_counter() - began
        stop.set()
        await sampler
        figures: dict[str, Any] = {
            "ttft_p50_s": pct(ttfts, 50),
            "ttft_p95_s": pct(ttfts, 95),
            "chats": len(ttfts),
        }
        if batch_id is not None:
            lines = await completed(sdk, batch_id) - done_before
            figures |= {
                "busy_fraction": sum(samples) / len(samples),
                "lines_per_minute": 60 * lines / window,
                "line_duration_s": SLOTS * window / max(1, lines),
                "lines_in_window": lines,
            }
            await sdk.batches.cancel(batch_id)
        await sdk.close()
        return figures


async def start_batch(sdk: openai.AsyncOpenAI, lines: int, tokens: int) -> str:
    """A batch of ``lines`` lines of ``max_tokens`` ``tokens`` created; its id."""
    made = await sdk.files.create(file=("in.jsonl", io.BytesIO(batch_input(lines, tokens))), purpose="batch")
    created = await sdk.batches.create(input_file_id=made.id, endpoint="/v1/chat/completions",
                                       completion_window="24h")  # fmt: skip
    return created.id


async def small_batch(workdir: Path, args: argparse.Namespace, beside_large: bool) -> float:
    """Seconds from creating a ``--small-lines`` batch of key ``small`` to its completion: alone, or
    created once a ``--lines`` batch of key ``batcher`` flows (cancelled after)."""
    secrets = await make_keys(f"sqlite+aiosqlite:///{workdir / 'gateway.db'}", ["small", "batcher"])
    sim_args = ["--decode-tps", str(args.decode_tps)]
    with simulator_and_gateway(workdir, SLOTS, sim_args, files_dir=workdir / "files") as (_, gw_url, _):
        async with (
            openai.AsyncOpenAI(base_url=gw_url + "/v1", api_key=secrets["batcher"], max_retries=0) as large,
            openai.AsyncOpenAI(base_url=gw_url + "/v1", api_key=secrets["small"], max_retries=0) as small,
        ):
            large_id = None
            if beside_large:
                large_id = await start_batch(large, args.lines, args.line_tokens)
                await completed(large, large_id, at_least=2 * SLOTS)
            began = time.perf_counter()
            small_id = await start_batch(small, args.small_lines, args.line_tokens)
            await completed(small, small_id, at_least=args.small_lines)
            took = time.perf_counter() - began
            if large_id is not None:
                await large.batches.cancel(large_id)
            return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10_000, help="lines of the batch")
    parser.add_argument("--line-tokens", type=int, default=32, help="max_tokens of a batch line")
    parser.add_argument("--chat-tokens", type=int, default=16, help="max_tokens of an interactive chat")
    parser.add_argument(
        "--decode-tps", type=float, default=200.0, help="simulator decode tokens/s a sequence"
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the interactive load, s")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between interactive chats")
    parser.add_argument("--small-lines", type=int, default=20, help="lines of the second key's batch")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    results = {}
    for name, with_batch in (("alone", False), ("beside", True)):
        with tempfile.TemporaryDirectory(prefix=f"batch-slots-{name}-") as workdir:
            results[name] = asyncio.run(arm(Path(workdir), args, with_batch))
        f = results[name]
        shown = f"{name:>6}: interactive TTFT p50 {f['ttft_p50_s']:.3f} s p95 {f['ttft_p95_s']:.3f} s"
        if with_batch:
            shown += (f"; slots busy {100 * f['busy_fraction']:.1f} %; {f['lines_per_minute']:.0f} batch "
                      f"lines/min; a line holds a slot {f['line_duration_s']:.3f} s")  # fmt: skip
        print(f"{shown} ({f['chats']} chats)", flush=True)
    small: dict[str, Any] = {}
    for name, beside_large in (("alone_s", False), ("beside_s", True)):
        with tempfile.TemporaryDirectory(prefix="batch-slots-small-") as workdir:
            small[name] = asyncio.run(small_batch(Path(workdir), args, beside_large))
    results["small_batch"] = small
    alone, beside = results["alone"], results["beside"]
    added = beside["ttft_p95_s"] - alone["ttft_p95_s"]
    ratio = small["beside_s"] / small["alone_s"]
    print(
        f"a {args.small_lines}-line batch of another key: {small['alone_s']:.1f} s alone, "
        f"{small['beside_s']:.1f} s beside the {args.lines}-line one ({ratio:.2f}x)"
    )
    results["targets"] = {
        "p95_within_1_5x_alone_plus_50ms": beside["ttft_p95_s"] <= 1.5 * alone["ttft_p95_s"] + 0.05,
        "busy_90_percent": beside["busy_fraction"] >= 0.90,
        "small_batch_within_2_5x": ratio <= 2.5,
    }
    print(f"p95 added by the batch {added:.3f} s vs one line {beside['line_duration_s']:.3f} s; targets: "
          + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in results["targets"].items()))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
