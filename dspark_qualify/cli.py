"""Typer commands ``bench`` and ``proof`` (mounted as ``dspark-gateway bench`` / ``dspark-gateway proof``).

``bench_command`` and ``proof_command`` are plain functions so the main app can register them
(``app.command("bench")(bench_command)``); ``qualify_app`` has both, for use on its own.

The measuring code (and the ``openai`` SDK it drives) is imported when a command runs, not when the
CLI loads: ``dspark-gateway serve`` shares this CLI and would otherwise carry megabytes it never uses.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from dspark_common.gateway_url import URL_ENV, GatewayUrl
from dspark_common.progress import progress_for
from dspark_qualify.urls import public_url
from dspark_qualify.workloads import parse_workloads

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from dspark_qualify.bench import BenchConfig, RunRecord
    from dspark_qualify.load import LoadConfig
    from dspark_qualify.result import GateResult
    from dspark_qualify.target import Target

__all__ = ["bench_command", "proof_command", "qualify_app"]

UrlOpt = Annotated[
    str,
    typer.Option(
        "--url",
        "--base-url",
        envvar=[URL_ENV, "OPENAI_BASE_URL"],
        show_envvar=True,
        help="The gateway's address, http://HEAD:8080 (/v1 or not), or any OpenAI-compatible base URL",
    ),
]
ApiKeyOpt = Annotated[
    str,
    typer.Option("--api-key", envvar="OPENAI_API_KEY", help="API key (gateway key; any text for bare vLLM)"),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="Model id (default: the first one /models lists)")
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the report as JSON on stdout (the tables go to stderr)")
]
ReportOpt = Annotated[Path | None, typer.Option("--report", help="Write the report as JSON to this file too")]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", help="Per-request timeout, s (a 1M prefill takes ~18 min)")
]
LOAD_DEFAULT_PROMPTS = 100


@dataclass(frozen=True, slots=True)
class Output:
    """Where a command's report goes: ``console`` for people (stderr when stdout carries the JSON),
    the JSON on stdout with ``--json``, and into the ``--report`` file."""

    console: Console
    json_out: bool
    report_path: Path | None

    @classmethod
    def of(cls, json_out: bool, report_path: Path | None) -> Output:
        return cls(Console(stderr=json_out), json_out, report_path)

    def address(self, url: str) -> str:
        """The OpenAI base URL of ``--url`` (:class:`GatewayUrl`), saying so when it added ``/v1``."""
        try:
            address = GatewayUrl.parse(url)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--url") from None
        if note := address.api_note():
            self.console.print(escape(note))
        return address.api

    def write(self, report: dict[str, Any]) -> None:
        text = json.dumps(report, indent=2)
        if self.report_path is not None:
            self.report_path.write_text(text + "\n")
            self.console.print(f"report written to {self.report_path}")
        if self.json_out:
            typer.echo(text)


def _probe(base_url: str, api_key: str, timeout: float, console: Console) -> Target:
    """What answers at ``base_url`` (:mod:`dspark_qualify.target`), printed as the report header."""
    import httpx2

    from dspark_qualify.target import probe_target

    with httpx2.Client(timeout=timeout) as http:
        target = probe_target(http, base_url, api_key)
    style = "bold yellow" if target.simulator else "bold"
    console.print(f"target: [{style}]{escape(target.describe())}[/] at {public_url(base_url)}")
    return target


def _client(base_url: str, api_key: str, timeout: float, connections: int | None) -> AsyncOpenAI:
    """The SDK client; ``connections`` kept alive (``None``: no cap), none refused as vLLM's own
    benchmark client does (the SDK's default pool would queue requests past 1,000 on the client)."""
    import httpx2
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=connections)
    http = DefaultAsyncHttpxClient(limits=limits, timeout=timeout)
    return AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http)


