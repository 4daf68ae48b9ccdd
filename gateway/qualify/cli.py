"""Typer commands ``bench`` and ``proof`` (mounted as ``dspark-gateway bench`` / ``dspark-gateway proof``).

``bench_command`` and ``proof_command`` are plain functions so the main app can register them
(``app.command("bench")(bench_command)``); ``qualify_app`` has both, for use on its own.

The measuring code (and the ``openai`` SDK it drives) is imported when a command runs, not when the
CLI loads: ``dspark-gateway serve`` shares this CLI and would otherwise carry ~17 MB it never uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gateway.qualify.urls import public_url
from gateway.qualify.workloads import parse_workloads

if TYPE_CHECKING:
    from gateway.qualify.bench import RunRecord
    from gateway.qualify.result import GateResult

__all__ = ["bench_command", "proof_command", "qualify_app"]

BaseUrlOpt = Annotated[
    str,
    typer.Option(
        "--base-url", envvar="OPENAI_BASE_URL", help="OpenAI-compatible base URL, e.g. http://HEAD:8080/v1"
    ),
]
ApiKeyOpt = Annotated[
    str,
    typer.Option("--api-key", envvar="OPENAI_API_KEY", help="API key (gateway key; any text for bare vLLM)"),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="Model id (default: the first one /models lists)")
]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write the report as JSON to this file")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", help="Per-request timeout, s (a 1M prefill takes ~18 min)")
]

_STYLE = {"PASS": "green", "FAIL": "red", "NOT-APPLICABLE": "yellow"}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _write_json(path: Path | None, report: dict[str, Any], console: Console) -> None:
    if path is not None:
        path.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"report written to {path}")


def _first_model(base_url: str, api_key: str, timeout: float) -> str:
    import httpx2

    response = httpx2.get(
        base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
    )
    response.raise_for_status()
    return str(response.json()["data"][0]["id"])


def bench_command(
    base_url: BaseUrlOpt,
    api_key: ApiKeyOpt = "EMPTY",
    model: ModelOpt = None,
    workloads: Annotated[
        str, typer.Option("--workloads", help="Comma-separated: counting,dataclasses,prose")
    ] = ("counting,dataclasses,prose"),
    repetitions: Annotated[int, typer.Option("--repetitions", min=1, help="Measured runs per workload")] = 3,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Unmeasured runs per workload first")] = 1,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="max_tokens per run")] = 2048,
    reasoning_effort: Annotated[
        str | None,
        typer.Option("--reasoning-effort", help="Send reasoning_effort (default: server's choice)"),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="Send temperature (default: server's choice)")
    ] = None,
    json_out: JsonOpt = None,
    timeout: TimeoutOpt = 1800.0,
) -> None:
    """Streamed TTFT, decode tokens/s and DSpark acceptance per workload (medians of warm runs).

    Exit code 1 when no model can be found or every measured run failed."""
    import httpx2
    from openai import OpenAI

    from gateway.qualify.bench import BenchConfig, run_bench

    console = Console()
    try:
        chosen = parse_workloads(workloads)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--workloads") from exc
    if model is None:
        try:
            model = _first_model(base_url, api_key, timeout)
        except (httpx2.HTTPError, KeyError, IndexError, ValueError) as exc:
            console.print(f"[red]cannot list models at {public_url(base_url)}/models: {exc}[/]")
            raise typer.Exit(1) from exc
    extra: dict[str, Any] = {"reasoning_effort": reasoning_effort} if reasoning_effort else {}
    if temperature is not None:
        extra["temperature"] = temperature
    config = BenchConfig(base_url, model, chosen, repetitions, warmup, max_tokens, extra or None)
    client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("bench", total=len(chosen) * (repetitions + warmup))

        def advance(record: RunRecord) -> None:
            label = "warm-up" if record.warmup else f"run {record.index + 1}"
            progress.update(task, advance=1, description=f"{record.workload} {label}")
            if record.error:
                progress.console.print(f"[red]{record.workload} {label}: {record.error}[/]")

        report = run_bench(client, config, advance)
    table = Table(title=f"medians over {repetitions} warm run(s): {model}")
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
            _fmt(row["ttft_s"]),
            _fmt(row["decode_tokens_per_s"], 2),
            "—" if acc is None else f"{acc:.2%}",
            _fmt(row["mean_acceptance_length"], 2),
            row["acceptance_source"] or "—",
        )
    console.print(table)
    _write_json(json_out, report, console)
    if all(row["n"] == 0 for row in report["medians"].values()):
        raise typer.Exit(1)


def proof_command(
    base_url: BaseUrlOpt,
    api_key: ApiKeyOpt = "EMPTY",
    model: ModelOpt = None,
    context_tokens: Annotated[
        int, typer.Option("--context-tokens", min=16, help="Retrieval haystack size, tokens (seed: 160000)")
    ] = 2000,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=1, help="max_tokens per gate request")
    ] = 1024,
    restart_cmd: Annotated[
        str | None, typer.Option("--restart-cmd", help="Shell command restarting the server (restart gate)")
    ] = None,
    restart_timeout: Annotated[float, typer.Option("--restart-timeout", help="Restart budget, s")] = 900.0,
    seed: Annotated[int | None, typer.Option("--seed", help="Haystack RNG seed (default: random)")] = None,
    json_out: JsonOpt = None,
    timeout: TimeoutOpt = 1800.0,
) -> None:
    """Qualification gates, each PASS / FAIL / NOT-APPLICABLE with a reason; exit 1 if any FAILED."""
    import httpx2
    from openai import OpenAI

    from gateway.qualify.proof import proof_report, run_proof
    from gateway.qualify.result import ProofContext

    console = Console()
    with (
        OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0) as client,
        httpx2.Client(timeout=timeout) as http,
    ):
        ctx = ProofContext(
            client,
            http,
            base_url,
            api_key,
            model,
            max_tokens,
            context_tokens,
            seed,
            restart_cmd,
            restart_timeout,
        )

        def show(result: GateResult) -> None:
            console.print(f"[{_STYLE[result.status]}]{result.status:<14}[/] {result.gate}")

        results = run_proof(ctx, show)
    table = Table(title=f"proof: {ctx.model}")
    for col in ("gate", "result", "reason", "s"):
        table.add_column(col)
    for r in results:
        table.add_row(r.gate, f"[{_STYLE[r.status]}]{r.status}[/]", r.reason, f"{r.seconds:.2f}")
    console.print(table)
    report = proof_report(ctx, results)
    _write_json(json_out, report, console)
    if not report["passed"]:
        raise typer.Exit(1)


qualify_app = typer.Typer(help="Qualification tools: benchmark and production proof.", no_args_is_help=True)
qualify_app.command("bench")(bench_command)
qualify_app.command("proof")(proof_command)
