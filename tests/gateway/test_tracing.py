"""OpenTelemetry traces through a real gateway: the SDK's OTLP/HTTP exporter posts to a real OTLP/HTTP
endpoint this test runs (:mod:`tests.support.otlp_receiver`), the OpenAI SDK is the
client and sends a ``traceparent``; a recording simulator shows what reached the backend."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from dspark_sim import SimConfig, create_sim_app
from tests.conftest import FAST_SIM
from tests.support.otlp_receiver import Receiver
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
CANARY = "PROMPT-CANARY-7f3a"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class Upstream:
    """The simulator, recording each request's headers."""

    def __init__(self) -> None:
        self.app = create_sim_app(SimConfig(**FAST_SIM))
        self.headers: list[dict[bytes, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            self.headers.append(dict(scope["headers"]))
        await self.app(scope, receive, send)


@pytest.fixture
def servers() -> Iterator[tuple[Receiver, ThreadedServer, Upstream, ThreadedServer]]:
    receiver, upstream = Receiver(), Upstream()
    collector, sim = ThreadedServer(receiver).start(), ThreadedServer(upstream).start()
    yield receiver, collector, upstream, sim
    sim.stop()
    collector.stop()


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def hex_id(value: str) -> str:
    """OTLP JSON carries ids as base64 (MessageToDict of bytes)."""
    return base64.b64decode(value).hex()


def export_to(collector: ThreadedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing on, to ``collector``, each batch sent within 50 ms."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def test_a_request_is_a_genai_span_with_events_continuing_the_clients_trace(
    servers, start_gateway, make_key, monkeypatch
) -> None:
    receiver, collector, upstream, sim = servers
    export_to(collector, monkeypatch)
    gateway = start_gateway(sim.url)
    key = make_key("traced")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Count to 3. {CANARY}"}],
        max_tokens=30,
        stream=True,
        extra_headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"},
    )
    chunks = [c for c in stream if c.choices]
    finish = chunks[-1].choices[0].finish_reason
    assert finish in ("stop", "length") and "".join(c.choices[0].delta.content or "" for c in chunks)
    wait_until(lambda: len(receiver.spans) >= 1, timeout_s=15, what="the span exported")
    [root] = receiver.spans
    assert root["name"] == f"chat {MODEL}"
    assert hex_id(root["traceId"]) == TRACE_ID and hex_id(root["parentSpanId"]) == CLIENT_SPAN
    assert root["kind"] == "SPAN_KIND_SERVER"
    told = attributes(root)
    assert told["gen_ai.operation.name"] == "chat" and told["gen_ai.request.model"] == MODEL
    assert int(told["gen_ai.usage.output_tokens"]) > 0 and int(told["gen_ai.usage.input_tokens"]) > 0
    assert told["gen_ai.response.finish_reasons"] == {"values": [{"stringValue": finish}]}
    assert told["gen_ai.server.time_to_first_token"] > 0 and told["dspark.key_name"] == "traced"
    assert told["dspark.decode_tokens_per_s"] > 0
    assert [event["name"] for event in root["events"]] == ["gateway.admitted", "gateway.first_token"]
    admitted_event, first_event = root["events"]
    assert attributes(admitted_event)["dspark.prompt_size_source"]
    start, admitted, first, end = (
        int(t)
        for t in (
            root["startTimeUnixNano"],
            admitted_event["timeUnixNano"],
            first_event["timeUnixNano"],
            root["endTimeUnixNano"],
        )
    )
    assert start <= admitted <= first <= end
    first_token = (first - start) / 1e9
    assert first_token == pytest.approx(told["gen_ai.server.time_to_first_token"], abs=1e-6)
    sent = upstream.headers[-1][b"traceparent"].decode().split("-")
    assert (sent[1], sent[2]) == (
        TRACE_ID,
        hex_id(root["spanId"]),
    )  # the backend continues the gateway's span
    exported = json.dumps(receiver.spans)
    assert CANARY not in exported and key not in exported


def test_off_without_an_endpoint_and_nothing_passed_on(servers, start_gateway, make_key, monkeypatch) -> None:
    receiver, _, upstream, sim = servers
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("plain"), max_retries=0)
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        extra_headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"},
    )
    assert b"traceparent" not in upstream.headers[-1] and receiver.spans == []


def test_a_request_the_sampler_drops_exports_nothing_and_tells_the_backend(
    servers, start_gateway, make_key, monkeypatch
) -> None:
    receiver, collector, upstream, sim = servers
    export_to(collector, monkeypatch)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")  # only a sampled client's trace
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("sampled"), max_retries=0)
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    client.chat.completions.create(**ask)  # no traceparent: a root the sampler drops
    dropped = upstream.headers[-1][b"traceparent"].decode().split("-")
    assert int(dropped[3], 16) & 1 == 0 and dropped[1] != TRACE_ID  # its own trace, sampled flag off
    client.chat.completions.create(**ask, extra_headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})
    assert int(upstream.headers[-1][b"traceparent"].decode().split("-")[3], 16) & 1 == 1
    root = f"chat {MODEL}"
    wait_until(lambda: root in {s["name"] for s in receiver.spans}, timeout_s=15, what="the sampled root")
    assert {hex_id(span["traceId"]) for span in receiver.spans} == {TRACE_ID}  # none of the dropped one
    [span] = receiver.spans
    assert span["name"] == root and [e["name"] for e in span["events"]] == [
        "gateway.admitted"
    ]  # not streamed
