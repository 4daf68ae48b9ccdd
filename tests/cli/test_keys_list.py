"""``keys list`` fits a terminal of 100 columns with nothing essential cut; ``--json`` has every field."""

from __future__ import annotations

import json

from tests.cli.conftest import MODEL, Cli


def test_keys_list_fits_100_columns_and_cuts_nothing(cli: Cli) -> None:
    models = f"{MODEL},claude-sonnet-4-5,gpt-5-codex"
    limits = ("--rpm", "600", "--tpm", "2000000", "--max-concurrency", "2", "--priority", "3")
    cli("keys", "create", "analytics-team-production", "--expires-in", "30d", "--models", models, *limits)
    cli("keys", "create", "ops", "--admin")
    cli("keys", "create", "old", "--expires-in", "1s")
    cli("keys", "revoke", "ops")
    keys = {k["name"]: k for k in json.loads(cli("keys", "list", "--json").stdout)}

    listing = cli("keys", "list", COLUMNS="100").stdout
    lines = listing.splitlines()
    assert max(len(line) for line in lines) <= 100, listing
    words = listing.split()
    team = keys["analytics-team-production"]
    essentials = [
        team["name"], team["prefix"], "active", team["expires_at"][:10], team["expires_at"][11:16],
        MODEL, "claude-sonnet-4-5", "gpt-5-codex", "600", "2000000", "conc", "prio",
        keys["ops"]["prefix"], "revoked", "admin", keys["old"]["prefix"], "expired", "(all)",
    ]  # fmt: skip
    assert [e for e in essentials if e not in words] == [], listing
    team_rows = [line for line in lines if "analytics-team-production" in line]
    assert len(team_rows) == 1 and team["prefix"] in team_rows[0]  # name and prefix on one row


def test_keys_list_json_has_the_admin_api_fields(cli: Cli) -> None:
    cli("keys", "create", "team-a", "--rpm", "5")
    (key,) = json.loads(cli("keys", "list", "--json").stdout)
    assert {"id", "name", "prefix", "status", "created_at", "expires_at", "revoked_at", "last_used_at",
            "models", "scopes", "default_thinking", "rpm", "tpm", "max_concurrency", "priority",
            "metadata", "previous_key_valid_until"} <= set(key)  # fmt: skip
    assert (key["name"], key["rpm"], key["status"]) == ("team-a", 5, "active")
