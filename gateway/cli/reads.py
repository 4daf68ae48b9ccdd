"""``dspark-gateway usage | audit | requests | status``: the admin API's reads, from a running gateway
(``--url``: ``GET /admin/usage``, ``/admin/audit``, ``/admin/requests``, ``/admin/status``) or, but
for ``status`` (the live slots and queue of a process), from the database.

A table for people; ``--json`` prints the API's ``data`` array (``status``: its object) with the API's
keys, the same from either source.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, Any, Protocol, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.admin.durations import parse_since
from gateway.admission.capacity import Reason
from gateway.auth.audit import AuditLog
from gateway.cli import output
from gateway.cli.failures import CliError, checked
from gateway.cli.local import on_database
from gateway.cli.options import AdminKeyOpt, DatabaseOpt, JsonOpt, UrlOpt, one_place
from gateway.cli.remote import AdminClient
from gateway.cli.settings import settings
from gateway.telemetry.ledger import UsageLedger

T = TypeVar("T")
Limit = Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first")]


def _read(
    url: str | None,
    admin_key: str | None,
    database_url: str | None,
    remote: Callable[[AdminClient], T],
    local: Callable[[AsyncEngine], Awaitable[T]],
) -> T:
    """``remote`` on the gateway at ``url`` if given, else ``local`` on the database."""
    one_place(url, database_url)
    if url:
        return remote(AdminClient(url, admin_key))
    return on_database(settings(database_url=database_url), local)


class _Recent(Protocol):
    async def recent(self, limit: int) -> list[dict[str, Any]]: ...


def _newest(
    path: str,
    reader: Callable[[AsyncEngine], _Recent],
    limit: int,
    url: str | None,
    admin_key: str | None,
    database_url: str | None,
) -> list[dict[str, Any]]:
    """The ``limit`` newest rows of an admin listing (``/admin`` + ``path``, ``?limit=``), or of its
    store on the database (``reader(engine).recent(limit)``: the audit trail, the usage ledger)."""
    return _read(
        url,
        admin_key,
        database_url,
        lambda api: api.call("GET", path, params={"limit": limit})["data"],
        lambda engine: reader(engine).recent(limit),
    )


def _detail(detail: Any) -> str:
    """An audit row's detail, one ``field value`` a line, an update's ``field before → after`` (who
    acted and the target's name are in their own columns)."""
    if not isinstance(detail, dict):
        return json.dumps(detail, ensure_ascii=False)
    changes = detail.get("changes")
    if isinstance(changes, dict):
        lines = [
            f"{field} {output.shown(change.get('from'))} → {output.shown(change.get('to'))}"
            for field, change in changes.items()
            if isinstance(change, dict)
        ]
        return output.joined(lines) or "nothing"
    lines = [
        f"{field} {output.shown(value)}"
        for field, value in detail.items()
        if field not in ("actor_id", "actor_kind", "name")
    ]
    return output.joined(lines) or "-"


def _number(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


class GroupBy(StrEnum):
    """How ``usage`` groups its totals."""

    day = "day"
    key = "key"
    group = "group"
    model = "model"
    route = "route"
    batch = "batch"


_USAGE = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")


def usage(
    key: Annotated[str | None, typer.Option(help="Only this key name")] = None,
    since: Annotated[
        str | None, typer.Option(help="The last DURATION (e.g. 7d), or since an ISO date")
    ] = None,
    group_by: Annotated[
        GroupBy, typer.Option(help="Group totals by day, key, group (of keys), model, route or batch")
    ] = GroupBy.key,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Token totals from the usage ledger: requests, prompt, completion, cached, reasoning tokens."""
    start = checked("--since", parse_since, since)
    params = {"group_by": group_by.value, "since": since, "key": key}
    rows = _read(
        url,
        admin_key,
        database_url,
        lambda api: api.call("GET", "/usage", params={k: v for k, v in params.items() if v})["data"],
        lambda engine: UsageLedger(engine).usage(group_by.value, since=start, key_name=key),
    )

    def table(rows: list[dict[str, Any]]) -> Table:
        out = output.table(group_by.value, "requests", "prompt", "completion", "cached", "reasoning")
        for row in rows:
            name = row[group_by.value]
            out.add_row("(none)" if name is None else str(name), *(_number(row[c] or 0) for c in _USAGE))
        return out

    output.emit(rows, json_out, table)


def audit(
    limit: Limit = 100,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """The audit trail: who did what to which key, when, from where (newest first)."""
    rows = _newest("/audit", AuditLog, limit, url, admin_key, database_url)

    def table(rows: list[dict[str, Any]]) -> Table:
        out = output.table("at (UTC)", "actor", "action", "target", "client", "detail")
        for row in rows:
            out.add_row(
                output.when(row["at"]),
                f"{row['actor']} ({row['actor_kind']})",
                row["action"],
                " ".join(filter(None, (row.get("target_name"), row["target"]))) or "-",
                row["client"] or "-",
                _detail(row["detail"]),
            )
        return out

    output.emit(rows, json_out, table)


def requests(
    limit: Limit = 50,
    json_out: JsonOpt = False,
    url: UrlOpt = None,
    admin_key: AdminKeyOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Recent requests' telemetry from the usage ledger (no prompt text, no keys), newest first."""
    rows = _newest("/requests", UsageLedger, limit, url, admin_key, database_url)

    def table(rows: list[dict[str, Any]]) -> Table:
        out = output.table(
            "arrived (UTC)", "key", "route", "status", "prompt", "output", "ttft s", "e2e s", "tok/s"
        )
        for row in rows:
            out.add_row(
                output.when(row["arrived_at"]),
                row["key_name"],
                row["route"],
                str(row["status"]),
                _number(row["prompt_tokens"]),
                _number(row["completion_tokens"]),
                _number(row["ttft_s"], 3),
                _number(row["e2e_s"], 3),
                _number(row["decode_tokens_per_s"], 1),
            )
        return out

    output.emit(rows, json_out, table)


def status(json_out: JsonOpt = False, url: UrlOpt = None, admin_key: AdminKeyOpt = None) -> None:
    """A running gateway's slots and queue, per key in flight and waiting, and each backend when
    there are several or admission is shared (needs --url: they live in the gateway's process or its
    Redis, not in the database)."""
    if not url:
        raise CliError("status is a running gateway's: give --url (and an admin key)")
    state: dict[str, Any] = AdminClient(url, admin_key).call("GET", "/status")
    if json_out:
        typer.echo(json.dumps(state, indent=2))
        return
    console = Console()
    console.print(
        f"slots {state['slots_in_use']}/{state['slots_total']} in use, {state['queue_depth']} waiting",
        highlight=False,
    )
    waiting = state["waiting_for"].items()
    waits = ", ".join(f"{count} waiting for {Reason(reason).phrase}" for reason, count in waiting if count)
    budget = state["kv_budget_tokens"]
    console.print(
        f"KV {state['kv_reserved_tokens']:,}/{budget:,} tokens reserved; "
        if budget is not None
        else f"KV {state['kv_reserved_tokens']:,} tokens reserved; ",
        f"long prompts (>= {state['long_prompt_tokens']:,} tokens) {state['long_in_use']}/"
        f"{state['long_slots']}" + (f"; waiting {waits}" if waits else ""),
        sep="",
        highlight=False,
    )
    backends = state.get("backends", [])
    if len(backends) > 1 or any(b.get("shared") for b in backends):
        table = output.table("backend", "up", "slots", "waiting", "KV reserved")
        for backend in backends:
            table.add_row(
                backend["name"],
                "yes" if backend["up"] else "no",
                f"{backend['slots_in_use']}/{backend['slots_total']}",
                str(backend["queue_depth"]),
                f"{backend['kv_reserved_tokens']:,}",
            )
        console.print(table)
    table = output.table("key", "in flight", "waiting")
    for name, counts in state["keys"].items():
        table.add_row(name, str(counts["in_flight"]), str(counts["waiting"]))
    if state["keys"]:
        console.print(table)
    if "upstream" in state:
        console.print(f"upstream: {_traits(state['upstream'])}", highlight=False)
    else:
        for backend in backends:
            console.print(f"upstream {backend['name']}: {_traits(backend['upstream'])}", highlight=False)


def _traits(learnt: dict[str, Any]) -> str:
    """``splits reasoning yes, per request metrics unknown, …`` (``/admin/status``'s ``upstream``)."""
    return ", ".join(f"{trait.replace('_', ' ')} {_learnt(seen)}" for trait, seen in learnt.items())


def _learnt(value: Any) -> str:
    """A trait the gateway learns about a backend (``gateway.backends.traits``: True, False or None for not
    seen yet) as ``yes``, ``no`` or ``unknown``."""
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return output.shown(value)
