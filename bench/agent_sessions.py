"""Coding-agent sessions beside cold long prompts and short chats on the simulator: a plain two-slot
FIFO, the scheduler before prefix-cache-aware admission, and the scheduler now, the same load, in one
run.

Scale: the deployment at 1/10 in tokens and 5x in speed (as :mod:`bench.kv_mix`): a KV pool of 137,258
tokens (1,372,579 / 10), context 104,858, prefill 8,205 tokens/s (the recipe's 159,979 uncached tokens
in 97.50 s, x5) shared by the sequences prefilling at once, decode 450 tokens/s a sequence, blocks of 32
tokens (256 / 8), the long-prompt threshold 3,277 tokens (32,768 / 10), prompts of bodies from 1,638
bytes counted by the backend (16,384 / 10). The simulator keeps a prefix cache (vLLM's, LRU eviction of
free blocks) in every arm.

Load, the same in every arm (``--seed``):

- ``--agents`` agent sessions (a key each, ``x-session-id``), started 1.5 s apart: a ~3,000-token
  start (instructions, tools, the task) and ``--turns`` turns; each turn streams 80 tokens, then a
  tool gap of 0.2-3 s, then the next turn re-sends the conversation with the answer and a tool result
  of 500-2,000 tokens added (contexts grow to ~20,000 tokens: 30k-200k at scale 1);
- cold long prompts from key ``docs``: a distinct document of ``--doc-tokens`` (90,000: the
  deployment's 949,896-token qualification at 1/10) every ``--doc-every`` s from t = 3 s
  (``max_tokens`` 64): once the agents' contexts have grown, one such document and their prefixes
  do not fit the pool together (``--doc-tokens 60000``: they do);
- short streamed chats (~60 tokens, ``max_tokens`` 32) from four keys, two a second.

Arms (a fresh simulator and gateway each):

- **fifo**: the fair per-key queue in front of two slots, nothing more (every request fits:
  ``GATEWAY_KV_BUDGET_TOKENS=10^9``; no lane: ``GATEWAY_EXPRESS_SLOTS=0``; ``GATEWAY_PREFIX_CACHING=false``;
  each key in turn in arrival order: ``GATEWAY_QUEUE_ORDER=arrival``; no prefill preemption);
- **before**: the KV budget and the long-prompt lane sized by whole prompts, no session holds
  (``GATEWAY_PREFIX_CACHING=false``), keys in turn (``GATEWAY_QUEUE_ORDER=arrival``), no prefill
  preemption: admission as it was before it knew the prefix cache;
- **now**: the gateway as deployed, scaled, subscribed to the simulator's KV events (vLLM's ZMQ wire):
  sized by the tokens left to compute, sessions held ``GATEWAY_SESSION_HOLD_S`` (3 s), the queue in
  order of expected work (``GATEWAY_QUEUE_ORDER=work``), a cold prompt's prefill preempted for a
  much shorter request (``GATEWAY_PREFILL_PREEMPTION``).

Figures per arm: agent follow-up turns' TTFT (sent -> first event with text) p50 / p95 and the
first turns' apart; prefill tokens recomputed (a follow-up turn's previous prompt, computed before,
less what the cache served it: ``usage.prompt_tokens_details.cached_tokens``) and all prefill computed
(prompt - cached, every request; a document's whole prompt: :func:`computed`); short chats' TTFT
p50 / p95, and p95 of those sent while a cold prompt waited or prefilled (from its sending to its
first token: the one slot its lane leaves is all the agents' turns and the short chats have then);
throughput (output tokens / s over the
makespan); fairness: Jain's index (Jain, Chiu & Hawe 1984, (sum x)^2 / (n sum x^2)) over keys of
x = the key's time alone / time taken (sum over its requests of the simulator's no-queue
end-to-end time, ``ttft_base + computed / prefill_tps + output / decode_tps``, over the measured one).
Then before / now and fifo / now ratios. Failed requests are counted; the script exits 1 if any.

Usage::

    .venv/bin/python -m bench.agent_sessions [--agents 4] [--turns 16] [--doc-every 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import MODEL, BenchError, make_keys, pct, simulator_and_gateway, sse_events
from bench.sse_counter import TEXT
from tests.support.servers import free_port

POOL, CONTEXT, BLOCK, LONG, TOKENIZE_MIN_BYTES = 137_258, 104_858, 32, 3_277, 1_638
PREFILL_TPS, DECODE_TPS, TTFT_BASE_S = 8_205.0, 450.0, 0.02
SIM_ARGS = [
    "--kv-cache-tokens", str(POOL), "--max-model-len", str(CONTEXT), "--prefill-tps", str(PREFILL_TPS),
    "--decode-tps", str(DECODE_TPS), "--ttft-base-s", str(TTFT_BASE_S), "--block-size", str(BLOCK),
]  # fmt: skip
SIZED = {
    "kv_budget_tokens": POOL,
    "max_model_len": CONTEXT,
    "long_prompt_tokens": LONG,
    "tokenize_min_bytes": TOKENIZE_MIN_BYTES,
}
ARMS: dict[str, dict[str, object]] = {
    "fifo": {
        "kv_budget_tokens": 10**9,
        "max_model_len": CONTEXT,
        "express_slots": 0,
        "prefix_caching": False,
        "queue_order": "arrival",
        "prefill_preemption": False,
    },
    "before": {**SIZED, "prefix_caching": False, "queue_order": "arrival", "prefill_preemption": False},
    "now": {**SIZED, "kv_block_size": BLOCK},
}
QUEUE = {"queue_max": 1000, "queue_max_per_key": 500, "queue_timeout_s": 600, "queue_timeout_long_s": 600}
SHORT_KEYS = ["chat-0", "chat-1", "chat-2", "chat-3"]
AGENT_OUTPUT, DOC_OUTPUT, SHORT_OUTPUT = 80, 64, 32
#: Characters per simulated token (dspark_sim.tokens: one id per 4 characters).
CHARS = 4


def words(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` simulated tokens of text no other call repeats."""
    vocabulary = ("alpha", "build", "cache", "delta", "error", "fixed", "graph", "hash", "index", "json")
    out, size = [], 0
    while size < tokens * CHARS:
        word = f"{rng.choice(vocabulary)}{rng.randrange(10**6)} "
        out.append(word)
        size += len(word)
    return "".join(out)


