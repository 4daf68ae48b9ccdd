"""The CLI as a user runs it: real `dspark-gateway` processes sharing one SQLite key store."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.cli.conftest import BIN, MODEL, Cli, error_of, last_line
from tests.support.probes import wait_until
from tests.support.servers import free_port


@pytest.fixture
def served(env: dict[str, str], tmp_path: Path, database_url: str) -> Iterator[str]:
    """`dspark-gateway serve` with no upstream: it brings the simulator up itself."""
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen([BIN, "serve", "--port", str(port)], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return process.poll() is not None

    wait_until(ready, timeout_s=30, what="gateway ready")
    assert process.poll() is None, (tmp_path / "serve.log").read_text()
    yield url
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    log.close()
    output = (tmp_path / "serve.log").read_text()
    assert "SIMULATOR" in output
    assert output.splitlines()[0] == f"database: {database_url}"  # said before anything else


def test_keys_create_prints_the_key_last_and_list_shows_it(cli: Cli) -> None:
    key = last_line(cli("keys", "create", "team-a", "--expires-in", "30d", "--models", f"{MODEL},other"))
    assert key.startswith("dsk-") and len(key) == 47
    listing = cli("keys", "list").stdout
    assert "team-a" in listing and key[:8] in listing and "active" in listing
    assert key not in listing
    assert "already exists" in error_of(cli("keys", "create", "team-a", ok=False))
    assert "--expires-in" in error_of(cli("keys", "create", "x", "--expires-in", "soon", ok=False))
    assert error_of(cli("keys", "revoke", "nobody", ok=False)) == "error: no key 'nobody'"


def test_a_keys_quota_is_set_shown_changed_and_removed(cli: Cli) -> None:
    cli("keys", "create", "metered", "--quota", "50000", "--quota-period", "week")
    assert "quota 50000/week" in cli("keys", "list").stdout
    changed = json.loads(cli("keys", "update", "metered", "--quota-mode", "warn", "--json").stdout)
    assert (changed["quota_tokens"], changed["quota_period"], changed["quota_mode"]) == (
        50000,
        "week",
        "warn",
    )
    assert "quota_period" in error_of(cli("keys", "update", "metered", "--quota-period", "year", ok=False))
    removed = json.loads(cli("keys", "update", "metered", "--no-quota", "--json").stdout)
    assert (removed["quota_tokens"], removed["quota_period"]) == (None, None)


def test_groups_are_made_joined_listed_and_deleted_once_empty(cli: Cli) -> None:
    cli("groups", "create", "search", "--rpm", "30", "--quota", "1000000", "--quota-period", "month")
    cli("keys", "create", "search-a", "--group", "search")
    cli("keys", "create", "search-b")
    assert (
        json.loads(cli("keys", "update", "search-b", "--group", "search", "--json").stdout)["group"]
        == "search"
    )
    listing = cli("groups", "list").stdout
    assert "search" in listing and "1000000/month" in listing
    [group] = json.loads(cli("groups", "list", "--json").stdout)
    assert (group["keys"], group["rpm"]) == (2, 30)
    assert "still has keys" in error_of(cli("groups", "delete", "search", ok=False))
    assert "no group 'nowhere'" in error_of(cli("keys", "create", "lost", "--group", "nowhere", ok=False))
    for key in ("search-a", "search-b"):
        assert json.loads(cli("keys", "update", key, "--no-group", "--json").stdout)["group"] is None
    assert (
        json.loads(cli("groups", "update", "search", "--quota-mode", "warn", "--json").stdout)["quota_mode"]
        == "warn"
    )
    assert group["prefix_cache"] == "group"
    shared = cli("groups", "update", "search", "--prefix-cache", "shared", "--json").stdout
    assert json.loads(shared)["prefix_cache"] == "shared" and "shared" in cli("groups", "list").stdout
    cli("groups", "delete", "search")
    assert json.loads(cli("groups", "list", "--json").stdout) == []
    actions = cli("audit", "--json").stdout
    assert "group.create" in actions and "group.delete" in actions


def test_round_trip_and_revoke_lands_within_two_seconds(cli: Cli, served: str) -> None:
    key = last_line(cli("keys", "create", "app"))
    client = openai.OpenAI(base_url=served + "/v1", api_key=key, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content
    cli("keys", "revoke", "app")
    revoked_at = time.monotonic()
    wait_until(
        lambda: (
            httpx.get(served + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 401
        ),
        timeout_s=2.0,
        what="revocation to land",
    )
    assert time.monotonic() - revoked_at < 2.0
    assert "revoked" in cli("keys", "list").stdout


def test_sim_command_serves_a_labelled_simulator(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "sim.log").open("wb")
    process = subprocess.Popen(
        [BIN, "sim", "--port", str(port), "--slots", "3", "--k", "5", "--seed", "7"],
        env=env,
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(url + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, timeout_s=20, what="simulator up")
        listing = httpx.get(url + "/v1/models")
        assert listing.headers["x-dspark-simulator"] == "1"
        assert listing.json()["data"][0]["owned_by"] == "dspark-sim"
        assert "vllm:num_requests_running" in httpx.get(url + "/metrics").text
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        log.close()
    assert "simulator" in (tmp_path / "sim.log").read_text().lower()
