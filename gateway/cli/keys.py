"""``dspark-gateway keys …``: manage API keys in the database, or on a running gateway with ``--url``.

The flags make the admin API's bodies (``POST /admin/keys``, ``PATCH /admin/keys/{id}``): the same
fields, validated by the same models (:mod:`gateway.admin.key_fields`) whichever way the CLI acts.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from gateway.admin.durations import parse_duration
from gateway.admin.key_fields import THINKING_CHOICES, thinking_level
from gateway.cli import output
from gateway.cli.failures import CliError, checked
from gateway.cli.keys_backend import KeysBackend, LocalKeys, RemoteKeys
from gateway.cli.options import AdminKeyOpt, DatabaseOpt, JsonOpt, UrlOpt, one_place
from gateway.cli.remote import AdminClient
from gateway.cli.settings import settings

keys_app = typer.Typer(
    help="Manage API keys: in the database, or on a running gateway with --url.", rich_markup_mode=None
)

Models = Annotated[
    str | None, typer.Option(help="Comma-separated model allow-list, or all (the default: every model)")
]
Rpm = Annotated[int | None, typer.Option(min=1, help="Requests per minute")]
Tpm = Annotated[int | None, typer.Option(min=1, help="Tokens per minute")]
Concurrency = Annotated[
    int | None, typer.Option("--max-concurrency", min=1, help="Requests in flight at once")
]
Priority = Annotated[int | None, typer.Option(min=1, max=100, help="Weight in the fair queue (default 1)")]
MaxWait = Annotated[
    float | None,
    typer.Option("--max-wait", min=0.001, help="Longest queue wait, s, before a request is refused at once"),
]
RequestClass = Annotated[
    str | None,
    typer.Option(
        "--class", help="interactive (default) or batch: the class of its requests, and the highest"
    ),
]
Thinking = Annotated[
    str | None,
    typer.Option(
        help=f"Thinking of this key's requests that choose none: {', '.join(THINKING_CHOICES)} "
        "(as a request's reasoning_effort; medium is kept as high)"
    ),
]
QuotaTokens = Annotated[
    int | None,
    typer.Option(
        "--quota", min=1, help="Token quota: the cost (weighted tokens) its requests may spend a period"
    ),
]
QuotaPeriod = Annotated[
    str | None, typer.Option("--quota-period", help="day, week or month (default): the quota's UTC period")
]
QuotaMode = Annotated[
    str | None,
    typer.Option("--quota-mode", help="enforce (default: refuse past it) or warn (only report it)"),
]
GroupOpt = Annotated[
    str | None, typer.Option("--group", help="The group (name or id) whose limits and quota it shares")
]
ExpiresIn = Annotated[str | None, typer.Option(help="Lifetime from now, e.g. 30d, 12h")]
Alias = Annotated[
    list[str] | None,
    typer.Option(
        "--alias",
        help="NAME=MODEL: requests of this key for model NAME get MODEL (repeatable; on update, the "
        "whole map is replaced)",
    ),
]


def grace_seconds(text: str) -> float:
    """``--grace``: a duration (``1h``), or ``0`` for none (the old secret stops at once), s."""
    if re.fullmatch(r"\s*0+(\.0*)?\s*[smhdw]?\s*", text, re.IGNORECASE):
        return 0.0
    return parse_duration(text).total_seconds()


def model_list(text: str) -> list[str] | None:
    """``--models``: ``"a, b"`` -> ``["a", "b"]``; ``all`` -> None (every model). ``ValueError`` for no
    name at all (a key allowed no model could do nothing: revoke it instead)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("give model names separated by commas, or all")
    return None if names == ["all"] else names


def alias_pair(pair: str) -> tuple[str, str]:
    """``"NAME=MODEL"`` as ``(NAME, MODEL)``; ``ValueError`` without a name or a model."""
    name, sep, model = (part.strip() for part in pair.partition("="))
    if not (sep and name and model):
        raise ValueError(f"give NAME=MODEL, not {pair!r}")
    return name, model


def backend(url: str | None, admin_key: str | None, database_url: str | None) -> KeysBackend:
    """Remote when ``url`` is given (an admin key then required), else the database."""
    one_place(url, database_url)
    if url:
        return RemoteKeys(AdminClient(url, admin_key))
    return LocalKeys(settings(database_url=database_url))


