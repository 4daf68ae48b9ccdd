"""The local CLI's key changes land in the audit trail exactly as the admin API's do: the same actions,
the same detail, only who acted (``cli:<user>`` from ``local``) and the key differ."""

from __future__ import annotations

import json
import os
import pwd
from datetime import UTC, datetime
from typing import Any

import httpx

from tests.cli.conftest import MODEL, Cli, last_line


def the_same_for_both(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """An audit entry without what differs between two keys changed the same way by two actors."""
    detail = {
        k: v for k, v in entry["detail"].items() if k not in ("actor_id", "actor_kind", "name", "prefix")
    }
    return entry["action"], detail


def test_cli_and_admin_api_leave_the_same_trail(start_sim, start_gateway, make_key, cli: Cli) -> None:
    gateway = start_gateway(start_sim().url)
    admin = httpx.Client(
        base_url=gateway.url + "/admin",
        headers={"Authorization": f"Bearer {make_key('root', scopes=['admin'])}"},
    )
    options = {"models": [MODEL, "other"], "rpm": 5, "priority": 2, "default_thinking": "medium"}

    made = admin.post("/keys", json={"name": "via-http", **options})
    assert made.status_code == 201, made.text
    assert admin.patch("/keys/via-http", json={"tpm": 900, "expires_at": None}).status_code == 200
    assert admin.post("/keys/via-http/rotate", json={"grace_s": 3600}).status_code == 200
    assert admin.post("/keys/via-http/revoke").status_code == 200
    assert admin.delete("/keys/via-http").status_code == 200

    flags = ("--models", f"{MODEL},other", "--rpm", "5", "--priority", "2", "--thinking", "medium")
    cli("keys", "create", "via-cli", *flags)
    cli("keys", "update", "via-cli", "--tpm", "900", "--no-expiry")
    cli("keys", "rotate", "via-cli", "--grace", "1h")
    cli("keys", "revoke", "via-cli")
    cli("keys", "delete", "via-cli")

    trail = admin.get("/audit").json()["data"]  # newest first
    by_cli, by_http = trail[:5], trail[5:10]
    assert [the_same_for_both(e) for e in by_cli] == [the_same_for_both(e) for e in by_http]
    assert [e["action"] for e in by_cli] == [
        "key.delete",
        "key.revoke",
        "key.rotate",
        "key.update",
        "key.create",
    ]
    created = by_cli[-1]["detail"]
    assert (created["name"], created["default_thinking"], created["scopes"]) == ("via-cli", "high", [])
    user = pwd.getpwuid(os.getuid()).pw_name  # the process's real user, whatever $USER says
    assert {(e["actor"], e["actor_id"], e["actor_kind"], e["client"]) for e in by_cli} == {
        (f"cli:{user}", f"cli:{user}", "cli", "local")
    }
    assert {(e["actor"], e["actor_kind"], e["client"]) for e in by_http} == {("root", "key", "127.0.0.1")}
    # the CLI reads the same trail from the database
    assert json.loads(cli("audit", "--json", "--limit", "10").stdout) == trail[:10]


def test_a_new_key_is_in_the_trail_by_prefix_never_by_secret(cli: Cli) -> None:
    secret = last_line(cli("keys", "create", "team-a", "--admin"))
    rotated = last_line(cli("keys", "rotate", "team-a"))
    trail = cli("audit", "--json").stdout
    assert secret not in trail and rotated not in trail
    entries = json.loads(trail)
    assert [e["detail"]["prefix"] for e in entries] == [rotated[:8] + "…", secret[:8] + "…"]
    assert entries[1]["detail"]["scopes"] == ["admin"]


def test_a_second_revoke_changes_nothing_and_says_so(start_sim, start_gateway, make_key, cli: Cli) -> None:
    """Locally and through the admin API: the key keeps its first revoked_at, no second audit row."""
    gateway = start_gateway(start_sim().url)
    admin_key = make_key("root", scopes=["admin"])
    remote = ("--url", gateway.url)
    ids: set[str] = set()
    for name, where in (("on-database", ()), ("on-gateway", remote)):
        cli("keys", "create", name)
        first = cli("keys", "revoke", name, *where, DSPARK_ADMIN_KEY=admin_key)
        assert first.stdout == f"Revoked key {name!r}.\n"
        key = json.loads(cli("keys", "show", name, "--json").stdout)
        ids.add(key["id"])
        again = cli("keys", "revoke", name, *where, DSPARK_ADMIN_KEY=admin_key)  # ok: status 0
        when = datetime.fromisoformat(key["revoked_at"]).astimezone(UTC)
        assert again.stdout == (
            f"Key {name!r} was already revoked at {when:%Y-%m-%d %H:%M:%S} UTC; nothing changed.\n"
        )
        assert json.loads(cli("keys", "show", name, "--json").stdout) == key
    trail = json.loads(cli("audit", "--json").stdout)
    revokes = [e["target"] for e in trail if e["action"] == "key.revoke"]
    assert sorted(revokes) == sorted(ids)
