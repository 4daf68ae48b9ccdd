"""OpenTelemetry traces of inference requests, opt-in: on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set — the SDK's standard variables, read by its OTLP/HTTP
exporter (``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_BSP_*`` … too). Off, nothing
here runs on a request.

Each request is a span (kind SERVER) named ``{gen_ai.operation.name} {gen_ai.request.model}`` after
the GenAI semantic conventions (``gen_ai.*`` attributes: operation, provider, request model, usage
input/output tokens, finish reasons, time to first token), continuing the client's W3C
``traceparent`` and passed on to the backend in the request's own ``traceparent`` (vLLM continues
it when started with ``--otlp-traces-endpoint``), so a coding agent's trace, the gateway's and the
backend's are one. What happened inside it is events on that span, written when the request ends
from its telemetry record (:class:`~gateway.telemetry.record.RequestTelemetry`, so the times are
the ledger's) — events rather than child spans, as the SDK's cost per span (building it, and the
exporter encoding it in Python under the GIL) is the larger part of tracing's cost per request::

    chat deepseek-v4-flash-0731           arrival → last byte; gen_ai.*, dspark.* attributes
    ├── event gateway.admitted            dspark.waited_for.<reason> (s), prompt size (tokens, source)
    └── event gateway.first_token         the backend's first token; decode after it:
                                          dspark.decode_tokens_per_s, dspark.spec.* on the span

Never prompt or answer text, never a key: the key's name only (as ``/metrics`` and the ledger).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import (
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.telemetry.record import RequestTelemetry

#: The variables that turn tracing on (the OTLP exporter's own).
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: ``gen_ai.operation.name`` of each client API (GenAI semantic conventions' operation names).
OPERATIONS = {"chat": "chat", "completions": "text_completion", "responses": "chat", "messages": "chat"}
_PROPAGATOR = TraceContextTextMapPropagator()
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class RequestSpan:
    """A request's span and when it started (Unix time, ns: its events' times count from it)."""

    span: Span
    start_ns: int

    @property
    def trace_id(self) -> str:
        """Its trace's id, 32 hex digits (the client's, when it sent a ``traceparent``)."""
        return format(self.span.get_span_context().trace_id, "032x")


def client_trace_id(headers: Mapping[str, str]) -> str | None:
    """The trace id of the client's W3C ``traceparent`` (32 hex digits), None without a valid one."""
    if "traceparent" not in headers:
        return None
    parent = _PROPAGATOR.extract({"traceparent": headers["traceparent"]})
    context = get_current_span(parent).get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


class Tracing:
    """The gateway's tracer (its own provider: nothing global is set) and how a request's span starts,
    is passed on and ends."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer: Tracer = provider.get_tracer("dspark-gateway")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Tracing | None:
        """Tracing to the OTLP/HTTP endpoint the standard variables name, or None when none is set."""
        if not any(environ.get(name) for name in ENDPOINT_VARIABLES):
            return None
        resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "dspark-gateway"})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    def start(self, api: str, headers: Mapping[str, str], forwarded: dict[str, str]) -> RequestSpan:
        """A request's span, child of the client's ``traceparent`` if it sent one; its own context
        written into ``forwarded`` (the headers that go to the backend)."""
        parent: Context = _PROPAGATOR.extract(
            {name: headers[name] for name in ("traceparent", "tracestate") if name in headers}
        )
        start = time.time_ns()
        span = self._tracer.start_span(
            OPERATIONS.get(api, "chat"), context=parent, kind=SpanKind.SERVER, start_time=start
        )
        _PROPAGATOR.inject(forwarded, context=set_span_in_context(span))
        return RequestSpan(span, start)

    def finish(self, request: RequestSpan, record: RequestTelemetry, admitted_s: float | None) -> None:
        """The span's attributes and events from the request's record and when it was admitted (s after
        arrival; None: never); the span ends at the record's end. A span the sampler dropped
        (``OTEL_TRACES_SAMPLER``) gets neither: nothing would export them."""
        span, start = request.span, request.start_ns
        operation = OPERATIONS.get(record.api, "chat")
        span.update_name(f"{operation} {record.model}")
        at = lambda seconds: start + int(seconds * _NS)  # noqa: E731
        if span.is_recording():
            span.set_attributes(_attributes(operation, record))
            if record.status >= 500:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {record.status}"))
            for name, seconds, attributes in _events(record, admitted_s):
                span.add_event(name, attributes, timestamp=at(seconds))
        span.end(end_time=at(record.e2e_s or 0.0))

    def shutdown(self) -> None:
        """Export what is batched, then stop (the gateway's shutdown)."""
        self._provider.shutdown()


def _attributes(operation: str, record: RequestTelemetry) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": "deepseek",
        "gen_ai.request.model": record.model,
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
        "http.response.status_code": record.status,
        "dspark.api": record.api,
        "dspark.route": record.route,
        "dspark.key_name": record.key_name,
        "dspark.request_id": record.request_id,
        "dspark.stream": record.stream,
        "dspark.usage.reasoning_tokens": record.reasoning_tokens,
        "dspark.usage.cached_tokens": record.cached_tokens,
    }
    if record.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = [record.finish_reason]
    if record.ttft_s is not None:
        attributes["gen_ai.server.time_to_first_token"] = record.ttft_s
    if record.queue_wait_s is not None:
        attributes["dspark.queue_wait_s"] = record.queue_wait_s
    if record.end_reason:
        attributes["dspark.end_reason"] = record.end_reason
    if record.group_name:
        attributes["dspark.group_name"] = record.group_name
    if record.decode_tokens_per_s is not None:
        attributes["dspark.decode_tokens_per_s"] = record.decode_tokens_per_s
    if record.spec is not None:
        attributes.update(_scalars(record.spec.as_dict(), "dspark.spec."))
    return attributes


def _events(record: RequestTelemetry, admitted_s: float | None) -> list[tuple[str, float, dict[str, Any]]]:
    """The request's events: (name, seconds after arrival, attributes), those it has times for."""
    events: list[tuple[str, float, dict[str, Any]]] = []
    if admitted_s is not None:
        admitted: dict[str, Any] = {f"dspark.waited_for.{k}": v for k, v in record.waited_for.items()}
        if record.prompt_size_source:
            admitted["dspark.prompt_size_tokens"] = record.prompt_size_tokens
            admitted["dspark.prompt_size_source"] = record.prompt_size_source
        events.append(("gateway.admitted", admitted_s, admitted))
    if record.ttft_s is not None:  # admitted_s + upstream_ttft_s
        events.append(("gateway.first_token", record.ttft_s, {}))
    return events


def _scalars(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The values an attribute can hold (no None, no nesting), their names prefixed."""
    return {prefix + k: v for k, v in values.items() if isinstance(v, str | bool | int | float)}
