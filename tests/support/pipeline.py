"""The request pipeline (:mod:`gateway.proxy`) built in one event loop in front of in-memory upstreams
(:mod:`tests.support.fake_upstream`), for the unit tests of the request path: no sockets, no threads,
no sleeps."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.admission import Admission
from gateway.auth.principal import Principal
from gateway.backends.counting import CountGate
from gateway.backends.kv_view import KVView
from gateway.backends.monitor import BackendMonitor
from gateway.backends.pool import Backend, Backends
from gateway.config import Settings
from gateway.dialects.openai.chat import CHAT
from gateway.limits.rate import RateLimiter, storage_for
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.respond import ExchangeResponse
from gateway.reasoning.policy import ReasoningShown
from gateway.telemetry import GatewayMetrics
from gateway.telemetry.record import RequestTelemetry
from tests.support.asgi_call import Call
from tests.support.fake_upstream import Answer, FakeUpstream

MODEL = "deepseek-v4-flash-0731"
KEY = Principal(key_id="key_1", name="team")


class Records:
    """The telemetry sink: every published record."""

    def __init__(self) -> None:
        self.published: list[RequestTelemetry] = []

    def publish(self, record: RequestTelemetry) -> None:
        self.published.append(record)

    def check(self) -> None:
        """Every record is kept."""


def build(
    upstream: FakeUpstream, *more: FakeUpstream, slots: int = 2, plain: bool = False, **settings: Any
) -> tuple[Pipeline, Records]:
    """The pipeline before ``upstream`` (backend ``default``), or before it and ``more`` (backends
    ``a``, ``b``, ... in that order), each with ``slots``; ``plain``: their answers are known to show
    no reasoning markers (learnt from an earlier one), so a thinking request's text streams as it
    arrives instead of waiting for a marker to say whether it is reasoning."""
    config = Settings(upstream="http://fake", spec_counters="never", slots=slots, **settings)
    upstreams = (upstream, *more)
    names = ["default"] if not more else [chr(ord("a") + i) for i in range(len(upstreams))]
    backends = []
    for name, each in zip(names, upstreams, strict=True):
        monitor = BackendMonitor(each, GatewayMetrics(), 3600, name)
        kv = KVView.configured(config, name)
        backend = Backend(name, each, Admission.configured(config), monitor, CountGate(each, 2, 1), kv)
        if plain:
            backend.learn(reasoning=ReasoningShown(reasoning_markers=False))
        backends.append(backend)
    records = Records()
    pipeline = Pipeline(Backends(backends), config, records, RateLimiter(storage_for("memory://")))
    return pipeline, records


def chat(stream: bool, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream, **fields}


def call(pipeline: Pipeline, body: dict[str, Any] | bytes, request_id: str = "req-1", **options: Any) -> Call:
    response = ExchangeResponse(pipeline, CHAT, KEY)
    return Call(response, "/v1/chat/completions", body, state={"request_id": request_id}, **options)


def chunk(
    tokens: int, content: str | None = None, reasoning: str | None = None, finish: str | None = None
) -> bytes:
    delta = {k: v for k, v in (("content", content), ("reasoning", reasoning)) if v is not None}
    obj = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens},
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


async def streaming() -> tuple[Answer, FakeUpstream, Pipeline, Records, Call]:
    """One stream request whose request has reached the upstream, nothing answered yet: its answer,
    the upstream, the pipeline, its records and the call."""
    answer = Answer()
    upstream = FakeUpstream(answer)
    pipeline, records = build(upstream, plain=True)
    running = call(pipeline, chat(True)).start()
    await upstream.arrived.wait()
    return answer, upstream, pipeline, records, running


async def steps_until(condition: Any, limit: int = 1000) -> None:
    """Loop steps (no time passes) until ``condition()`` holds."""
    for _ in range(limit):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not within {limit} loop steps")


async def settled(pipeline: Pipeline) -> None:
    """The exchanges that ended have recorded (their background task ran)."""
    await pipeline.settled()


def assert_nothing_held(pipeline: Pipeline) -> None:
    admission = pipeline.backends
    assert admission.in_use == 0 and admission.queue_depth == 0, admission.status()
