"""The rich tables ``bench`` and ``proof`` print (the JSON reports hold the same figures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from dspark_qualify.serving_metrics import METRICS, PERCENTILES

if TYPE_CHECKING:
    from dspark_qualify.result import GateResult

__all__ = ["STATUS_STYLE", "fmt", "load_tables", "medians_table", "proof_table"]

STATUS_STYLE = {"PASS": "green", "FAIL": "red", "NOT-APPLICABLE": "yellow"}


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def medians_table(report: dict[str, Any], title: str) -> Table:
    """Sequential mode: one row of medians per workload."""
    table = Table(title=title)
    for col in (
        "workload",
        "n",
        "TTFT s",
        "decode tok/s",
        "acceptance",
        "mean acc. len",
        "acceptance source",
    ):
        table.add_column(col)
    for name, row in report["medians"].items():
        acc = row["acceptance_rate"]
        table.add_row(
            name,
            str(row["n"]),
            fmt(row["ttft_s"]),
            fmt(row["decode_tokens_per_s"], 2),
            "—" if acc is None else f"{acc:.2%}",
            fmt(row["mean_acceptance_length"], 2),
            row["acceptance_source"] or "—",
        )
    return table


def load_tables(report: dict[str, Any], title: str) -> tuple[Table, Table]:
    """Load mode: the totals and the latency figures, in the order of vLLM's printed report."""
    totals = Table(title=title, show_header=False)
    rows = (
        ("Successful requests", report["completed"]),
        ("Failed requests", report["failed"]),
        ("Maximum request concurrency", report["max_concurrency"]),
        ("Request rate configured (RPS)", report["request_rate"]),
        ("Benchmark duration (s)", report["duration"]),
        ("Total input tokens", report["total_input_tokens"]),
        ("Total generated tokens", report["total_output_tokens"]),
        ("Request throughput (req/s)", report["request_throughput"]),
        ("Output token throughput (tok/s)", report["output_throughput"]),
        ("Total token throughput (tok/s)", report["total_token_throughput"]),
    )
    for label, value in rows:
        totals.add_row(label, fmt(value, 2))
    latency = Table(title="latency, ms")
    for col in ("metric", "mean", "median", "std", *(f"p{p}" for p in PERCENTILES)):
        latency.add_column(col, justify="left" if col == "metric" else "right")
    for name, label in METRICS.items():
        stats = ("mean", "median", "std", *(f"p{p}" for p in PERCENTILES))
        latency.add_row(f"{name.upper()} ({label})", *(fmt(report[f"{s}_{name}_ms"], 2) for s in stats))
    return totals, latency


def proof_table(results: Sequence[GateResult], title: str) -> Table:
    table = Table(title=title)
    for col in ("gate", "result", "reason", "s"):
        table.add_column(col)
    for r in results:
        status = Text(r.status, style=STATUS_STYLE[r.status])
        table.add_row(r.gate, status, Text(r.reason), f"{r.seconds:.2f}")  # a reason may hold "[...]"
    return table