def bench_command(
    base_url: UrlOpt,
    api_key: ApiKeyOpt = "EMPTY",
    model: ModelOpt = None,
    workloads: Annotated[
        str, typer.Option("--workloads", help="Comma-separated: counting,dataclasses,prose")
    ] = ("counting,dataclasses,prose"),
    repetitions: Annotated[
        int | None,
        typer.Option(
            "--repetitions", min=1, help="Measured runs per workload (sequential mode) [default: 3]"
        ),
    ] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Unmeasured runs per workload first")] = 1,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="max_tokens per run")] = 2048,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Load mode: at most N requests in flight")
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option(
            "--request-rate", help="Load mode: Poisson arrivals, req/s (inf: all at once) [default: inf]"
        ),
    ] = None,
    num_prompts: Annotated[
        int | None,
        typer.Option(
            "--num-prompts", min=1, help=f"Load mode: requests sent [default: {LOAD_DEFAULT_PROMPTS}]"
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Load mode: seed of the arrival times")] = 0,
    reasoning_effort: Annotated[
        str | None,
        typer.Option("--reasoning-effort", help="Send reasoning_effort (default: server's choice)"),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="Send temperature (default: server's choice)")
    ] = None,
    json_out: JsonOpt = False,
    report_path: ReportOpt = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Load mode: draw TTFT/TPOT/ITL/E2EL distributions (PNG)")
    ] = None,
    timeout: TimeoutOpt = 1800.0,
) -> None:
    """Streamed TTFT, decode tokens/s and DSpark acceptance per workload (medians of warm runs), or,
    with --concurrency / --request-rate / --num-prompts, a load run reported as `vllm bench serve`
    does (TTFT, TPOT, ITL, E2EL percentiles; request and token throughput).

    Exit code 1 when no model can be found or every measured run failed."""
    from dspark_qualify.bench import BenchConfig

    output = Output.of(json_out, report_path)
    console = output.console
    base_url = output.address(base_url)
    try:
        chosen = parse_workloads(workloads)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--workloads") from exc
    load = _load_config(concurrency, request_rate, num_prompts, seed, repetitions, plot)
    _require_plotting(plot, console)
    target = _probe(base_url, api_key, timeout, console)
    if model is None:
        if not target.models:
            why = target.error or "none listed"
            console.print(f"[red]cannot list models at {public_url(base_url)}/models: {escape(why)}[/]")
            raise typer.Exit(1)
        model = target.models[0]
    extra: dict[str, Any] = {"reasoning_effort": reasoning_effort} if reasoning_effort else {}
    if temperature is not None:
        extra["temperature"] = temperature
    config = BenchConfig(base_url, model, chosen, repetitions or 3, warmup, max_tokens, extra or None, target)
    if load is None:
        _bench_sequential(config, api_key, timeout, output)
    else:
        _bench_load(config, load, api_key, timeout, output, plot)


def _load_config(
    concurrency: int | None,
    request_rate: float | None,
    num_prompts: int | None,
    seed: int,
    repetitions: int | None,
    plot: Path | None,
) -> LoadConfig | None:
    """The load run the options ask for, or ``None`` for the sequential benchmark."""
    from dspark_qualify.load import LoadConfig

    if concurrency is None and request_rate is None and num_prompts is None:
        if plot is not None:
            why = "needs a load run: --concurrency, --request-rate or --num-prompts"
            raise typer.BadParameter(why, param_hint="--plot")
        return None
    if repetitions is not None:
        why = "sequential mode only; a load run sends --num-prompts requests"
        raise typer.BadParameter(why, param_hint="--repetitions")
    if request_rate is not None and not request_rate > 0:
        raise typer.BadParameter("must be > 0 (or inf)", param_hint="--request-rate")
    rate = float("inf") if request_rate is None else request_rate
    return LoadConfig(num_prompts or LOAD_DEFAULT_PROMPTS, concurrency, rate, seed)


def _require_plotting(plot: Path | None, console: Console) -> None:
    """Refuse ``--plot`` before anything runs when matplotlib is missing (one line says how to fix it)."""
    if plot is None:
        return
    from dspark_qualify.plot import INSTALL_HINT, plot_available

    if not plot_available():
        console.print(f"[red]{INSTALL_HINT}[/]")
        raise typer.Exit(1)


def _title(what: str, config: BenchConfig) -> str:
    on = " — SIMULATOR" if config.target is not None and config.target.simulator else ""
    return f"{what}: {config.model}{on}"


