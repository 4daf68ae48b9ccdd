"""A real OTLP/HTTP trace endpoint: ``POST /v1/traces`` with an ``ExportTraceServiceRequest`` protobuf
body (the OTLP specification's binary encoding, what the SDK's ``OTLPSpanExporter`` sends), decoded
with the OTLP proto package and answered 200 with an empty protobuf body; ``GET /health`` 200.

In-process (:class:`Receiver`, an ASGI app for a test's server) it keeps every span as OTLP JSON;
as a process (``python -m tests.support.otlp_receiver --port P --counts FILE``, the benchmark's)
it keeps only how many exports and spans it got, rewritten into ``FILE`` as JSON after each export.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import uvicorn
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Receiver:
    """The endpoint: ``exports`` and ``span_count`` so far; ``spans`` each span as OTLP JSON (ids in
    base64) when ``keep``; ``counts``: a file to rewrite with ``{"exports", "spans"}`` after each."""

    def __init__(self, keep: bool = True, counts: Path | None = None) -> None:
        self.keep = keep
        self.counts = counts
        self.spans: list[dict[str, Any]] = []
        self.exports = 0
        self.span_count = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status = 200 if scope["path"] == "/health" else 404
        if scope["path"] == "/v1/traces" and scope["method"] == "POST":
            status = 200
            self._take(ExportTraceServiceRequest.FromString(body))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    def _take(self, request: ExportTraceServiceRequest) -> None:
        spans = [
            span
            for resource in request.resource_spans
            for scoped in resource.scope_spans
            for span in scoped.spans
        ]
        self.exports += 1
        self.span_count += len(spans)
        if self.keep:
            self.spans += [MessageToDict(span) for span in spans]
        if self.counts is not None:
            self.counts.write_text(json.dumps({"exports": self.exports, "spans": self.span_count}))


def main() -> None:
    parser = argparse.ArgumentParser(description="An OTLP/HTTP trace endpoint counting what it gets.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--counts", type=Path, required=True, help="JSON file: exports and spans so far")
    args = parser.parse_args()
    args.counts.write_text(json.dumps({"exports": 0, "spans": 0}))
    receiver = Receiver(keep=False, counts=args.counts)
    uvicorn.run(receiver, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
