"""``dspark-gateway`` commands other than ``keys``: serve, sim, token, usage.

Flags override ``GATEWAY_*`` environment variables (they are passed to :class:`Settings` directly).
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Annotated, Any

import typer
import uvloop
from rich.console import Console
from rich.table import Table

from gateway.cli.settings import fail, settings
from gateway.db import open_engine
from gateway.durations import parse_duration, parse_since
from gateway.telemetry.ledger import UsageLedger

app = typer.Typer(help="dspark-gateway: authenticated OpenAI-compatible gateway for DeepSeek-V4 on vLLM.")

DatabaseOpt = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy async URL (default: GATEWAY_DATABASE_URL)")
]


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (GATEWAY_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (GATEWAY_PORT)")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="vLLM base URL (GATEWAY_UPSTREAM); none: built-in simulator")
    ] = None,
    served_model: Annotated[str | None, typer.Option(help="Served model name (GATEWAY_SERVED_MODEL)")] = None,
    slots: Annotated[int | None, typer.Option(help="Upstream slots = vLLM --max-num-seqs")] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Run the gateway. Without an upstream, starts the built-in simulator on loopback and says so."""
    from gateway.serve import run_gateway

    config = settings(
        host=host,
        port=port,
        upstream=upstream,
        served_model=served_model,
        slots=slots,
        database_url=database_url,
    )
    uvloop.run(run_gateway(config))  # libuv's loop: the relay's per-chunk socket work costs less


@app.command()
def sim(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1")] = 8000,
    host: Annotated[str, typer.Option(help="Bind address")] = "127.0.0.1",
    slots: Annotated[int, typer.Option(help="Simulated --max-num-seqs")] = 2,
    decode_tps: Annotated[float, typer.Option(help="Decode rate per sequence, tokens/s")] = 90.0,
    k: Annotated[int, typer.Option(help="Speculative draft tokens per step (DSpark K)")] = 5,
    acceptance: Annotated[float, typer.Option(help="Per-position draft acceptance probability")] = 0.7,
    seed: Annotated[int, typer.Option(help="RNG seed (output is deterministic per seed)")] = 0,
    served_model: Annotated[str, typer.Option(help="Served model name")] = "deepseek-v4-flash-0731",
) -> None:
    """Run the DeepSeek-V4 vLLM simulator (no model: scripted text, vLLM-shaped API and /metrics)."""
    from gateway.sim import SimConfig, run_sim

    config = SimConfig(
        served_model_name=served_model,
        slots=slots,
        decode_tps=decode_tps,
        k=k,
        acceptance=acceptance,
        seed=seed,
    )
    run_sim(config, host=host, port=port)


@app.command()
def token(
    subject: Annotated[
        str, typer.Option("--sub", help="Who the token is for (shown as jwt:<sub>)")
    ] = "admin",
    scope: Annotated[list[str] | None, typer.Option(help="Scope to grant (repeatable), e.g. admin")] = None,
    ttl: Annotated[str, typer.Option(help="Lifetime, e.g. 15m")] = "15m",
) -> None:
    """Mint a short-lived gateway JWT (HS256 with GATEWAY_JWT_SECRET); printed alone on stdout."""
    from gateway.app import token_config

    config = token_config(settings())
    if config is None or not config.secret:
        raise fail("GATEWAY_JWT_SECRET is not set")
    try:
        ttl_s = parse_duration(ttl).total_seconds()
    except ValueError as exc:
        raise fail(str(exc)) from None
    from gateway.auth.tokens import mint

    typer.echo(mint(config, subject, list(scope or []), ttl_s))


class GroupBy(StrEnum):
    """How ``usage`` groups its totals."""

    day = "day"
    key = "key"
    model = "model"
    route = "route"


@app.command()
def usage(
    key: Annotated[str | None, typer.Option(help="Only this key name")] = None,
    since: Annotated[
        str | None, typer.Option(help="The last DURATION (e.g. 7d), or since an ISO date")
    ] = None,
    group_by: Annotated[GroupBy, typer.Option(help="Group totals by day, key, model or route")] = GroupBy.key,
    database_url: DatabaseOpt = None,
) -> None:
    """Token usage from the local ledger (GATEWAY_DATABASE_URL), as a table."""
    try:
        start = parse_since(since)
    except ValueError as exc:
        raise fail(str(exc)) from None

    async def read() -> list[dict[str, Any]]:
        engine = await open_engine(settings(database_url=database_url).database_url)
        try:
            return await UsageLedger(engine).usage(group_by.value, since=start, key_name=key)
        finally:
            await engine.dispose()

    table = Table(group_by.value, "requests", "prompt", "completion", "cached", "reasoning")
    columns = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")
    for row in asyncio.run(read()):
        table.add_row(str(row[group_by.value]), *(str(row[c] or 0) for c in columns))
    Console(width=160).print(table)
