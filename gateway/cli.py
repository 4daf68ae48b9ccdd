"""``dspark-gateway`` command line (typer): serve, keys, sim.

Flags override ``GATEWAY_*`` environment variables (they are passed to :class:`Settings` directly).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.auth import KeyExistsError, KeyNotFoundError, KeyStore
from gateway.config import Settings
from gateway.db import open_engine
from gateway.durations import parse_duration
from gateway.telemetry.ledger import UsageLedger

app = typer.Typer(help="dspark-gateway: authenticated OpenAI-compatible gateway for DeepSeek-V4 on vLLM.")
keys_app = typer.Typer(help="Manage API keys in the local key store (GATEWAY_DATABASE_URL).")
app.add_typer(keys_app, name="keys")

T = TypeVar("T")


class ThinkingLevel(StrEnum):
    """DeepSeek-V4 thinking modes (see gateway/openai_api/thinking.py)."""

    off = "off"
    low = "low"
    high = "high"
    max = "max"


DatabaseOpt = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy async URL (default: GATEWAY_DATABASE_URL)")
]


def _settings(**overrides: Any) -> Settings:
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _with_engine(database_url: str | None, action: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    async def run() -> T:
        engine = await open_engine(_settings(database_url=database_url).database_url)
        try:
            return await action(engine)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _with_store(database_url: str | None, action: Callable[[KeyStore], Awaitable[T]]) -> T:
    return _with_engine(database_url, lambda engine: action(KeyStore(engine)))


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    return typer.Exit(code=1)


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

    settings = _settings(
        host=host,
        port=port,
        upstream=upstream,
        served_model=served_model,
        slots=slots,
        database_url=database_url,
    )
    asyncio.run(run_gateway(settings))


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


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Argument(help="Unique key name (shown in metrics and logs)")],
    expires_in: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h")] = None,
    models: Annotated[str | None, typer.Option(help="Comma-separated model allow-list; default all")] = None,
    thinking: Annotated[
        ThinkingLevel | None,
        typer.Option(help="This key's default thinking mode (else GATEWAY_DEFAULT_THINKING)"),
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Grant the admin scope (/admin routes)")] = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Create a key. The key itself is printed once, alone on the last line of stdout."""
    try:
        expires_at = datetime.now(UTC) + parse_duration(expires_in) if expires_in else None
    except ValueError as exc:
        raise _fail(str(exc)) from None
    allowed = [m.strip() for m in models.split(",") if m.strip()] if models else None
    try:
        record, secret = _with_store(
            database_url,
            lambda store: store.create(
                name,
                expires_at=expires_at,
                models=allowed,
                default_thinking=thinking.value if thinking else None,
            ),
        )
    except KeyExistsError:
        raise _fail(f"a key named {name!r} already exists") from None
    expiry = record.expires_at.isoformat(timespec="seconds") if record.expires_at else "never"
    typer.echo(f"Created key {record.name!r} ({record.prefix}), expires {expiry}.")
    typer.echo("Store it now: it is shown only once.")
    typer.echo(secret)


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else "-"


@keys_app.command("list")
def keys_list(database_url: DatabaseOpt = None) -> None:
    """List keys: name, prefix, created, expires, last used, status."""
    records = _with_store(database_url, lambda store: store.list())
    now = datetime.now(UTC)
    table = Table("name", "prefix", "created", "expires", "last used", "models", "status")
    for r in records:
        table.add_row(
            r.name,
            r.prefix,
            _when(r.created_at),
            _when(r.expires_at),
            _when(r.last_used_at),
            ",".join(r.models) if r.models is not None else "*",
            r.status(now),
        )
    Console(width=160).print(table)


@keys_app.command("revoke")
def keys_revoke(name: str, database_url: DatabaseOpt = None) -> None:
    """Revoke a key by name; running gateways refuse it within GATEWAY_KEY_CACHE_TTL_S (default 1 s)."""
    try:
        _with_store(database_url, lambda store: store.revoke(name))
    except KeyNotFoundError:
        raise _fail(f"no key named {name!r}") from None
    typer.echo(f"Revoked key {name!r}.")


class GroupBy(StrEnum):
    """How ``usage`` groups its totals."""

    day = "day"
    key = "key"
    model = "model"


@app.command()
def usage(
    key: Annotated[str | None, typer.Option(help="Only this key name")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only the last DURATION (e.g. 7d) or since an ISO date")
    ] = None,
    group_by: Annotated[GroupBy, typer.Option(help="Group totals by day, key or model")] = GroupBy.key,
    database_url: DatabaseOpt = None,
) -> None:
    """Token usage from the local ledger (GATEWAY_DATABASE_URL), as a table."""
    try:
        start = _since(since)
    except ValueError as exc:
        raise _fail(str(exc)) from None

    async def read(engine: AsyncEngine) -> list[dict[str, Any]]:
        return await UsageLedger(engine).usage(group_by.value, since=start, key_name=key)

    rows = _with_engine(database_url, read)
    table = Table(group_by.value, "requests", "prompt", "completion", "cached", "reasoning")
    for row in rows:
        table.add_row(
            str(row[group_by.value]),
            *(
                str(row[c] or 0)
                for c in (
                    "requests",
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "reasoning_tokens",
                )
            ),
        )
    Console(width=160).print(table)


def _since(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.now(UTC) - parse_duration(text)
    except ValueError:
        parsed = datetime.fromisoformat(text)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
