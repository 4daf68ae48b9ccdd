"""``dspark-gateway`` itself (its ``--debug``, ``--version``) and its commands other than ``keys``,
the reads, ``db`` and ``runtime``: serve, sim, token.

Flags override ``GATEWAY_*`` environment variables (they are passed to :class:`Settings` directly).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer
import uvloop
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.cli.failures import Invocation, checked
from gateway.cli.local import on_database
from gateway.cli.options import DatabaseOpt
from gateway.cli.settings import fail, settings
from gateway.durations import parse_duration

__all__ = ["DatabaseOpt", "app"]

app = typer.Typer(help="dspark-gateway: authenticated OpenAI-compatible gateway for DeepSeek-V4 on vLLM.")


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"dspark-gateway {version('dspark-gateway')}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", envvar="DSPARK_DEBUG", help="On a failure, Python's traceback instead of one line"
        ),
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit"),
    ] = False,
) -> None:
    ctx.ensure_object(Invocation).debug = debug


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (GATEWAY_HOST)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port (GATEWAY_PORT)")] = None,
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
    # named, and opened once before anything starts: an unreachable database, or one at another
    # schema (`db upgrade`), is the command's one-line failure as for every local command
    on_database(config, _opened, create=True)
    uvloop.run(run_gateway(config))  # libuv's loop: the relay's per-chunk socket work costs less


async def _opened(engine: AsyncEngine) -> None:
    """Nothing more to do with a database that opened."""


@app.command()
def sim(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port")] = 8000,
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
    lifetime = checked("--ttl", parse_duration, ttl)
    from gateway.auth.tokens import mint

    typer.echo(mint(config, subject, list(scope or []), lifetime.total_seconds()))