def _options(
    expires_in: str | None, models: str | None, rpm: int | None, tpm: int | None,
    max_concurrency: int | None, priority: int | None, thinking: str | None, alias: list[str] | None,
    max_wait: float | None = None, request_class: str | None = None, quota: int | None = None,
    quota_period: str | None = None, quota_mode: str | None = None, group: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The admin API's fields for the options given (the others left out); a bad duration or thinking
    mode is refused here, named by its flag."""
    checked("--expires-in", parse_duration, expires_in)
    checked("--thinking", thinking_level, thinking)
    given: dict[str, Any] = {
        "expires_in": expires_in,
        "rpm": rpm,
        "tpm": tpm,
        "max_concurrency": max_concurrency,
        "priority": priority,
        "default_thinking": thinking,
        "aliases": dict(checked("--alias", alias_pair, pair) for pair in alias) if alias else None,
        "max_wait_s": max_wait,
        "request_class": request_class,
        "quota_tokens": quota,
        "quota_period": quota_period,
        "quota_mode": quota_mode,
        "group": group,
    }
    options = {k: v for k, v in given.items() if v is not None}
    if models is not None:  # all: null, which an update needs to send
        options["models"] = checked("--models", model_list, models)
    return options


@keys_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Unique key name (shown in metrics and logs)")],
    expires_in: ExpiresIn = None,
    models: Models = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrency: Concurrency = None,
    priority: Priority = None,
    thinking: Thinking = None,
    alias: Alias = None,
    max_wait: MaxWait = None,
    request_class: RequestClass = None,
    quota: QuotaTokens = None,
    quota_period: QuotaPeriod = None,
    quota_mode: QuotaMode = None,
    group: GroupOpt = None,
    admin: Annotated[bool, typer.Option("--admin", help="Grant the admin scope (/admin routes)")] = False,
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            help="Grant a scope (repeatable): admin, or backend_fields (vLLM's scheduling, template "
            "and KV fields)",
        ),
    ] = None,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create a key. The key itself is printed once, alone on the last line of stdout (--json: in the
    JSON, as "key")."""
    body = {
        "name": name,
        **_options(
            expires_in, models, rpm, tpm, max_concurrency, priority, thinking, alias, max_wait, request_class,
            quota, quota_period, quota_mode, group,
        ),
    }  # fmt: skip
    scopes = set(scope or ()) | ({"admin"} if admin else set())
    if scopes:
        body["scopes"] = sorted(scopes)
    created = backend(url, admin_key, database_url).create(body)
    if json_out:
        output.emit(created, json_out, output.record)
        return
    typer.echo(f"Created key {created['name']!r} ({created['prefix']}), expires {_expiry(created)}.")
    typer.echo("Store it now: it is shown only once.")
    typer.echo(created["key"])


def _expiry(key: dict[str, Any]) -> str:
    return f"{output.when(key['expires_at'])} UTC" if key["expires_at"] else "never"


def _limits(key: dict[str, Any]) -> str:
    parts = [f"{label} {key[field]}" for field, label in _LIMITS if key[field] is not None]
    if key.get("quota_tokens") is not None:
        parts[-1] += f"/{key['quota_period']}" + (" warn" if key["quota_mode"] == "warn" else "")
    if key["priority"] != 1:
        parts.append(f"prio {key['priority']}")
    return output.joined(parts) or "-"


_LIMITS = (("rpm", "rpm"), ("tpm", "tpm"), ("max_concurrency", "conc"), ("quota_tokens", "quota"))


#: Below this width, a key's expiry shows its date over its time (the list fits 100 columns).
NARROW = 120


def keys_table(keys: list[dict[str, Any]]) -> Table:
    """One row a key: name, prefix, state, expiry, models and limits (one per line); --json: every
    field, last use too."""
    narrow = output.console().width < NARROW
    table = output.table("name", "prefix", "state", "expires (UTC)", "models", "limits", narrow=narrow)
    for k in keys:
        models = output.joined(k["models"]) if k["models"] is not None else "(all)"
        state = output.joined([k["status"], *(["admin"] if "admin" in k["scopes"] else [])])
        expires = output.when(k["expires_at"])[:16]  # to the minute
        table.add_row(k["name"], k["prefix"], state, expires, models, _limits(k))
    return table


@keys_app.command("list")
def list_keys(
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """List keys: name, prefix, state, expiry, models, limits (--json: every field)."""
    output.emit(backend(url, admin_key, database_url).list(), json_out, keys_table)


@keys_app.command("show")
def show(
    ref: str,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """One key (by name or id): every field."""
    output.emit(backend(url, admin_key, database_url).get(ref), json_out, output.record)


@keys_app.command("update")
def update(
    ref: str,
    expires_in: ExpiresIn = None,
    no_expiry: Annotated[bool, typer.Option("--no-expiry", help="Never expire")] = False,
    models: Models = None,
    rpm: Rpm = None,
    tpm: Tpm = None,
    max_concurrency: Concurrency = None,
    priority: Priority = None,
    thinking: Thinking = None,
    alias: Alias = None,
    max_wait: MaxWait = None,
    request_class: RequestClass = None,
    quota: QuotaTokens = None,
    quota_period: QuotaPeriod = None,
    quota_mode: QuotaMode = None,
    no_quota: Annotated[bool, typer.Option("--no-quota", help="Remove the key's quota")] = False,
    group: GroupOpt = None,
    no_group: Annotated[bool, typer.Option("--no-group", help="Take the key out of its group")] = False,
    no_aliases: Annotated[bool, typer.Option("--no-aliases", help="Remove the key's aliases")] = False,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Change a key's expiry, models, limits, quota, thinking default or aliases."""
    if no_expiry and expires_in:
        raise CliError("--no-expiry and --expires-in contradict each other: give one")
    if no_aliases and alias:
        raise CliError("--no-aliases and --alias contradict each other: give one")
    if no_quota and quota:
        raise CliError("--no-quota and --quota contradict each other: give one")
    if no_group and group:
        raise CliError("--no-group and --group contradict each other: give one")
    changes = _options(
        expires_in, models, rpm, tpm, max_concurrency, priority, thinking, alias, max_wait, request_class,
        quota, quota_period, quota_mode, group,
    )  # fmt: skip
    if no_quota:
        changes["quota_tokens"] = None
    if no_group:
        changes["group"] = None
    if no_expiry:
        changes["expires_at"] = None
    if no_aliases:
        changes["aliases"] = None
    if not changes:
        raise CliError("nothing to change: give at least one option (see --help)")
    updated = backend(url, admin_key, database_url).update(ref, changes)
    output.emit(updated, json_out, lambda key: f"Updated key {key['name']!r}: {', '.join(sorted(changes))}.")


@keys_app.command("rotate")
def rotate(
    ref: str,
    grace: Annotated[
        str | None,
        typer.Option(help="How long the old secret still works (default 24h; 0: it stops at once)"),
    ] = None,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Give a key a new secret (printed once, last line); the old one works for the grace period."""
    grace_s = checked("--grace", grace_seconds, grace)
    rotated = backend(url, admin_key, database_url).rotate(ref, grace_s)
    if json_out:
        output.emit(rotated, json_out, output.record)
        return
    until = rotated["previous_key_valid_until"]
    old = (
        f"the old secret works until {output.when(until)} UTC" if until else "the old secret no longer works"
    )
    typer.echo(f"Rotated key {rotated['name']!r}; {old}.")
    typer.echo(rotated["key"])


@keys_app.command("revoke")
def revoke(
    ref: str, url: UrlOpt = None, admin_key: AdminKeyOpt = None, database_url: DatabaseOpt = None
) -> None:
    """Revoke a key (name or id); gateways refuse it within GATEWAY_KEY_CACHE_TTL_S (default 1 s)."""
    key, revoked = backend(url, admin_key, database_url).revoke(ref)
    if revoked:
        typer.echo(f"Revoked key {ref!r}.")
    else:  # the state asked for holds: not a failure, and no second audit row
        when = datetime.fromisoformat(key["revoked_at"]).astimezone(UTC)
        typer.echo(f"Key {ref!r} was already revoked at {when:%Y-%m-%d %H:%M:%S} UTC; nothing changed.")


@keys_app.command("delete")
def delete(
    ref: str, url: UrlOpt = None, admin_key: AdminKeyOpt = None, database_url: DatabaseOpt = None
) -> None:
    """Delete a key (name or id) for good."""
    backend(url, admin_key, database_url).delete(ref)
    typer.echo(f"Deleted key {ref!r}.")
