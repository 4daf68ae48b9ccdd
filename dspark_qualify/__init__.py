"""Qualification tools: ``bench`` (TTFT, decode tokens/s, DSpark acceptance per workload; or a load
run with ``vllm bench serve``'s metrics) and ``proof`` (production gates), for the gateway or any
OpenAI-compatible server; both tell the built-in simulator from a real server.

Methodology and definitions: ``docs/methodology.md``.
"""

from dspark_qualify.cli import bench_command, proof_command, qualify_app

__all__ = ["bench_command", "proof_command", "qualify_app"]
