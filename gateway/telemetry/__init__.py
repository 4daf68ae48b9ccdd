"""Telemetry: Prometheus metrics of the gateway."""

from gateway.telemetry.metrics import GatewayMetrics

__all__ = ["GatewayMetrics"]
