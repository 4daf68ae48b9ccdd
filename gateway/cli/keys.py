"""``dspark-gateway keys …``: manage API keys locally (the database) or remotely (``--url``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gateway.cli.keys_backend import KeysBackend, KeysError, LocalKeys, RemoteKeys
from gateway.cli.settings import fail, settings
from gateway.durations import parse_duration

keys_app = typer.Typer(help="Manage API keys: in the local database, or on a running gateway with --url.")


class ThinkingLevel(StrEnum):
    """DeepSeek-V4 thinking modes (see gateway/openai_api/thinking.py)."""

    off = "off"
    low = "low"
    high = "high"
    max = "max"


Url = Annotated[
    str | None, typer.Option("--url", help="A running gateway (its /admin API) instead of the DB")
]
AdminKey = Annotated[str | None, typer.Option("--admin-key", help="Admin key or token for --url")]
Database = Annotated[str | None, typer.Option("--database-url", help="SQLAlchemy async URL (local mode)")]
Models = Annotated[str | None, typer.Option(help="Comma-separated model allow-list; default all")]
Rpm = Annotated[int | None, typer.Option(min=1, help="Requests per minute")]
Tpm = Annotated[int | None, typer.Option(min=1, help="Tokens per minute")]
Concurrency = Annotated[
    int | None, typer.Option("--max-concurrency", min=1, help="Requests in flight at once")
]
Priority = Annotated[int | None, typer.Option(min=1, max=100, help="Weight in the fair queue (default 1)")]
Thinking = Annotated[ThinkingLevel | None, typer.Option(help="Default thinking mode of this key")]


def backend(url: str | None, admin_key: str | None, database_url: str | None) -> KeysBackend:
    """Remote when ``url`` is given (``admin_key`` then required), else the local database."""
    if url:
        if not admin_key:
            raise fail("--url needs --admin-key")
        return RemoteKeys(url, admin_key)
    config = settings(database_url=database_url)
    return LocalKeys(config.database_url, config.rotate_grace_s)


def _fields(
    expires_in: str | None, models: str | None, rpm: int | None, tpm: int | None,
    max_concurrency: int | None, priority: int | None, thinking: ThinkingLevel | None,
) -> dict[str, Any]:  # fmt: skip
    fields: dict[str, Any] = {}
    if expires_in:
        try:
            fields["expires_at"] = datetime.now(UTC) + parse_duration(expires_in)
        except ValueError as exc:
            raise fail(str(exc)) from None
    if models is not None:
        fields["models"] = [m.strip() for m in models.split(",") if m.strip()]
    limits = {"rpm": rpm, "tpm": tpm, "max_concurrency": max_concurrency, "priority": priority}
    fields.update({k: v for k, v in limits.items() if v is not None})
    if thinking is not None:
        fields["default_thinking"] = thinking.value
    return fields


def _act(action: Any) -> Any:
    try:
        return action()
    except KeysError as exc:
        raise fail(str(exc)) from None


@keys_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Unique key name (shown in metrics and logs)")],
    expires_in: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h")] = None,
    models: Models = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrency: Concurrency = None,
    priority: Priority = None,
    thinking: Thinking = None,
    admin: Annotated[bool, typer.Option("--admin", help="Grant the admin scope (/admin routes)")] = False,
    url: Url = None,
    admin_key: AdminKey = None,
    database_url: Database = None,
) -> None:
    """Create a key. The key itself is printed once, alone on the last line of stdout."""
    fields = _fields(expires_in, models, rpm, tpm, max_concurrency, priority, thinking)
    if admin:
        fields["scopes"] = ["admin"]
    created = _act(lambda: backend(url, admin_key, database_url).create(name, fields))
    typer.echo(
        f"Created key {created['name']!r} ({created['prefix']}), expires {created['expires_at'] or 'never'}."
    )
    typer.echo("Store it now: it is shown only once.")
    typer.echo(created["key"])


def _when(value: str | None) -> str:
    return value[:16].replace("T", " ") if value else "-"


@keys_app.command("list")
def list_keys(url: Url = None, admin_key: AdminKey = None, database_url: Database = None) -> None:
    """List keys: name, prefix, dates, models, limits, status."""
    keys = _act(lambda: backend(url, admin_key, database_url).list())
    table = Table(
        "name", "id", "prefix", "created", "expires", "last used", "models", "rpm/tpm/conc/prio", "status"
    )
    for k in keys:
        limits = "/".join(str(k[f] or "-") for f in ("rpm", "tpm", "max_concurrency", "priority"))
        models = ",".join(k["models"]) if k["models"] is not None else "*"
        admin = " (admin)" if "admin" in k["scopes"] else ""
        table.add_row(
            k["name"] + admin, k["id"], k["prefix"], _when(k["created_at"]), _when(k["expires_at"]),
            _when(k["last_used_at"]), models, limits, k["status"],
        )  # fmt: skip
    Console(width=200).print(table)


@keys_app.command("show")
def show(ref: str, url: Url = None, admin_key: AdminKey = None, database_url: Database = None) -> None:
    """One key (by name or id) as JSON."""
    typer.echo(json.dumps(_act(lambda: backend(url, admin_key, database_url).get(ref)), indent=2))


@keys_app.command("update")
def update(
    ref: str,
    expires_in: Annotated[str | None, typer.Option(help="New lifetime from now, e.g. 30d")] = None,
    no_expiry: Annotated[bool, typer.Option("--no-expiry", help="Never expire")] = False,
    models: Models = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrency: Concurrency = None,
    priority: Priority = None,
    thinking: Thinking = None,
    url: Url = None,
    admin_key: AdminKey = None,
    database_url: Database = None,
) -> None:
    """Change a key's expiry, models, limits or thinking default."""
    changes = _fields(expires_in, models, rpm, tpm, max_concurrency, priority, thinking)
    if no_expiry:
        changes["expires_at"] = None
    if not changes:
        raise fail("nothing to change: give at least one option")
    updated = _act(lambda: backend(url, admin_key, database_url).update(ref, changes))
    typer.echo(json.dumps(updated, indent=2))


@keys_app.command("rotate")
def rotate(
    ref: str,
    grace: Annotated[
        str | None, typer.Option(help="How long the old secret still works (default 24h)")
    ] = None,
    url: Url = None,
    admin_key: AdminKey = None,
    database_url: Database = None,
) -> None:
    """Give a key a new secret (printed once, last line); the old one works for the grace period."""
    try:
        grace_s = parse_duration(grace).total_seconds() if grace else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    rotated = _act(lambda: backend(url, admin_key, database_url).rotate(ref, grace_s))
    typer.echo(
        f"Rotated key {rotated['name']!r}; the old secret works until {rotated['previous_key_valid_until']}."
    )
    typer.echo(rotated["key"])


@keys_app.command("revoke")
def revoke(ref: str, url: Url = None, admin_key: AdminKey = None, database_url: Database = None) -> None:
    """Revoke a key (name or id); gateways refuse it within GATEWAY_KEY_CACHE_TTL_S (default 1 s)."""
    _act(lambda: backend(url, admin_key, database_url).revoke(ref))
    typer.echo(f"Revoked key {ref!r}.")


@keys_app.command("delete")
def delete(ref: str, url: Url = None, admin_key: AdminKey = None, database_url: Database = None) -> None:
    """Delete a key (name or id) for good."""
    _act(lambda: backend(url, admin_key, database_url).delete(ref))
    typer.echo(f"Deleted key {ref!r}.")
