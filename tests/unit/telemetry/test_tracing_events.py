"""Tracing.finish on hand-made records, spans kept by the SDK's in-memory exporter: where a request's
events fall on its span and what they carry."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.tracing import Tracing, client_trace_id

NS = 1_000_000_000


@pytest.fixture
def traced() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider), exporter


def record(**fields) -> RequestTelemetry:
    base = {
        "request_id": "req-1", "key_id": "k1", "key_name": "team", "model": "m",
        "route": "/v1/chat/completions", "api": "chat", "stream": True, "arrived_at": datetime.now(UTC),
        "status": 200,
    }  # fmt: skip
    return RequestTelemetry(**{**base, **fields})


def test_admission_and_first_token_fall_where_they_happened(traced) -> None:
    """Read and sized for 0.2 s, queued 0.1 s: admitted at 0.3 s (not at queue_wait_s); the backend's
    first token 0.2 s later; the span ends at e2e_s."""
    tracing, exporter = traced
    forwarded: dict[str, str] = {}
    started = tracing.start("chat", {}, forwarded)
    done = record(
        queue_wait_s=0.1, waited_for={"kv": 0.1}, prompt_size_tokens=1200, prompt_size_source="tokenize",
        upstream_ttft_s=0.2, ttft_s=0.5, e2e_s=1.5, decode_tokens_per_s=95.0,
    )  # fmt: skip
    tracing.finish(started, done, admitted_s=0.3)
    [span] = exporter.get_finished_spans()
    assert forwarded["traceparent"].split("-")[2] == f"{span.context.span_id:016x}"
    offsets = [(event.name, (event.timestamp - started.start_ns) / NS) for event in span.events]
    assert offsets == [("gateway.admitted", pytest.approx(0.3)), ("gateway.first_token", pytest.approx(0.5))]
    assert dict(span.events[0].attributes) == {
        "dspark.waited_for.kv": 0.1,
        "dspark.prompt_size_tokens": 1200,
        "dspark.prompt_size_source": "tokenize",
    }
    assert (span.end_time - started.start_ns) / NS == pytest.approx(1.5)
    assert (
        span.attributes["dspark.queue_wait_s"] == 0.1
        and span.attributes["dspark.decode_tokens_per_s"] == 95.0
    )
    assert span.name == "chat m" and span.status.status_code is StatusCode.UNSET


def test_a_request_refused_before_admission_has_no_events_and_a_5xx_is_an_error(traced) -> None:
    tracing, exporter = traced
    for status in (429, 502):
        tracing.finish(tracing.start("messages", {}, {}), record(status=status, e2e_s=0.01), admitted_s=None)
    refused, failed = exporter.get_finished_spans()
    assert len(refused.events) == 0 and len(failed.events) == 0
    assert refused.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "HTTP 502"


def test_a_requests_trace_id_is_its_spans_or_the_clients() -> None:
    """What the ledger keeps as ``trace_id``: the span's (the client's trace continued) when tracing is
    on, else the trace id of a valid ``traceparent``, else none."""
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = {"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}
    assert Tracing(TracerProvider()).start("chat", parent, {}).trace_id == trace
    assert client_trace_id(parent) == trace
    assert client_trace_id({"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}) is None  # invalid
    assert client_trace_id({"traceparent": "nonsense"}) is None and client_trace_id({}) is None