@dataclass
class Agent:
    """One agent session's script: its start, and per turn the tool gap before it and the tool
    result it adds (the first turn adds none)."""

    key: str
    start_s: float
    opening: list[dict[str, str]]
    gaps_s: list[float]
    tool_results: list[str]


@dataclass
class Plan:
    """Everything every arm sends, made once from the seed."""

    agents: list[Agent]
    docs: list[tuple[float, str]]  # (send at s, text)
    shorts: list[tuple[float, str, str]]  # (send at s, key, text)


def plan(seed: int, agents: int, turns: int, doc_every: float, doc_tokens: int) -> Plan:
    """The load: ``agents`` sessions of ``turns`` turns; documents of ``doc_tokens`` every
    ``doc_every`` s while the agents run (estimated at 2.5 s a turn); two short chats a second."""
    rng = random.Random(seed)
    sessions = []
    for n in range(agents):
        opening = [
            {"role": "system", "content": f"You are coding agent {n}. Tools: " + words(rng, 2_000)},
            {"role": "user", "content": "Task: " + words(rng, 1_000)},
        ]
        gaps = [rng.uniform(0.2, 3.0) for _ in range(turns - 1)]
        results = [words(rng, rng.randrange(500, 2_000)) for _ in range(turns - 1)]
        sessions.append(Agent(f"agent-{n}", 1.5 * n, opening, gaps, results))
    horizon = 1.5 * agents + 2.5 * turns
    docs = [
        (3.0 + i * doc_every, f"Document {i}. " + words(rng, doc_tokens))
        for i in range(int(horizon // doc_every))
    ]
    shorts = [
        (1.0 + i / 2, SHORT_KEYS[i % 4], f"Question {i}: " + words(rng, 50)) for i in range(int(2 * horizon))
    ]
    return Plan(sessions, docs, shorts)


@dataclass
class Done:
    """One answered request: its key, kind (``agent``, ``agent-first``, ``doc``, ``short``), when it
    was sent (s from the run's start), TTFT and end-to-end s, usage, and for an agent turn the tokens
    of its previous prompt."""

    key: str
    kind: str
    sent_s: float
    ttft_s: float
    e2e_s: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    previous_prompt: int = 0


@dataclass
class Run:
    done: list[Done] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def stream(client: httpx.AsyncClient, url: str, secret: str, body: dict[str, Any],
                 headers: dict[str, str] | None = None) -> tuple[float, float, dict[str, Any]]:  # fmt: skip
    """POST ``body`` streamed with usage: (TTFT s, end-to-end s, usage)."""
    target = (url, {"Authorization": f"Bearer {secret}", **(headers or {})})
    body = {
        **body,
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    start = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] = {}
    async with contextlib.aclosing(sse_events(client, target, body)) as events:
        async for now, event in events:
            if first is None and TEXT.search(event):
                first = now
            if b'"usage":{' in event:
                usage = json.loads(event.removeprefix(b"data: "))["usage"] or usage
    if first is None or not usage:
        raise BenchError("stream ended without content or usage")
    return first - start, time.perf_counter() - start, usage


def cached_of(usage: dict[str, Any]) -> int:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


async def run_arm(workdir: Path, arm: str, load: Plan) -> tuple[Run, float]:
    """One arm's load against a fresh simulator and gateway: what was answered, and the makespan."""
    database = f"sqlite+aiosqlite:///{workdir / 'gateway.db'}"
    secrets = await make_keys(database, [a.key for a in load.agents] + ["docs", *SHORT_KEYS])
    settings = {**ARMS[arm], **QUEUE}
    sim_args = list(SIM_ARGS)
    if arm == "now":
        events, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
        sim_args += ["--kv-events-endpoint", events, "--kv-events-replay-endpoint", replay]
        settings |= {"kv_events": events, "kv_events_replay": replay}
    run = Run()
    with simulator_and_gateway(workdir, 2, sim_args, **settings) as (_sim_url, gw_url, _pids):
        url = gw_url + "/v1/chat/completions"
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:

            async def one(
                key: str, kind: str, body: dict[str, Any], previous: int = 0, **headers: str
            ) -> int:
                sent = time.perf_counter() - began
                try:
                    ttft, e2e, usage = await stream(client, url, secrets[key], body, headers)
                except (BenchError, httpx.HTTPError) as exc:
                    run.failures.append(f"{kind} {key}: {exc}")
                    return 0
                prompt, output = usage["prompt_tokens"], usage["completion_tokens"]
                run.done.append(Done(key, kind, sent, ttft, e2e, prompt, cached_of(usage), output, previous))
                return prompt

            async def agent(script: Agent) -> None:
                await asyncio.sleep(script.start_s)
                messages = list(script.opening)
                previous = 0
                for turn in range(len(script.gaps_s) + 1):
                    if turn:
                        await asyncio.sleep(script.gaps_s[turn - 1])
                        messages += [
                            {"role": "assistant", "content": f"Turn {turn}: I will run the tool."},
                            {"role": "user", "content": "Tool result: " + script.tool_results[turn - 1]},
                        ]
                    body = {"messages": messages, "max_tokens": AGENT_OUTPUT}
                    kind = "agent" if turn else "agent-first"
                    previous = await one(script.key, kind, body, previous, **{"x-session-id": script.key})
                    if not previous:
                        return

            async def later(at: float, key: str, kind: str, text: str, max_tokens: int) -> None:
                await asyncio.sleep(at)
                await one(
                    key, kind, {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
                )

            began = time.perf_counter()
            agents = [asyncio.create_task(agent(a)) for a in load.agents]
            others = [
                asyncio.create_task(later(at, "docs", "doc", text, DOC_OUTPUT)) for at, text in load.docs
            ]
            others += [
                asyncio.create_task(later(at, key, "short", text, SHORT_OUTPUT))
                for at, key, text in load.shorts
            ]
            await asyncio.gather(*agents, *others)
            makespan = time.perf_counter() - began
    return run, makespan


def computed(done: Done) -> int:
    """The prompt tokens a request computed: all but what the cache served it, and all of a document's.
    A document is distinct, so nothing of it is cached before it runs; a document whose prefill was
    preempted (``GATEWAY_PREFILL_PREEMPTION``) was sent again, and that send's usage reports as cached
    what its own earlier sends computed."""
    return done.prompt_tokens if done.kind == "doc" else done.prompt_tokens - done.cached_tokens


def alone_s(done: Done) -> float:
    """A request's end-to-end time on an idle simulator: what it computes and decodes, s."""
    return TTFT_BASE_S + computed(done) / PREFILL_TPS + done.output_tokens / DECODE_TPS


def jain(values: list[float]) -> float:
    """Jain's fairness index of ``values``: 1 when all are equal, 1/n when one has everything."""
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def spread(values: list[float]) -> dict[str, float]:
    """p50, p95 and max of ``values`` (NaN when empty)."""
    return {"p50": pct(values, 50), "p95": pct(values, 95), "max": max(values, default=float("nan"))}


def figures(run: Run, makespan: float) -> dict[str, Any]:
    by_kind: dict[str, list[Done]] = defaultdict(list)
    by_key: dict[str, list[Done]] = defaultdict(list)
    for done in run.done:
        by_kind[done.kind].append(done)
        by_key[done.key].append(done)
    turns = [d.ttft_s for d in by_kind["agent"]]
    firsts = [d.ttft_s for d in by_kind["agent-first"]]
    shorts = [d.ttft_s for d in by_kind["short"]]
    cold = [(d.sent_s, d.sent_s + d.ttft_s) for d in by_kind["doc"]]
    during = [d.ttft_s for d in by_kind["short"] if any(a <= d.sent_s < b for a, b in cold)]
    progress = {key: sum(map(alone_s, ds)) / sum(d.e2e_s for d in ds) for key, ds in by_key.items()}
    return {
        "agent_turns": len(turns),
        "agent_turn_ttft_s": {
            "p50": pct(turns, 50),
            "p95": pct(turns, 95),
            "max": max(turns, default=float("nan")),
        },
        "agent_first_ttft_s": spread(firsts),
        "recomputed_prefill_tokens": sum(
            max(0, d.previous_prompt - d.cached_tokens) for d in by_kind["agent"]
        ),
        "prefill_computed_tokens": sum(map(computed, run.done)),
        "short_requests": len(shorts),
        "short_ttft_s": {
            "p50": pct(shorts, 50),
            "p95": pct(shorts, 95),
            "max": max(shorts, default=float("nan")),
        },
        "short_sent_during_cold_prompt": len(during),
        "short_ttft_during_cold_prompt_s": spread(during),
        "docs": len(by_kind["doc"]),
        "doc_e2e_s_max": max((d.e2e_s for d in by_kind["doc"]), default=float("nan")),
        "output_tokens_per_s": sum(d.output_tokens for d in run.done) / makespan,
        "makespan_s": makespan,
        "jain_over_keys": jain(list(progress.values())),
        "progress_by_key": progress,
        "failures": run.failures,
    }


def targets(results: dict[str, Any]) -> dict[str, bool]:
    """Issue 59's targets: agent follow-up TTFT p95 >= 5x lower than the scheduler before; short
    chats' TTFT p95 <= 0.3 s and <= 1/3 of the plain FIFO's; Jain's index >= 0.9."""
    now = results["now"]
    return {
        "agent_turn_ttft_p95_5x_lower": results["before_over_now"]["agent_turn_ttft_p95"] >= 5,
        "short_ttft_p95_0_3_s": now["short_ttft_s"]["p95"] <= 0.3,
        "short_ttft_p95_third_of_fifo": results["fifo_over_now"]["short_ttft_p95"] >= 3,
        "jain_0_9": now["jain_over_keys"] >= 0.9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=4, help="agent sessions")
    parser.add_argument("--turns", type=int, default=16, help="turns per session")
    parser.add_argument("--doc-every", type=float, default=20.0, help="seconds between cold long prompts")
    parser.add_argument("--doc-tokens", type=int, default=90_000, help="tokens of a cold long prompt")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--arms", default="fifo,before,now", help="comma-separated: fifo, before, now")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    load = plan(args.seed, args.agents, args.turns, args.doc_every, args.doc_tokens)
    results: dict[str, Any] = {}
    for arm in args.arms.split(","):
        with tempfile.TemporaryDirectory(prefix=f"agent-sessions-{arm}-") as workdir:
            results[arm] = figures(*asyncio.run(run_arm(Path(workdir), arm, load)))
        f = results[arm]
        print(
            f"{arm:>6}: agent turn TTFT p50 {f['agent_turn_ttft_s']['p50']:.3f} s p95 "
            f"{f['agent_turn_ttft_s']['p95']:.3f} s ({f['agent_turns']}); recomputed prefill "
            f"{f['recomputed_prefill_tokens']:,} tokens (all prefill {f['prefill_computed_tokens']:,}); "
            "short TTFT "
            f"p50 {f['short_ttft_s']['p50']:.3f} s p95 {f['short_ttft_s']['p95']:.3f} s "
            f"(p95 {f['short_ttft_during_cold_prompt_s']['p95']:.3f} s for the "
            f"{f['short_sent_during_cold_prompt']} sent while a cold prompt waited or prefilled); "
            f"{f['output_tokens_per_s']:.0f} output tokens/s over {f['makespan_s']:.1f} s; "
            f"Jain {f['jain_over_keys']:.3f}; failures {len(f['failures'])}"
        )
    if "now" in results:
        now = results["now"]
        for base in ("before", "fifo"):
            if base in results:
                was = results[base]
                ratios = {
                    "agent_turn_ttft_p95": was["agent_turn_ttft_s"]["p95"] / now["agent_turn_ttft_s"]["p95"],
                    "agent_turn_ttft_p50": was["agent_turn_ttft_s"]["p50"] / now["agent_turn_ttft_s"]["p50"],
                    "recomputed_prefill_fewer": 1
                    - now["recomputed_prefill_tokens"] / max(1, was["recomputed_prefill_tokens"]),
                    "short_ttft_p95": was["short_ttft_s"]["p95"] / now["short_ttft_s"]["p95"],
                    "throughput": now["output_tokens_per_s"] / was["output_tokens_per_s"],
                }
                results[f"{base}_over_now"] = ratios
                print(f"{base} / now: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
        if "before" in results and "fifo" in results:
            results["targets"] = targets(results)
            print(
                "targets: "
                + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in results["targets"].items())
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    failures = [line for arm in results.values() for line in arm.get("failures", [])]
    if failures:
        print("failures:", *failures[:10], sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
