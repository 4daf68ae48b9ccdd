"""``dspark-gateway groups …``: groups of keys (a team's shared requests and tokens per minute and
token quota), in the database or on a running gateway with ``--url``; a key joins one with
``keys update NAME --group GROUP``. The flags make the admin API's bodies (``/admin/groups``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from gateway.cli import output
from gateway.cli.failures import CliError
from gateway.cli.keys import QuotaMode, QuotaPeriod, QuotaTokens, Rpm, Tpm, backend
from gateway.cli.options import AdminKeyOpt, DatabaseOpt, JsonOpt, UrlOpt

PrefixCache = Annotated[
    str | None,
    typer.Option(
        "--prefix-cache",
        help="group (default): its keys reuse cached prompt prefixes of their own group only; "
        "shared: of every shared group",
    ),
]

groups_app = typer.Typer(
    help="Manage groups of keys: shared limits and quota (database, or --url).", rich_markup_mode=None
)


def _fields(
    rpm: int | None,
    tpm: int | None,
    quota: int | None,
    quota_period: str | None,
    quota_mode: str | None,
    prefix_cache: str | None,
) -> dict[str, Any]:
    given = {
        "rpm": rpm,
        "tpm": tpm,
        "quota_tokens": quota,
        "quota_period": quota_period,
        "quota_mode": quota_mode,
        "prefix_cache": prefix_cache,
    }
    return {name: value for name, value in given.items() if value is not None}


@groups_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Unique group name (shown in the ledger and listings)")],
    rpm: Rpm = None,
    tpm: Tpm = None,
    quota: QuotaTokens = None,
    quota_period: QuotaPeriod = None,
    quota_mode: QuotaMode = None,
    prefix_cache: PrefixCache = None,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create a group; its keys share the limits and quota given, and their cached prompt prefixes."""
    body = {"name": name, **_fields(rpm, tpm, quota, quota_period, quota_mode, prefix_cache)}
    created = backend(url, admin_key, database_url).create_group(body)
    output.emit(created, json_out, lambda group: f"Created group {group['name']!r}.")


def groups_table(groups: list[dict[str, Any]]) -> Table:
    """One row a group: name, keys, rpm, tpm, quota, prefix cache."""
    table = output.table("name", "keys", "rpm", "tpm", "quota", "prefix cache")
    for g in groups:
        quota = f"{g['quota_tokens']}/{g['quota_period']}" if g["quota_tokens"] is not None else "-"
        if g["quota_mode"] == "warn":
            quota += " warn"
        rpm, tpm = str(g["rpm"] or "-"), str(g["tpm"] or "-")
        table.add_row(g["name"], str(g["keys"]), rpm, tpm, quota, g.get("prefix_cache", "group"))
    return table


@groups_app.command("list")
def list_groups(
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """List groups: name, number of keys, limits, quota (--json: every field)."""
    output.emit(backend(url, admin_key, database_url).list_groups(), json_out, groups_table)


@groups_app.command("show")
def show(
    ref: str,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """One group (by name or id): every field."""
    output.emit(backend(url, admin_key, database_url).get_group(ref), json_out, output.record)


@groups_app.command("update")
def update(
    ref: str,
    rpm: Rpm = None,
    tpm: Tpm = None,
    quota: QuotaTokens = None,
    quota_period: QuotaPeriod = None,
    quota_mode: QuotaMode = None,
    prefix_cache: PrefixCache = None,
    no_quota: Annotated[bool, typer.Option("--no-quota", help="Remove the group's quota")] = False,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Change a group's limits, quota or prefix-cache sharing."""
    if no_quota and quota:
        raise CliError("--no-quota and --quota contradict each other: give one")
    changes = _fields(rpm, tpm, quota, quota_period, quota_mode, prefix_cache)
    if no_quota:
        changes["quota_tokens"] = None
    if not changes:
        raise CliError("nothing to change: give at least one option (see --help)")
    updated = backend(url, admin_key, database_url).update_group(ref, changes)
    output.emit(
        updated, json_out, lambda group: f"Updated group {group['name']!r}: {', '.join(sorted(changes))}."
    )


@groups_app.command("delete")
def delete(
    ref: str, url: UrlOpt = None, admin_key: AdminKeyOpt = None, database_url: DatabaseOpt = None
) -> None:
    """Delete a group (name or id) that has no keys."""
    backend(url, admin_key, database_url).delete_group(ref)
    typer.echo(f"Deleted group {ref!r}.")
