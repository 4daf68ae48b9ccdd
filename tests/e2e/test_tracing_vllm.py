"""One trace across the client, the gateway and a REAL vLLM: vLLM started with
``--otlp-traces-endpoint`` (OTLP/HTTP) and the gateway both export to the same OTLP/HTTP receiver
(:mod:`tests.support.otlp_receiver`); the client's ``traceparent`` is the gateway span's parent and
the gateway's span is vLLM's ``llm_request`` span's parent."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import DEFAULT_ARGS
from tests.support.otlp_receiver import Receiver
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer
from tests.support.vllm_server import TINY_MODEL_NAME

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


def hex_id(value: str) -> str:
    return base64.b64decode(value).hex()


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[Receiver, ThreadedServer]]:
    receiver = Receiver()
    server = ThreadedServer(receiver).start()
    yield receiver, server
    server.stop()


def test_the_clients_trace_runs_through_the_gateway_into_vllm(
    receiver, vllm_factory, start_gateway, make_key, monkeypatch
) -> None:
    spans, collector = receiver
    vllm = vllm_factory(
        [*DEFAULT_ARGS, "--otlp-traces-endpoint", collector.url + "/v1/traces"],
        env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    gateway = start_gateway(vllm.base_url, served_model=TINY_MODEL_NAME)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("traced"), max_retries=0)
    stream = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=[{"role": "user", "content": "Let me think</think>Hello world"}],
        max_tokens=20,
        temperature=0,
        stream=True,
        extra_headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    gateway_span = f"chat {TINY_MODEL_NAME}"

    def names() -> set[str]:
        return {span["name"] for span in spans.spans if hex_id(span["traceId"]) == TRACE_ID}

    wait_until(lambda: {gateway_span, "llm_request"} <= names(), timeout_s=30, what="both servers' spans")
    by_name = {span["name"]: span for span in spans.spans if hex_id(span["traceId"]) == TRACE_ID}
    root, backend = by_name[gateway_span], by_name["llm_request"]
    assert hex_id(root["parentSpanId"]) == CLIENT_SPAN
    assert backend["parentSpanId"] == root["spanId"]  # vLLM continued the gateway's span
    assert int(root["startTimeUnixNano"]) <= int(backend["startTimeUnixNano"])
    assert int(backend["endTimeUnixNano"]) <= int(root["endTimeUnixNano"])
