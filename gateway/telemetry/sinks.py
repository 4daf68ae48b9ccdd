"""Where a finished :class:`RequestTelemetry` goes: Prometheus, the usage ledger, one access-log line.

Every sink reads the same record once; none of them sees prompt text or the key.
"""

from __future__ import annotations

import logging

from dspark_common import json_codec
from gateway.telemetry.ledger import UsageLedger
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.record import RequestTelemetry

access_log = logging.getLogger("gateway.access")


class TelemetrySinks:
    """Fans one record out to metrics, ledger and log."""

    def __init__(self, metrics: GatewayMetrics, ledger: UsageLedger) -> None:
        self.metrics = metrics
        self.ledger = ledger

    def check(self) -> None:
        """Raises 503 ``ledger_unavailable`` while the ledger can't keep more rows
        (:meth:`~gateway.telemetry.ledger.UsageLedger.check`)."""
        self.ledger.check()

    def publish(self, record: RequestTelemetry) -> None:
        """Record one finished request (no I/O on the caller's path: the ledger batches)."""
        self.metrics.observe(record)
        self.ledger.add(record)
        if access_log.isEnabledFor(logging.INFO):
            access_log.info(
                json_codec.dumps_text(
                    {
                        "request_id": record.request_id,
                        "key": record.key_name,
                        "model": record.model,
                        "route": record.route,
                        "api": record.api,
                        "status": record.status,
                        "finish_reason": record.finish_reason,
                        "prompt_tokens": record.prompt_tokens,
                        "completion_tokens": record.completion_tokens,
                        "queue_wait_s": record.queue_wait_s,
                        "waited_for": record.waited_for,
                        "lane": record.lane,
                        "kv_tokens": record.kv_tokens,
                        "prompt_size_source": record.prompt_size_source,
                        "ttft_s": record.ttft_s,
                        "e2e_s": record.e2e_s,
                        "client_disconnected": record.client_disconnected,
                        "end_reason": record.end_reason,
                    }
                )
            )
