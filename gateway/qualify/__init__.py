"""Qualification tools: ``bench`` (TTFT, decode tokens/s, DSpark acceptance per workload) and
``proof`` (production gates), for the gateway or any OpenAI-compatible server.

Methodology and definitions: ``docs/methodology.md``.
"""

from gateway.qualify.cli import bench_command, proof_command, qualify_app

__all__ = ["bench_command", "proof_command", "qualify_app"]
