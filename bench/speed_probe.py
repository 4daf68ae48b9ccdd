"""How fast this CPU runs now, for the benchmark's report: ``python -m bench.speed_probe`` (run it
pinned with ``taskset``) prints one JSON object.

- ``python_loop_3m_s``: seconds a 3M-iteration Python loop takes (the machine's plain speed; this
  Firecracker VM's drifts by up to 2× within a session);
- ``socketpair_roundtrip_us``: one 300-byte send + recv over a socketpair, µs;
- ``event_hot_us`` / ``event_after_idle_us``: the gateway's own work for one relayed vLLM chunk (SSE
  decode and :class:`~gateway.dialects.openai.rewrite.StreamRewriter` step), µs, median of 200: back to back,
  and as the first thing done after :data:`IDLE_S` of sleep. On this VM the second is many times the
  first (likely caches and branch predictors gone cold while the vCPU slept), and it is what a
  proxy pays whenever its load leaves it idle between events: at one stream, or at 32 streams of
  200 tokens/s (a chunk every ~0.45 ms). It decides how much the gateway's code adds to a first
  token there, so it is recorded with every run (docs/performance.md).

``--curve`` prints, instead, that per-chunk work after idle spells from 0 to 20 ms (one line each).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time

from gateway.dialects.openai.client_view import ClientView
from gateway.dialects.openai.rewrite import StreamRewriter
from gateway.dialects.sse import SSEDecoder
from gateway.reasoning.policy import ReasoningPolicy, ReasoningShown

#: Sleep before each "after idle" sample, s: longer than the gap between a 32-stream level's chunks.
IDLE_S = 0.002
#: Idle spells of ``--curve``, ms.
CURVE_IDLE_MS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0)
#: A vLLM chunk as the gateway sees it (reasoning delta, continuous usage).
CHUNK = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"reasoning":"abc def"},"logprobs":null,"finish_reason":null}],'
    b'"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}\n\n'
)


def _loop_s() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i
    return time.perf_counter() - start


def _roundtrip_us() -> float:
    a, b = socket.socketpair()
    with a, b:
        start = time.perf_counter()
        for _ in range(20_000):
            a.send(b"x" * 300)
            b.recv(65536)
        return (time.perf_counter() - start) / 20_000 * 1e6


def _event_us(idle_s: float = IDLE_S, samples: int = 200) -> tuple[float, float]:
    """(hot, after ``idle_s`` of sleep) µs of one chunk through the decoder and the rewriter."""
    policy = ReasoningPolicy(
        mode="auto", thinking=True, fields=("reasoning_content", "reasoning"), include_reasoning=True
    )
    rewriter = StreamRewriter(policy, ReasoningShown(), ClientView())
    decoder = SSEDecoder()

    def one() -> float:
        start = time.perf_counter()
        for event, payload in decoder.feed_payloads(CHUNK):
            rewriter.step(event, payload)
        return time.perf_counter() - start

    for _ in range(1000):
        one()
    hot = statistics.median(one() for _ in range(samples))
    after_idle = []
    for _ in range(samples):
        time.sleep(idle_s)
        after_idle.append(one())
    return hot * 1e6, statistics.median(after_idle) * 1e6


def probe() -> dict[str, float]:
    """Every figure of the module doc, rounded."""
    hot, after_idle = _event_us()
    return {
        "python_loop_3m_s": round(_loop_s(), 3),
        "socketpair_roundtrip_us": round(_roundtrip_us(), 2),
        "event_hot_us": round(hot, 1),
        "event_after_idle_us": round(after_idle, 1),
    }


def curve() -> list[dict[str, float]]:
    """The per-chunk work (µs, medians) after each idle spell of :data:`CURVE_IDLE_MS`."""
    points = []
    for idle_ms in CURVE_IDLE_MS:
        hot, after_idle = _event_us(idle_ms / 1000)
        points.append(
            {"idle_ms": idle_ms, "event_hot_us": round(hot, 1), "event_after_idle_us": round(after_idle, 1)}
        )
    return points


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--curve", action="store_true", help="the per-chunk work after idle spells of 0-20 ms"
    )
    if parser.parse_args().curve:
        for point in curve():
            print(json.dumps(point))
    else:
        print(json.dumps(probe()))