def _bench_sequential(config: BenchConfig, api_key: str, timeout: float, output: Output) -> None:
    from dspark_qualify.bench import run_bench
    from dspark_qualify.tables import medians_table

    console = output.console
    with progress_for(console) as progress:
        task = progress.add_task("bench", total=len(config.workloads) * (config.repetitions + config.warmup))

        def advance(record: RunRecord) -> None:
            label = "warm-up" if record.warmup else f"run {record.index + 1}"
            progress.update(task, advance=1, description=f"{record.workload} {label}")
            if record.error:
                progress.console.print(f"[red]{record.workload} {label}: {escape(record.error)}[/]")

        async def run() -> dict[str, Any]:
            async with _client(config.base_url, api_key, timeout, 1) as client:
                return await run_bench(client, config, advance)

        report = asyncio.run(run())
    console.print(medians_table(report, _title(f"medians over {config.repetitions} warm run(s)", config)))
    output.write(report)
    if all(row["n"] == 0 for row in report["medians"].values()):
        raise typer.Exit(1)


def _bench_load(
    config: BenchConfig,
    load: LoadConfig,
    api_key: str,
    timeout: float,
    output: Output,
    plot: Path | None,
) -> None:
    from dspark_qualify.load import run_load
    from dspark_qualify.tables import load_tables

    console = output.console
    errors: list[str] = []
    with progress_for(console) as progress:
        warmups = len(config.workloads) * config.warmup
        # warm-ups on a bar of their own: the requests' bar counts the measured ones, N of --num-prompts
        warming = progress.add_task("warm-up", total=warmups, visible=warmups > 0)
        measured = progress.add_task("requests", total=load.num_prompts)

        def advance(record: RunRecord) -> None:
            progress.update(warming if record.warmup else measured, advance=1)
            if record.error and len(errors) < 5:  # the rest are in the report
                errors.append(record.error)
                progress.console.print(f"[red]request {record.index}: {escape(record.error)}[/]")

        async def run() -> tuple[dict[str, Any], dict[str, list[float]]]:
            async with _client(
                config.base_url, api_key, timeout, load.concurrency or load.num_prompts
            ) as client:
                return await run_load(client, config, load, advance)

        report, values = asyncio.run(run())
    title = _title(f"serving benchmark, {load.num_prompts} requests", config)
    for table in load_tables(report, title):
        console.print(table)
    output.write(report)
    if plot is not None:
        from dspark_qualify.plot import write_plot

        write_plot(plot, values, report, title)
        console.print(f"plot written to {plot}")
    if report["completed"] == 0:
        raise typer.Exit(1)


def proof_command(
    base_url: UrlOpt,
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
    json_out: JsonOpt = False,
    report_path: ReportOpt = None,
    timeout: TimeoutOpt = 1800.0,
) -> None:
    """Qualification gates, each PASS / FAIL / NOT-APPLICABLE with a reason; exit 1 if any FAILED.
    Against the simulator, gates it cannot pass are NOT-APPLICABLE ("n/a (simulator)")."""
    import httpx2
    from openai import OpenAI

    from dspark_qualify.proof import proof_report, run_proof
    from dspark_qualify.result import ProofContext
    from dspark_qualify.tables import STATUS_STYLE, proof_table

    output = Output.of(json_out, report_path)
    console = output.console
    base_url = output.address(base_url)
    target = _probe(base_url, api_key, timeout, console)
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
            target,
        )

        def show(result: GateResult) -> None:
            console.print(f"[{STATUS_STYLE[result.status]}]{result.status:<14}[/] {result.gate}")

        results = run_proof(ctx, show)
    on = " — SIMULATOR: gates it cannot pass are n/a" if target.simulator else ""
    # no --model and none listed: the gates ran against the URL, for no model in particular
    proved = ctx.model or f"{public_url(base_url)} (model unknown)"
    console.print(proof_table(results, f"proof: {proved}{on}"))
    report = proof_report(ctx, results)
    output.write(report)
    if not report["passed"]:
        raise typer.Exit(1)


qualify_app = typer.Typer(
    help="Qualification tools: benchmark and production proof.", no_args_is_help=True, rich_markup_mode=None
)
qualify_app.command("bench")(bench_command)
qualify_app.command("proof")(proof_command)
